"""CUDA's own headers from the toolchain: real NVRTC and numba-cuda, no GPU, no host CUDA.

Each test works in a sandbox (``repo/``, the working directory, as in a Pants process) with a
directory beside it standing in for a host CUDA (``/usr/local/cuda``): its headers must never
be read, even where ``CUDA_PATH`` points at it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from gpu_compiler.errors import CompileError

try:
    import cuda.bindings.nvrtc  # noqa: F401
    import numba.cuda  # noqa: F401

    _SKIP_REASON = None
except Exception as e:  # pragma: no cover - depends on the environment
    _SKIP_REASON = "numba-cuda / CUDA Python wheels not importable: %s" % (e,)

pytestmark = pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or "")

# Every header set the issue names, as a CUDA C++ user includes them (no include_dirs).
EVERY_HEADER = """\
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cuda/std/cstdint>
#include <cuda/std/limits>
#include <cuda/barrier>
#include <cuda_pipeline.h>
#include <mma.h>
#include <thrust/detail/config.h>
namespace cg = cooperative_groups;

extern "C" __global__ void half_sum(const __half* x, float* out, cuda::std::int32_t n) {
  using BlockReduce = cub::BlockReduce<float, 128>;
  __shared__ typename BlockReduce::TempStorage tmp;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? __half2float(x[i]) : 0.0f;
  float s = BlockReduce(tmp).Sum(v);
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
  float t = cg::reduce(tile, v, cg::plus<float>());
  if (threadIdx.x == 0) atomicAdd(out, s);
  if (tile.thread_rank() == 0) atomicAdd(out + 1, t);
}
"""

FP16_NUMBA = """\
from numba import cuda
from numba.cuda import fp16


@cuda.jit
def haxpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = fp16.hfma(a, x[i], y[i])


AOT_SIGNATURES = {"haxpy": ["void(float16[::1], float16, float16[::1], float16[::1])"]}
"""

BF16_NUMBA = """\
from numba import cuda
from numba.cuda import bf16


@cuda.jit
def bf_axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = bf16.hfma(a, x[i], y[i])


