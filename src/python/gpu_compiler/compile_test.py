"""Real compiles of the example kernels and the error paths (in-process, no GPU).

Skipped, with the reason, when numba-cuda / the CUDA wheels are not importable.
Paths are relative to the repository root, which the tests chdir into, just as
the build runs the compiler with relative paths in its sandbox.
"""

from __future__ import annotations

import json
import os
import re
import struct
from typing import List, NamedTuple, Tuple

import pytest

try:
    import cuda.bindings.nvrtc  # noqa: F401
    import cuda.core  # noqa: F401
    import numba.cuda  # noqa: F401

    _SKIP_REASON = None
except Exception as e:  # pragma: no cover - depends on the environment
    _SKIP_REASON = "numba-cuda / CUDA Python wheels not importable: %s" % (e,)

pytestmark = pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or "")

from gpu_compiler import CompileError  # noqa: E402
from gpu_compiler.compile import CompileOptions, compile_source, write_outputs  # noqa: E402
from gpu_compiler.ptx import parse_entries, ptx_target, ptx_version  # noqa: E402

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../src/python
REPO_ROOT = os.path.dirname(os.path.dirname(SRC_ROOT))
SYS_PATH = ["src/python"]
KERNELS = "src/python/imaging/kernels/"
TESTDATA = "src/python/gpu_compiler/testdata/"
CAPS = ["sm_75", "sm_80", "sm_87", "sm_90"]
MATMUL_EXPRS = ["matmul<float, 16>", "matmul<double, 16>"]

EXAMPLES = {
    "saxpy.py": {"modules": ["saxpy__0"]},
    "blur.py": {"modules": ["box_blur_3x3__0"]},
    "histogram.py": {"modules": ["histogram_256__0", "histogram_256__1", "sum_f32__0"]},
    "sobel.cu": {"modules": ["sobel"]},
    "matmul.cu": {"modules": ["matmul"], "name_expressions": MATMUL_EXPRS},
}


class CubinHeader(NamedTuple):
    abi_version: int
    e_flags: int
    sm: int  # e.g. 90

    @property
    def capability(self) -> str:
        return "sm_%d" % self.sm


def read_cubin_header(data: bytes) -> CubinHeader:
    """The target SM of a cubin, from its ELF64 header: checks a cubin without a GPU.

    Encoding, measured on cubins from nvJitLink 13.0 and matching LLVM's
    ``llvm/BinaryFormat/ELF.h``: ``e_machine`` is EM_CUDA (190) and
    ``e_ident[EI_OSABI]`` is 0x41 (ELFOSABI_CUDA). The SM number (major*10+minor,
    e.g. 90 = 0x5a) sits in ``e_flags`` at a place that depends on
    ``e_ident[EI_ABIVERSION]``:

    * ABI version 8 (``ELFABIVERSION_CUDA_V2``; what CUDA 13 emits for every SM):
      bits 8-15 (``EF_CUDA_SM_MASK = 0xff00``), ``EF_CUDA_ACCELERATORS = 0x8``
      marks ``sm_XYa``. Seen: sm_75 0x06004b04, sm_80 0x06005004,
      sm_87 0x06005704, sm_90 0x06005a04, sm_100 0x06006402, sm_120 0x06007802.
    * ABI version 7 and older (``ELFABIVERSION_CUDA_V1``; CUDA 12 and earlier):
      the low byte (``EF_CUDA_SM = 0xff``), with the virtual (PTX) SM in bits
      16-23.
    """
    assert len(data) >= 64 and data[:4] == b"\x7fELF", "not an ELF file"
    assert data[4] == 2 and data[5] == 1, "not a little-endian ELF64 file"
    osabi, abi_version = data[7], data[8]
    (e_machine,) = struct.unpack_from("<H", data, 18)
    (e_flags,) = struct.unpack_from("<I", data, 48)
    assert e_machine == 190, "ELF e_machine is %d, not EM_CUDA (190)" % e_machine
    assert osabi == 0x41, "ELF OS/ABI is 0x%x, not CUDA (0x41)" % osabi
    sm = (e_flags >> 8) & 0xFF if abi_version >= 8 else e_flags & 0xFF
    return CubinHeader(abi_version=abi_version, e_flags=e_flags, sm=sm)


def file_directives(ptx: str) -> List[Tuple[int, str]]:
    """All ``.file`` directives of a PTX module as ``(index, path)`` pairs."""
    return [
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', ptx, re.MULTILINE)
    ]


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)


def _options(name: str, **kw) -> CompileOptions:
    exprs = EXAMPLES.get(name, {}).get("name_expressions", [])
    kw.setdefault("sys_path", SYS_PATH if name.endswith(".py") else [])
    if exprs:
        kw.setdefault("name_expressions", exprs)
    return CompileOptions(**kw)


