"""Dev mode on a GPU: no bundle, so gpu_runtime compiles the sources on first use with the same
gpu_compiler code the build uses, caches the result, and a second process hits that cache.

    PYTHONPATH=src/python:src/spec python3 tests/gpu/dev_mode_check.py [--cache-dir DIR]

Needs the compile toolchain importable (numba-cuda, NVRTC, nvJitLink); run it twice: the first
run compiles, the second loads from the dev cache. Prints the timings and a numpy comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import gpu_runtime
from gpu_runtime import DeviceArray

KERNELS = "src/python/imaging/kernels"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache-dir", required=True)
    args = parser.parse_args()
    os.environ["GPU_RUNTIME_DEV_CACHE"] = args.cache_dir
    start = time.perf_counter()
    cache = gpu_runtime.open_cache(
        dev_sources={
            f"{KERNELS}/saxpy.py": {"sys_path": ["src/python"]},
            f"{KERNELS}/matmul.cu": {"name_expressions": ["matmul<float, 16>"]},
        }
    )
    saxpy, matmul = cache.kernel("saxpy"), cache.kernel("matmul<float, 16>")
    saxpy.load()
    matmul.load()
    loaded = time.perf_counter() - start
    n = 4096
    x = np.arange(n, dtype=np.float32)
    out = DeviceArray.empty(n, np.float32)
    saxpy.launch(
        n // 256, 256, out, np.float32(3.0), DeviceArray.from_numpy(x), DeviceArray.from_numpy(x)
    )
    ok_saxpy = np.allclose(out.to_numpy(), 4 * x)
    a = np.random.default_rng(0).random((64, 48), dtype=np.float32)
    b = np.random.default_rng(1).random((48, 80), dtype=np.float32)
    c = DeviceArray.empty((64, 80), np.float32)
    matmul.launch(
        (5, 4),
        (16, 16),
        DeviceArray.from_numpy(a),
        DeviceArray.from_numpy(b),
        c,
        np.int32(64),
        np.int32(80),
        np.int32(48),
    )
    ok_matmul = np.allclose(c.to_numpy(), a @ b, rtol=1e-4, atol=1e-4)
    print(
        f"dev mode: open + compile-or-load 2 sources {loaded:.2f} s; "
        f"saxpy {'ok' if ok_saxpy else 'FAIL'}; matmul<float, 16> {'ok' if ok_matmul else 'FAIL'}"
    )
    return 0 if ok_saxpy and ok_matmul else 1


if __name__ == "__main__":
    sys.exit(main())
