"""JIT mode under `pants test`: the sandbox carries the kernels this target depends on (their
index and exact input files), so the app's code opens JIT mode with no bundle and no setting."""

from __future__ import annotations

import pytest

import gpu_runtime
from gpu_runtime.conftest import FakeBackend
from gpu_runtime.jit.cache import JitKernelCache
from gpu_runtime.jit.compiler import CompilerNotFoundError
from gpu_runtime.jit.sources import find_jit_sources

KERNELS = ["bf16_axpy", "blur", "half_stats", "haxpy", "histogram", "matmul", "saxpy", "sobel"]


@pytest.fixture
def sources():
    found = find_jit_sources()
    if not found:
        pytest.skip("no __gpu_kernels__ index on sys.path: run it with `pants test` (codegen)")
    return found


def test_the_sandbox_has_every_kernel_and_its_inputs(sources) -> None:
    assert sorted(sources) == KERNELS
    for source in sources.values():
        assert source.current_files() == dict(source.files), source.target
    assert sorted(sources["blur"].files) == [
        "src/python/imaging/kernels/_stencil.py",
        "src/python/imaging/kernels/blur.py",
    ]
    assert "src/python/imaging/kernels/matmul_tile.cuh" in sources["matmul"].files
    assert sources["saxpy"].target == "src/python/imaging/kernels:saxpy"


def test_the_app_opens_jit_mode_and_asks_for_a_compiler(sources, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("GPU_RUNTIME_TOOLCHAIN", raising=False)
    monkeypatch.setenv("GPU_RUNTIME_JIT_CACHE", str(tmp_path))
    cache = gpu_runtime.open_cache(backend=FakeBackend())
    assert isinstance(cache, JitKernelCache)
    assert cache.libraries() == KERNELS
    with pytest.raises(CompilerNotFoundError, match="toolchain-cuda13"):
        cache.kernel("saxpy")