def _isa_tuple(v: str):
    major, minor = v.split(".")
    return int(major), int(minor)


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_kernel_compiles(cubin_differences, name, cap):
    r = compile_source(KERNELS + name, cap, _options(name))
    meta = r.metadata()
    assert meta["schema"] == 1
    assert meta["source"] == KERNELS + name
    assert meta["capability"] == cap
    assert meta["language"] == ("numba" if name.endswith(".py") else "cuda_cpp")
    assert meta["ptx_isa"] == "9.0" and meta["min_driver"] == "13.0"
    assert [m["name"] for m in meta["modules"]] == EXAMPLES[name]["modules"]
    for mod in r.modules:
        # PTX: .version <= 9.0 (what a CUDA 13.0 driver loads), right .target.
        assert _isa_tuple(ptx_version(mod.ptx)) <= (9, 0)
        assert ptx_target(mod.ptx) == cap
        # cubin: an EM_CUDA ELF whose e_flags encode the capability.
        hdr = read_cubin_header(mod.cubin)
        assert hdr.capability == cap, (hex(hdr.e_flags), cap)
        assert hdr.abi_version == 8 and (hdr.e_flags >> 8) & 0xFF == int(cap[3:])
        entries = parse_entries(mod.ptx)
        for k in mod.kernels:
            assert k.entry in entries
            assert k.params == entries[k.entry]
            assert k.entry.encode() in mod.cubin  # the cubin has the same kernel
            assert k.resources["registers"] > 0
            if k.abi == "numba":
                assert k.signature and k.args is not None
            else:
                assert k.signature is None and k.args is None
    # The recorded figures are the cubin's own (what the driver's cuFuncGetAttribute reads).
    assert cubin_differences(r) == []


def test_numba_abi_metadata():
    r = compile_source(KERNELS + "saxpy.py", "sm_90", _options("saxpy.py"))
    (k,) = r.modules[0].kernels
    arr = {"kind": "array", "dtype": "float32", "ndim": 1, "layout": "C"}
    assert k.name == "saxpy"
    assert k.signature == "void(float32[::1], float32, float32[::1], float32[::1])"
    assert k.abi == "numba"
    assert k.args == [arr, {"kind": "scalar", "dtype": "float32"}, arr, arr]
    # 3 arrays x (5 + 2*1) u64 + 1 f32
    assert k.params == ["u64"] * 7 + ["f32"] + ["u64"] * 14
    # The module name is the dotted import path under the sys.path root.
    assert k.entry.startswith("_ZN7imaging7kernels5saxpy5saxpy")


def test_numba_2d_and_strided_abi():
    r = compile_source(KERNELS + "blur.py", "sm_80", _options("blur.py"))
    (k,) = r.modules[0].kernels
    assert k.args == [{"kind": "array", "dtype": "float32", "ndim": 2, "layout": "C"}] * 2
    assert len(k.params) == 2 * (5 + 2 * 2)
    assert k.resources["shared_bytes"] >= 18 * 18 * 4  # the 18x18 float32 tile

    h = compile_source(KERNELS + "histogram.py", "sm_80", _options("histogram.py"))
    by_name = {m.name: m.kernels[0].args or [] for m in h.modules}
    assert by_name["histogram_256__1"][0] == {
        "kind": "array",
        "dtype": "uint8",
        "ndim": 1,
        "layout": "A",
    }
    assert by_name["histogram_256__0"][1]["dtype"] == "uint32"


def test_cuda_cpp_kernels_and_params():
    r = compile_source(KERNELS + "matmul.cu", "sm_90", _options("matmul.cu"))
    ks = {k.name: k for k in r.modules[0].kernels}
    assert set(ks) == set(MATMUL_EXPRS)
    assert ks["matmul<float, 16>"].entry == "_Z6matmulIfLi16EEvPKT_S2_PS0_iii"
    assert ks["matmul<double, 16>"].entry == "_Z6matmulIdLi16EEvPKT_S2_PS0_iii"
    for k in ks.values():
        assert k.abi == "c" and k.params == ["u64", "u64", "u64", "u32", "u32", "u32"]
    t = ["const float*", "const float*", "float*", "int", "int", "int"]
    assert ks["matmul<float, 16>"].c_types == t
    assert ks["matmul<double, 16>"].metadata()["c_types"] == [
        x.replace("float", "double") for x in t
    ]
    assert ks["matmul<double, 16>"].resources["shared_bytes"] >= 2 * 16 * 16 * 8

    s = compile_source(KERNELS + "sobel.cu", "sm_87", _options("sobel.cu"))
    (k,) = s.modules[0].kernels
    assert (k.name, k.entry) == ("sobel_magnitude", "sobel_magnitude")
    assert k.params == ["u64", "u64", "u32", "u32", "u32"]
    assert k.c_types == ["const float*", "float*", "int", "int", "int"]