AOT_SIGNATURES = {"bf_axpy": ["void(bfloat16[::1], bfloat16, bfloat16[::1], bfloat16[::1])"]}
"""


def _write(path, text: str) -> str:
    os.makedirs(os.path.dirname(str(path)) or ".", exist_ok=True)
    with open(str(path), "w") as f:
        f.write(text)
    return str(path)


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """``repo/`` as the cwd; ``host-cuda/include`` a poisoned host toolkit, on CUDA_PATH."""
    from gpu_compiler.cuda_cpp import toolchain_headers

    repo = tmp_path / "repo"
    repo.mkdir()
    host = tmp_path / "host-cuda"
    _write(host / "include" / "cuda_fp16.h", '#error "the host CUDA was read"\n')
    _write(host / "include" / "host_only.h", "#define HOST_ONLY 1\n")
    _write(host / "include" / "cccl" / "cuda" / "std" / "version", '#error "host cccl"\n')
    for var in ("CUDA_PATH", "CUDA_HOME"):
        monkeypatch.setenv(var, str(host))
    toolchain_headers.reset_for_tests()
    monkeypatch.chdir(repo)
    yield tmp_path
    toolchain_headers.reset_for_tests()


def _compile(source: str, capability: str = "sm_90", **options):
    from gpu_compiler.compile import CompileOptions, compile_source

    return compile_source(source, capability, CompileOptions(**options))


def _refused(source: str, **options) -> CompileError:
    with pytest.raises(CompileError) as info:
        _compile(source, **options)
    return info.value


def test_the_toolchain_directories_are_its_wheels_not_the_host(sandbox):
    from gpu_compiler.cuda_cpp import toolchain_headers
    from gpu_compiler.numba.import_guard import is_toolchain_file, toolchain_roots

    dirs = toolchain_headers.cuda_include_dirs()
    for d in dirs:
        assert is_toolchain_file(d, toolchain_roots()), d
        assert str(sandbox / "host-cuda") not in d
    # runtime headers, crt/ (CUDA 13: in the runtime's directory), CCCL
    for probe in ("cuda_fp16.h", "crt/mma.h", "cub/block/block_reduce.cuh"):
        assert any(os.path.isfile(os.path.join(d, probe)) for d in dirs), (probe, dirs)
    assert toolchain_headers.missing_sets() == []
    assert toolchain_headers.describe().startswith("<toolchain>/nvidia/")


@pytest.mark.parametrize("capability", ["sm_75", "sm_90"])
def test_every_cuda_header_set_compiles_with_no_include_dirs(sandbox, capability):
    src = _write("k/every.cu", EVERY_HEADER)
    result = _compile(src, capability)
    (kernel,) = result.modules[0].kernels
    assert kernel.name == "half_sum"
    assert kernel.c_types == ["const __half*", "float*", "cuda::std::int32_t"] or (
        kernel.c_types[:2] == ["const __half*", "float*"]
    ), kernel.c_types
    assert result.modules[0].cubin  # nvJitLink linked it


def test_lineinfo_shows_toolchain_headers_without_a_machine_path(sandbox):
    src = _write("k/every.cu", EVERY_HEADER)
    ptx = _compile(src, lineinfo=True).modules[0].ptx
    files = re.findall(r'\.file\s+\d+\s+"([^"]+)"', ptx)
    assert files[0] == "k/every.cu"
    toolchain = [f for f in files if f.startswith("<toolchain>/")]
    assert any(f.endswith("/cub/block/block_reduce.cuh") for f in toolchain), files
    assert all(not os.path.isabs(f) for f in files), files  # the same on every machine


def test_a_header_found_nowhere_names_file_line_and_fix(sandbox):
    src = _write("k/missing.cu", '// a vendor header\n\n#include "vendor/nothere.h"\n')
    err = _refused(src)
    assert (err.source, err.line) == ("k/missing.cu", 3)
    text = str(err)
    assert text.startswith('k/missing.cu:3: error: cannot find header "vendor/nothere.h"'), text
    assert "<toolchain>/nvidia/" in text and "fix: put the header inside the repo" in text
    assert "add its NVIDIA wheel to the toolchain's lockfile" in text
    assert len(text.splitlines()) == 1


def test_a_host_only_header_is_not_found_through_cuda_path(sandbox):
    src = _write("k/host.cu", "#include <host_only.h>\n")
    err = _refused(src)
    assert 'cannot find header "host_only.h"' in str(err), str(err)


def test_a_host_c_plus_plus_header_suggests_libcu_plus_plus(sandbox):
    src = _write("k/std.cu", "#include <cstdint>\n")
    text = str(_refused(src))
    assert "include <cuda/std/cstdint>" in text, text


def test_a_header_with_host_code_explains_nvrtc(sandbox):
    src = _write("k/device_wide.cu", "#include <cub/device/device_reduce.cuh>\n")
    text = str(_refused(src))
    assert text.startswith("<toolchain>/nvidia/") and "site-packages" not in text, text
    assert "a header of the host's C/C++ library" in text and "<cub/block/...>" in text, text
    # the same header once its host includes are met: NVRTC's own words, and the hint
    src = _write(
        "k/host_code.cu", "#include <cub/block/block_reduce.cuh>\n" "__host__ void launch() {}\n"
    )
    text = str(_refused(src))
    assert "not allowed in JIT mode" in text and "hint: NVRTC compiles device code" in text


@pytest.mark.parametrize("quote", ['"%s"', "<%s>"])
def test_an_include_climbing_out_of_the_toolchain_is_refused(sandbox, quote):
    from gpu_compiler.cuda_cpp import toolchain_headers

    first = toolchain_headers.cuda_include_dirs()[0]
    host = str(sandbox / "host-cuda" / "include" / "host_only.h")
    climb = "../" * first.count(os.sep) + host.lstrip(os.sep)  # up to / from the first dir
    assert os.path.isfile(os.path.join(first, climb))
    src = _write("k/climb.cu", "\n#include %s\n" % (quote % climb))
    err = _refused(src)
    assert (err.source, err.line) == ("k/climb.cu", 2)
    assert str(err).startswith("k/climb.cu:2: error: refused #include "), str(err)
    if quote.startswith("<"):  # a quoted one is refused beside its includer already
        assert "through the toolchain's header directories it resolves to" in str(err)


def test_the_targets_own_headers_come_before_the_toolchains(sandbox):
    _write("inc/cuda_fp16.h", "#pragma once\n#define OWN_FP16 1\n")
    src = _write(
        "k/own.cu",
        '#include <cuda_fp16.h>\nextern "C" __global__ void k(int* o) ' "{ *o = OWN_FP16; }\n",
    )
    assert _compile(src, include_dirs=["inc"]).modules


@pytest.mark.parametrize(
    "name, text, dtype, capability",
    [("fp16k.py", FP16_NUMBA, "float16", "sm_75"), ("bf16k.py", BF16_NUMBA, "bfloat16", "sm_90")],
)
def test_numba_half_precision_kernels_compile(sandbox, name, text, dtype, capability):
    src = _write("k/" + name, text)
    result = _compile(src, capability, sys_path=["."])
    (module,) = result.modules
    (kernel,) = module.kernels
    assert [a["dtype"] for a in kernel.args] == [dtype] * 4
    assert [a["kind"] for a in kernel.args] == ["array", "scalar", "array", "array"]
    # numba's fp16/bf16 shim (a CUSource including <cuda_fp16.h>) is linked, under a file name
    assert [p.file for p in module.parts] == ["unnamed-cu.ptx"], module.parts
    assert module.cubin


def test_the_header_wheels_are_in_the_toolchain_versions_and_the_jit_key(monkeypatch):
    from importlib import metadata

    from gpu_compiler import fingerprint, toolchain

    versions = toolchain.dist_versions()
    for component in ("cuda-runtime", "cuda-crt", "cccl"):
        assert versions[component], versions
    before = fingerprint.fingerprint()
    real = metadata.version

    def bumped(name: str) -> str:
        return "13.9.99" if name in ("nvidia-cuda-cccl", "nvidia-cuda-cccl-cu12") else real(name)

    monkeypatch.setattr(toolchain._metadata, "version", bumped)
    after = fingerprint.fingerprint()
    assert after["toolchain"]["cccl"] == "13.9.99" and after != before


def test_the_confined_compile_reads_the_toolchain_headers_and_no_host_ones(sandbox):
    """Under the OS sandbox (Landlock, in the CLI): the toolchain's headers are readable,
    and the poisoned host toolkit on CUDA_PATH is neither searched nor readable."""
    src = _write("k/every.cu", EVERY_HEADER)
    p = _cli(src)
    assert p.returncode == 0, p.stderr
    assert os.path.isfile("out/sm_90/every.cubin")
    host = str(sandbox / "host-cuda" / "include" / "host_only.h")
    src = _write("k/abs_host.cu", '#inc\\\nlude "%s"\n' % host)  # a spelling the scan misses
    p = _cli(src)
    assert p.returncode == 1 and "refused to read %s" % host in p.stderr, p.stderr


def _cli(src: str) -> subprocess.CompletedProcess:
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([here, os.path.join(os.path.dirname(here), "spec")])
    return subprocess.run(
        [sys.executable, "-m", "gpu_compiler", "compile", "--source", src]
        + ["--capability", "sm_90", "--out-dir", "out"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )
