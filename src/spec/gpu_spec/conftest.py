"""Test fixtures of the file formats: compile metadata as gpu_compiler writes it, bundles on disk.

Shared by the runtime's tests (`gpu_runtime/conftest.py` imports them).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

from gpu_spec.manifest.build import build_manifest
from gpu_spec.manifest.model import MANIFEST_NAME, dumps_manifest
from gpu_spec.manifest.paths import variant_dir
from gpu_spec.ptx_isa import min_driver_for_ptx

TOOLCHAIN = {"cuda": "13.0", "numba-cuda": "0.30.4", "nvrtc": "13.0.88", "nvjitlink": "13.0.88"}
SHA_SRC = "ab" * 32


def numba_array_params(ndim: int) -> List[str]:
    return ["u64"] * (5 + 2 * ndim)


def _kernel(name: str, entry: str, sig: Optional[str], abi: str, args, params) -> Dict[str, Any]:
    return {
        "name": name,
        "entry": entry,
        "signature": sig,
        "abi": abi,
        "args": args,
        "params": params,
        "resources": {
            "registers": 12,
            "shared_bytes": 0,
            "local_bytes": 0,
            "spill_stores": 0,
            "spill_loads": 0,
        },
    }


def arr(dtype: Any, ndim: int, layout: str = "C") -> Dict[str, Any]:
    return {"kind": "array", "dtype": dtype, "ndim": ndim, "layout": layout}


def scal(dtype: str) -> Dict[str, Any]:
    return {"kind": "scalar", "dtype": dtype}


# Module definitions per source: [(module name, [kernel dicts])]
SAXPY = [
    (
        "saxpy__0",
        [
            _kernel(
                "saxpy",
                "_ZN6cudapy5saxpy5saxpyB2v1E5ArrayIfLi1E1C7mutable7alignedEfS2_S2_",
                "void(float32[::1], float32, float32[::1], float32[::1])",
                "numba",
                [arr("float32", 1), scal("float32"), arr("float32", 1), arr("float32", 1)],
                numba_array_params(1) + ["f32"] + numba_array_params(1) * 2,
            )
        ],
    )
]

HISTOGRAM = [
    (
        "histogram_256__0",
        [
            _kernel(
                "histogram_256",
                "_Zhist0",
                "void(uint8[::1], uint32[::1])",
                "numba",
                [arr("uint8", 1), arr("uint32", 1)],
                numba_array_params(1) * 2,
            )
        ],
    ),
    (
        "histogram_256__1",
        [
            _kernel(
                "histogram_256",
                "_Zhist1",
                "void(uint8[:], uint32[::1])",
                "numba",
                [arr("uint8", 1, "A"), arr("uint32", 1)],
                numba_array_params(1) * 2,
            )
        ],
    ),
    (
        "sum_f32__0",
        [
            _kernel(
                "sum_f32",
                "_Zsum0",
                "void(float32[::1], float32[::1])",
                "numba",
                [arr("float32", 1), arr("float32", 1)],
                numba_array_params(1) * 2,
            )
        ],
    ),
]

# matmul<float, 16> as today's compiler writes it (with the declared C types), matmul<double, 16>
# and sobel as older ones did (PTX types only): manifests of both kinds stay readable.
MATMUL = [
    (
        "matmul",
        [
            dict(
                _kernel(
                    "matmul<float, 16>",
                    "_Z6matmulIfLi16EEvPKT_S2_PS0_iii",
                    None,
                    "c",
                    None,
                    ["u64", "u64", "u64", "u32", "u32", "u32"],
                ),
                c_types=["const float*", "const float*", "float*", "int", "int", "int"],
            ),
            _kernel(
                "matmul<double, 16>",
                "_Z6matmulIdLi16EEvPKT_S2_PS0_iii",
                None,
                "c",
                None,
                ["u64", "u64", "u64", "u32", "u32", "u32"],
            ),
        ],
    )
]

# matmul.cu as the example's BUILD compiles it: with matmul_ld, BLAS's shape (10 arguments).
MATMUL_WITH_LD = [
    (
        "matmul",
        MATMUL[0][1]
        + [
            _kernel(
                f"matmul_ld<{t}, 16>",
                f"_Z9matmul_ldI{c}Li16EEvPKT_iS2_iPS0_iiiiS0_",
                None,
                "c",
                None,
                ["u64", "u32", "u64", "u32", "u64", "u32", "u32", "u32", "u32", f],
            )
            for t, c, f in (("float", "f", "f32"), ("double", "d", "f64"))
        ],
    )
]

SOBEL = [
    (
        "sobel",
        [
            _kernel(
                "sobel_magnitude",
                "sobel_magnitude",
                None,
                "c",
                None,
                ["u64", "u64", "u32", "u32", "u32"],
            )
        ],
    )
]


def ptr(dtype: str) -> Dict[str, Any]:
    return {"kind": "pointer", "dtype": dtype}


# numba.cuda.random's xoroshiro128p_dtype as gpu_compiler writes it.
XOROSHIRO128P = {
    "fields": [["s0", "uint64", 0], ["s1", "uint64", 8]],
    "itemsize": 16,
    "aligned": True,
}

# A cooperative kernel (grid sync) that links libcudadevrt.a and a CUDA C++ part for its PTX,
# a kernel taking an array of records and one taking raw pointers and a 0-d array.
OPTIONAL_ENTRIES = [
    (
        "laplace__0",
        [
            dict(
                _kernel(
                    "solve_heat_equation",
                    "_Zlaplace",
                    "void(float32[::1], int64, float32)",
                    "numba",
                    [arr("float32", 1), scal("int64"), scal("float32")],
                    numba_array_params(1) + ["u64", "f32"],
                ),
                cooperative=True,
            )
        ],
        ["libcudadevrt.a", "functions.ptx"],
    ),
    (
        "rng__0",
        [
            _kernel(
                "compute_pi",
                "_Zrng",
                "void(Record(s0[type=uint64;offset=0],s1[type=uint64;offset=8];16;True)[::1], "
                "float32[::1])",
                "numba",
                [arr(XOROSHIRO128P, 1), arr("float32", 1)],
                numba_array_params(1) * 2,
            )
        ],
    ),
    (
        "cpointer__0",
        [
            _kernel(
                "add_pointers",
                "_Zcptr",
                "void(CPointer(float32), voidptr, array(float32, 0d, C))",
                "numba",
                [ptr("float32"), ptr("void"), arr("float32", 0)],
                ["u64", "u64"] + numba_array_params(0),
            )
        ],
    ),
]

# A second library that also defines "saxpy", for ambiguity tests.
SAXPY2 = [
    (
        "saxpy__0",
        [
            _kernel(
                "saxpy",
                "_Zother_saxpy",
                "void(float64[::1], float64, float64[::1], float64[::1])",
                "numba",
                [arr("float64", 1), scal("float64"), arr("float64", 1), arr("float64", 1)],
                numba_array_params(1) + ["f64"] + numba_array_params(1) * 2,
            )
        ],
    )
]

ISA_FOR = {"13.0": "9.0", "12.6": "8.5"}


def file_bytes(lib: str, module: str, cap: str, kind: str) -> bytes:
    return f"// fake {kind} of {lib}/{module} for {cap}\n".encode()


def make_metadata(
    source: str,
    language: str,
    modules,
    capability: str,
    cuda: str = "13.0",
    content=file_bytes,
    lib: str = "",
) -> Dict[str, Any]:
    isa = ISA_FOR[cuda]
    mods = []
    for mname, kernels, *link in modules:
        ptx = content(lib, mname, capability, "ptx")
        cubin = content(lib, mname, capability, "cubin")
        mod = {
            "name": mname,
            "ptx": f"{mname}.ptx",
            "cubin": f"{mname}.cubin",
            "ptx_sha256": hashlib.sha256(ptx).hexdigest(),
            "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
            "kernels": kernels,
        }
        if link and link[0]:
            mod["ptx_link"] = list(link[0])
            mod["ptx_link_sha256"] = {
                n: hashlib.sha256(content(lib, n, capability, "link")).hexdigest() for n in link[0]
            }
        mods.append(mod)
    return {
        "schema": 1,
        "source": source,
        "source_sha256": SHA_SRC,
        "language": language,
        "capability": capability,
        "ptx_isa": isa,
        "min_driver": min_driver_for_ptx(isa),
        "toolchain": dict(TOOLCHAIN, cuda=cuda),
        "options": {"fast_math": False},
        "modules": mods,
    }


LIBS = {
    "saxpy": ("src/python/imaging/kernels/saxpy.py", "numba", SAXPY),
    "histogram": ("src/python/imaging/kernels/histogram.py", "numba", HISTOGRAM),
    "matmul": ("src/python/imaging/kernels/matmul.cu", "cuda_cpp", MATMUL),
    "sobel": ("src/python/imaging/kernels/sobel.cu", "cuda_cpp", SOBEL),
    "optional_entries": (
        "src/python/numba_docs/kernels/optional_entries.py",
        "numba",
        OPTIONAL_ENTRIES,
    ),
}


def library_specs(
    names: Sequence[str] = ("saxpy", "histogram", "matmul", "sobel"),
    caps: Sequence[str] = ("sm_80", "sm_90"),
    toolchain: str = "cuda13",
    cuda: str = "13.0",
    extra: Optional[Dict[str, Tuple[str, str, Any]]] = None,
):
    table = dict(LIBS, **(extra or {}))
    out = []
    for n in names:
        source, lang, modules = table[n]
        out.append(
            {
                "name": n,
                "target": f"src/python/imaging/kernels:{n}",
                "outputs": [
                    {
                        "toolchain": toolchain,
                        "metadata": make_metadata(source, lang, modules, cap, cuda, lib=n),
                    }
                    for cap in caps
                ],
            }
        )
    return out


def write_bundle(root: str, specs, bundle: str = "imaging_h200", driver: str = "13.0") -> str:
    """Write cache/ (files + manifest.json) under `root`; return the cache dir."""
    cache = os.path.join(root, "cache")
    manifest = build_manifest(bundle, driver, specs)
    for spec in specs:
        for out in spec["outputs"]:
            md = out["metadata"]
            d = os.path.join(
                cache, *variant_dir(spec["name"], out["toolchain"], md["capability"]).split("/")
            )
            os.makedirs(d, exist_ok=True)
            for m in md["modules"]:
                for kind in ("ptx", "cubin"):
                    with open(os.path.join(d, m[kind]), "wb") as f:
                        f.write(file_bytes(spec["name"], m["name"], md["capability"], kind))
                for n in m.get("ptx_link", ()):
                    with open(os.path.join(d, n), "wb") as f:
                        f.write(file_bytes(spec["name"], n, md["capability"], "link"))
    with open(os.path.join(cache, MANIFEST_NAME), "w") as f:
        f.write(dumps_manifest(manifest))
    return cache


@pytest.fixture
def bundle(tmp_path) -> str:
    return write_bundle(str(tmp_path / "dist" / "imaging_h200"), library_specs())
