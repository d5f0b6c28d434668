"""Kernels as numba-cuda's authors write them, compiled ahead of time with no GPU: eager
signatures, records, pointers, 0-d arrays, grid sync, linked CUDA C++, numba's documentation
kernels; and the texts of the errors for what cannot be built."""

from __future__ import annotations

import os

import pytest

try:
    import numba.cuda  # noqa: F401

    _SKIP = None
except Exception as e:  # pragma: no cover - depends on the environment
    _SKIP = "numba-cuda not importable: %s" % (e,)

pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

from gpu_compiler import CompileError  # noqa: E402
from gpu_compiler.compile import CompileOptions, compile_source  # noqa: E402

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
TESTDATA = "src/python/gpu_compiler/testdata/"
DOCS = "src/python/numba_docs/kernels/"
OPTS = CompileOptions(sys_path=("src/python",))


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(os.path.abspath(REPO_ROOT))


def _kernels(result):
    return {k.name + "/" + m.name: (k, m) for m in result.modules for k in m.kernels}


def test_eager_signature_forms_compile_as_written():
    r = compile_source(TESTDATA + "eager_forms.py", "sm_90", OPTS)
    got = {name: k.signature for name, (k, _m) in _kernels(r).items()}
    assert got == {
        "from_string/from_string__0": "void(float32[::1], float32)",
        "from_signature/from_signature__0": "void(CPointer(float32), void*, float32[:, ::1])",
        "from_tuple/from_tuple__0": "void(int32[::1])",
        "from_list/from_list__0": "void(float64[::1])",
        "from_list/from_list__1": "void(int64[::1])",
        "lazy/lazy__0": "void(float32[::1], float32[()])",
    }
    k, _ = _kernels(r)["from_signature/from_signature__0"]
    assert k.args == [
        {"kind": "pointer", "dtype": "float32"},
        {"kind": "pointer", "dtype": "void"},
        {"kind": "array", "dtype": "float32", "ndim": 2, "layout": "C"},
    ]
    assert k.params[:2] == ["u64", "u64"]
    lazy, _ = _kernels(r)["lazy/lazy__0"]
    assert (lazy.args or [])[1] == {"kind": "array", "dtype": "float32", "ndim": 0, "layout": "C"}
    assert all(not k.cooperative for k, _m in _kernels(r).values())


DOC_KERNELS = [
    "vecadd",
    "matmul",
    "reduction",
    "globals",
    "laplace",
    "cg",
    "montecarlo",
    "ffi",
    "random3d",
    "sessionize",
    "ufunc",
    "cpu_gpu_compat",
    "ffi_from_buffer",
    "ffi_extra_includes",
]


@pytest.mark.parametrize("name", DOC_KERNELS + ["cpointer"])
@pytest.mark.parametrize("cap", ["sm_87", "sm_90"])
def test_doc_kernels_build(name, cap, search_paths_restored):
    r = compile_source(DOCS + name + ".py", cap, OPTS)
    assert r.modules and all(m.cubin for m in r.modules)
    files = r.files()
    for m in r.modules:
        for p in m.parts:
            assert files[p.file] == p.data
    coop = {k.name for m in r.modules for k in m.kernels if k.cooperative}
    want_coop = {
        "laplace": "solve_heat_equation",
        "cg": "sequential_rows",
        "sessionize": "sessionize",
    }
    assert coop == ({want_coop[name]} if name in want_coop else set())
    link = {p.file for m in r.modules for p in m.parts}
    if name in want_coop:  # the wheel's libcudadevrt has no sm_87 code
        assert link == ({"libcudadevrt.a"} if cap == "sm_90" else {"cg_grid_sync.ptx"})
    elif name in ("ffi", "ffi_from_buffer"):
        assert link == {"functions.ptx"}
    elif name == "ffi_extra_includes":
        assert link == {"saxpy.ptx"}
    else:
        assert link == set()


def test_record_array_argument_metadata():
    r = compile_source(DOCS + "montecarlo.py", "sm_90", OPTS)
    (k,) = [k for m in r.modules for k in m.kernels]
    assert (k.args or [])[1] == {
        "kind": "array",
        "dtype": {
            "fields": [["s0", "uint64", 0], ["s1", "uint64", 8]],
            "itemsize": 16,
            "aligned": True,
        },
        "ndim": 1,
        "layout": "C",
    }


def _error(path: str, cap: str = "sm_90") -> str:
    with pytest.raises(CompileError) as e:
        compile_source(path, cap, OPTS)
    text = str(e.value)
    assert not any(ord(c) < 32 and c not in "\n\t" for c in text), repr(text)
    return text


def test_missing_package_says_where_toolchain_packages_come_from():
    text = _error(TESTDATA + "missing_package.py")
    assert "missing_package.py:1: error: importing the kernel source failed" in text
    assert "'cupy' is not installed in the compile toolchain" in text
    assert "3rdparty/python/<toolchain>-requirements.txt" in text
    assert "`cupy==<version>`" in text and "generate-lockfiles" in text


def test_undefined_device_function_names_module_source_and_symbol():
    text = _error(TESTDATA + "undeclared_link.py")
    assert text.startswith(
        TESTDATA + "undeclared_link.py: error: nvJitLink failed to link module k__0 for sm_90 "
        "(objects: k__0.ptx)"
    )
    assert "missing symbols: mul_f32_f32 (used by k__0.ptx)" in text
    assert "cuda.declare_device('mul_f32_f32', sig, link=...)" in text


def test_unsupported_link_kind_is_refused_not_dropped():
    text = _error(TESTDATA + "bad_link_kind.py")
    assert "kernel 'k' links " in text and "helpers.o" in text
    assert "linking .o files is not supported by the AOT compiler" in text


def test_no_signature_anywhere_explains_both_forms():
    text = _error(TESTDATA + "no_signatures.py")
    assert "no kernel has a signature" in text and "@cuda.jit(" in text and "AOT_SIGNATURES" in text


@pytest.fixture
def search_paths_restored(monkeypatch):
    """numba's config is process-wide: a kernel module that sets CUDA_NVRTC_EXTRA_SEARCH_PATHS
    would leave it set for the next test's compile."""
    from numba.cuda import config

    monkeypatch.setattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", "", raising=False)


def test_extra_search_paths_resolve_inside_the_inputs(search_paths_restored):
    """The docs' ex_extra_search_paths: `#include <add.cuh>` and `<mul.cuh>` of the linked
    saxpy.cu are found through the directories the module puts in numba's config."""
    r = compile_source(DOCS + "ffi_extra_includes.py", "sm_90", OPTS)
    assert [k.name for m in r.modules for k in m.kernels] == ["vector_saxpy"]


def test_an_extra_search_path_outside_the_inputs_is_refused(search_paths_restored):
    with pytest.raises(CompileError) as e:
        compile_source(TESTDATA + "search_path_outside.py", "sm_90", OPTS)
    message = str(e.value)
    assert "CUDA_NVRTC_EXTRA_SEARCH_PATHS names /usr/include, outside the compile's inputs" in (
        message
    )
    assert "\n" not in message.strip()


HEADER_DIRS = [DOCS + "ffi/include", DOCS + "data/include"]


def test_include_dirs_apply_to_the_cuda_cpp_a_numba_source_links(search_paths_restored):
    """The target's `include_dirs` on a numba source: where the linked saxpy.cu's
    `#include <add.cuh>` / `<mul.cuh>` are found (numba's search paths unset)."""
    options = CompileOptions(sys_path=("src/python",), include_dirs=tuple(HEADER_DIRS))
    r = compile_source(TESTDATA + "links_with_include_dirs.py", "sm_90", options)
    assert [k.name for m in r.modules for k in m.kernels] == ["k"]
    assert {p.file for m in r.modules for p in m.parts} == {"saxpy.ptx"}
    assert r.options.include_dirs == tuple(HEADER_DIRS)
    text = _error(TESTDATA + "links_with_include_dirs.py")  # none: NVRTC finds no add.cuh
    assert "add.cuh" in text


def test_include_dirs_outside_the_inputs_are_refused_for_a_numba_source(search_paths_restored):
    options = CompileOptions(sys_path=("src/python",), include_dirs=("/usr/include",))
    with pytest.raises(CompileError) as e:
        compile_source(TESTDATA + "links_with_include_dirs.py", "sm_90", options)
    message = str(e.value)
    assert message.startswith(TESTDATA + "links_with_include_dirs.py: error: ")
    assert "the target's `include_dirs` names /usr/include, outside the compile's inputs" in (
        message
    )
    assert "fix: keep the headers in the repository" in message and "\n" not in message.strip()