def test_matmul_without_name_expressions_has_no_kernels():
    with pytest.raises(CompileError, match="no kernels"):
        compile_source(KERNELS + "matmul.cu", "sm_90", CompileOptions())


def test_device_function_helper_needs_no_gpu_and_is_order_independent():
    """A kernel calling a helper-module device function compiles without a GPU,
    and its bytes do not depend on what was compiled before it in-process."""
    src = TESTDATA + "uses_helper.py"
    first = compile_source(src, "sm_75", _options(src))
    compile_source(src, "sm_90", _options(src))
    compile_source(KERNELS + "blur.py", "sm_90", _options("blur.py"))
    again = compile_source(src, "sm_75", _options(src))
    assert [m.name for m in first.modules] == ["apply_twice__0", "apply_twice__1"]
    assert first.files() == again.files()
    # Shared-array symbol numbering restarts per compile too.
    b1 = compile_source(KERNELS + "blur.py", "sm_80", _options("blur.py"))
    compile_source(KERNELS + "histogram.py", "sm_80", _options("histogram.py"))
    b2 = compile_source(KERNELS + "blur.py", "sm_80", _options("blur.py"))
    assert b1.files() == b2.files()
    assert "_cudapy_smem_1[" in b1.modules[0].ptx


def test_numba_counters_keep_increasing_for_the_host_process():
    from numba.cuda.core.bytecode import FunctionIdentity

    before = next(FunctionIdentity._unique_ids)
    compile_source(KERNELS + "saxpy.py", "sm_80", _options("saxpy.py"))
    after = next(FunctionIdentity._unique_ids)
    assert after > before


def test_lineinfo_has_no_absolute_paths():
    for name in ("blur.py", "matmul.cu"):
        r = compile_source(KERNELS + name, "sm_90", _options(name, lineinfo=True))
        for mod in r.modules:
            files = [p for _, p in file_directives(mod.ptx)]
            assert files, "lineinfo should emit .file directives"
            assert all(not os.path.isabs(p) for p in files), files
            assert KERNELS + name in files
            for blob in (mod.ptx.encode(), mod.cubin, r.metadata_json()):
                assert REPO_ROOT.encode() not in blob
    # The header of matmul.cu shows up as a relative dependency.
    assert KERNELS + "matmul_tile.cuh" in [p for _, p in file_directives(r.modules[0].ptx)]


def test_options_recorded_in_metadata():
    r = compile_source(
        KERNELS + "sobel.cu",
        "sm_80",
        CompileOptions(
            fast_math=True, max_registers=32, defines=("FOO", "BAR=2"), include_dirs=(KERNELS,)
        ),
    )
    assert r.metadata()["options"] == {
        "fast_math": True,
        "lineinfo": False,
        "max_registers": 32,
        "ptx_version": None,
        "defines": ["FOO", "BAR=2"],
        "include_dirs": [KERNELS],
        "name_expressions": [],
    }
    assert r.modules[0].kernels[0].resources["registers"] <= 32


def test_max_registers_forces_spills_and_reports_them(cubin_differences):
    r = compile_source(KERNELS + "blur.py", "sm_90", _options("blur.py", max_registers=24))
    res = r.modules[0].kernels[0].resources
    assert res["registers"] <= 24
    assert res["spill_stores"] > 0 and res["local_bytes"] > 0
    assert cubin_differences(r) == []  # the spills' stack frame is the cubin's frame size


# --- ptx_version override ---------------------------------------------------


def test_ptx_version_override_accepted():
    for name in ("saxpy.py", "sobel.cu"):
        r = compile_source(KERNELS + name, "sm_90", _options(name, ptx_version="8.5"))
        meta = r.metadata()
        assert meta["ptx_isa"] == "8.5" and meta["min_driver"] == "12.5"
        assert meta["options"]["ptx_version"] == "8.5"
        for mod in r.modules:
            assert re.search(r"^\.version 8\.5$", mod.ptx, re.MULTILINE)
            assert read_cubin_header(mod.cubin).capability == "sm_90"


def test_ptx_version_override_for_jetpack_orin():
    r = compile_source(KERNELS + "blur.py", "sm_87", _options("blur.py", ptx_version="7.4"))
    assert r.ptx_isa == "7.4" and r.min_driver == "11.4"


def test_ptx_version_too_new_refused():
    with pytest.raises(CompileError, match="newer than the toolchain"):
        compile_source(KERNELS + "saxpy.py", "sm_90", _options("saxpy.py", ptx_version="9.9"))


