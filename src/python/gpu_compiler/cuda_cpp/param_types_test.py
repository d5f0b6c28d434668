"""Declared parameter types of CUDA C++ kernels: the demangler, and NVRTC through it."""

from __future__ import annotations

from typing import Dict, List, Optional

import pytest

from gpu_compiler.cuda_cpp.backend import compile_cuda_source
from gpu_compiler.cuda_cpp.param_types import declared_param_types, demangle_params
from gpu_spec.compile.options import CompileOptions

TESTDATA = "src/python/gpu_compiler/testdata/"


@pytest.mark.parametrize(
    "mangled, params",
    [
        # lowered names NVRTC 13.0 gave the probe (substitutions count the template name first)
        ("_Z23__gpu_build_param_typesIPFvPKfPfiEEvv", ["const float*", "float*", "int"]),
        (
            "_Z23__gpu_build_param_typesIPFvPKfijPdPhxy1PPN2ns1QEbsacS1_Pf6__halfPS9_PvPKvlmPS8_EEvv",
            ["const float*", "int", "unsigned int", "double*", "unsigned char*", "long long"]
            + ["unsigned long long", "P", "ns::Q*", "bool", "short", "signed char", "char"]
            + ["const float*", "float*", "__half", "__half*", "void*", "const void*", "long"]
            + ["unsigned long", "float**"],
        ),
        ("_Z23__gpu_build_param_typesIPFvvEEvv", []),
        # C++-linkage kernels' own entry names
        ("_Z1giPj", ["int", "unsigned int*"]),
        ("_ZN2ns1kEPfPNS_1QES2_", ["float*", "ns::Q*", "ns::Q*"]),
        ("_Z1kv", []),
    ],
)
def test_demangle(mangled, params):
    assert demangle_params(mangled) == params


@pytest.mark.parametrize(
    "mangled",
    ["sobel", "_Z6matmulIfLi16EEvPKT_S2_PS0_iii", "_Z1kSt6vector", "_Z1kPS3_", "_Z1kU3foo"],
)
def test_what_it_cannot_read_is_none(mangled):
    assert demangle_params(mangled) is None


def test_a_failed_probe_is_retried_kernel_by_kernel():
    calls: List[List[str]] = []

    def probe(exprs: List[str]) -> Optional[Dict[str, str]]:
        calls.append(exprs)
        if len(exprs) > 1 or "bad" in exprs[0]:
            return None
        return {exprs[0]: "_Z23__gpu_build_param_typesIPFvPfiEEvv"}

    got = declared_param_types(
        [("good", None, 2), ("bad", None, 1), ("_Z1kPf", None, 1), ("_Z1hPf", None, 2)], probe
    )
    assert got == {"good": ["float*", "int"], "_Z1kPf": ["float*"]}
    assert len(calls) == 3  # all at once, then each alone; "_Z1hPf": 1 type for 2 params


def test_nvrtc_declared_types_of_extern_c_namespaced_and_template_kernels():
    options = CompileOptions(name_expressions=("axpy<float>", "&axpy<double>"))
    r = compile_cuda_source(TESTDATA + "declared_types.cu", "sm_90", options)
    by_name = {k.name: k.c_types for k in r.kernels}
    assert by_name["scale"] == [
        "const double*",
        "double*",
        "unsigned int",
        "int",
        "Params*",
        "unsigned char",
    ]
    assert by_name["_ZN3ops4fillEPfxPK6Params"] == ["float*", "long long", "const Params*"]
    assert by_name["axpy<float>"] == ["float", "const float*", "float*", "unsigned int"]
    assert by_name["&axpy<double>"] == ["double", "const double*", "double*", "unsigned int"]