def test_ptx_version_with_a_toolchain_the_table_lacks_is_refused(monkeypatch):
    # A CUDA 13.2 toolchain: the PTX ISA it writes is not guessed, so the override is refused.
    from gpu_compiler import toolchain

    monkeypatch.setattr(toolchain, "cuda_version", lambda: "13.2")
    with pytest.raises(CompileError, match="CUDA 13.2 is not in gpu_spec's PTX ISA table"):
        compile_source(KERNELS + "saxpy.py", "sm_90", _options("saxpy.py", ptx_version="8.5"))


def test_ptx_version_too_old_refused():
    with pytest.raises(CompileError, match="too old for sm_90"):
        compile_source(KERNELS + "saxpy.py", "sm_90", _options("saxpy.py", ptx_version="7.4"))
    with pytest.raises(CompileError, match="too old for sm_80"):
        compile_source(KERNELS + "sobel.cu", "sm_80", _options("sobel.cu", ptx_version="6.5"))


def test_ptx_version_below_features_used_is_a_compile_error():
    with pytest.raises(CompileError) as e:
        compile_source(TESTDATA + "needs_isa80.cu", "sm_90", CompileOptions(ptx_version="7.8"))
    msg = str(e.value)
    assert "requires PTX ISA .version 8.0" in msg and "ptx_version" in msg
    # ... and it compiles without the override.
    compile_source(TESTDATA + "needs_isa80.cu", "sm_90", CompileOptions())


# --- errors -------------------------------------------------------------------


def test_numba_typing_error_has_relative_file_and_line():
    src = TESTDATA + "typing_error.py"
    with pytest.raises(CompileError) as e:
        compile_source(src, "sm_90", _options(src))
    msg = str(e.value)
    assert msg.startswith(src + ":10: error:"), msg
    assert 'out[i] = x[i] + "oops"' in msg
    assert "No implementation of function" in msg  # numba's own text
    assert REPO_ROOT not in msg
    assert (e.value.source, e.value.line) == (src, 10)


def test_cu_syntax_error_has_relative_file_and_line():
    src = TESTDATA + "syntax_error.cu"
    with pytest.raises(CompileError) as e:
        compile_source(src, "sm_80", CompileOptions())
    msg = str(e.value)
    assert src + "(5): error: expected an expression" in msg, msg
    assert REPO_ROOT not in msg
    assert (e.value.source, e.value.line) == (src, 5)


def test_missing_aot_signatures():
    src = TESTDATA + "no_signatures.py"
    with pytest.raises(CompileError) as e:
        compile_source(src, "sm_90", _options(src))
    assert str(e.value).startswith(src + ": error: no kernel has a signature")


def test_aot_signatures_naming_a_non_kernel():
    src = TESTDATA + "not_a_kernel.py"
    with pytest.raises(CompileError) as e:
        compile_source(src, "sm_90", _options(src))
    msg = str(e.value)
    assert "'helper'" in msg and "device function" in msg and "real_kernel" in msg
    assert msg.startswith(src + ":7:")


def test_bad_capability_and_source_type():
    with pytest.raises(CompileError, match="invalid GPU capability 'sm_91'"):
        compile_source(KERNELS + "saxpy.py", "sm_91", _options("saxpy.py"))
    with pytest.raises(CompileError, match="unsupported kernel source type"):
        compile_source(KERNELS + "matmul_tile.cuh", "sm_90", CompileOptions())
    with pytest.raises(CompileError, match="no such file"):
        compile_source(KERNELS + "nope.py", "sm_90", CompileOptions())
    with pytest.raises(CompileError, match=r"apply only to CUDA C\+\+"):
        compile_source(KERNELS + "saxpy.py", "sm_90", CompileOptions(defines=("X",)))


def test_import_state_is_restored():
    import sys

    before_path = list(sys.path)
    compile_source(KERNELS + "blur.py", "sm_80", _options("blur.py"))
    assert sys.path == before_path
    assert "imaging.kernels.blur" not in sys.modules
    assert "imaging.kernels._stencil" not in sys.modules


# --- writing outputs ----------------------------------------------------------


def test_write_outputs(tmp_path):
    r = compile_source(KERNELS + "histogram.py", "sm_87", _options("histogram.py"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.ptx").write_text("old")
    names = write_outputs(r, str(out))
    assert sorted(os.listdir(str(out))) == names
    assert "stale.ptx" not in names
    meta = json.loads((out / "metadata.json").read_text())
    assert meta == json.loads(r.metadata_json())
    for m in meta["modules"]:
        assert (out / m["ptx"]).exists() and (out / m["cubin"]).exists()
    # Canonical JSON: sorted keys, indent 2, trailing newline.
    raw = (out / "metadata.json").read_text()
    assert raw == json.dumps(meta, sort_keys=True, indent=2) + "\n"
    assert not [p for p in os.listdir(str(tmp_path)) if p.startswith(".")]
