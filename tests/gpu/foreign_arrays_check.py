"""gpu_runtime launches on device arrays of other libraries, through __cuda_array_interface__.

    PYTHONPATH=src/python:src/spec python3 tests/gpu/foreign_arrays_check.py \
        dist/imaging_h200/cache [lib...]

For each library that imports here (cupy, torch, numba), saxpy (numba ABI) and sobel (C ABI) run on
its device arrays and are compared with numpy. Prints one line per case and "N passed, N failed".
"""

from __future__ import annotations

import sys

import numpy as np

import gpu_runtime
from imaging.references import sobel_ref


def libraries():
    libs = {}
    try:
        import cupy as cp

        libs["cupy"] = (
            cp.asarray,
            lambda a: (cp.cuda.runtime.deviceSynchronize(), cp.asnumpy(a))[1],
        )
    except Exception as e:  # noqa: BLE001 - report any import failure as a skip
        print(f"SKIP cupy: {type(e).__name__}: {e}")
    try:
        import torch

        libs["torch"] = (
            lambda a: torch.from_numpy(a).cuda(),
            lambda t: (torch.cuda.synchronize(), t.cpu().numpy())[1],
        )
    except Exception as e:  # noqa: BLE001
        print(f"SKIP torch: {type(e).__name__}: {e}")
    try:
        from numba import cuda

        libs["numba"] = (cuda.to_device, lambda d: (cuda.synchronize(), d.copy_to_host())[1])
    except Exception as e:  # noqa: BLE001
        print(f"SKIP numba: {type(e).__name__}: {e}")
    return libs


def main() -> int:
    cache = gpu_runtime.open_cache(sys.argv[1])
    wanted = set(sys.argv[2:])
    saxpy, sobel = cache.kernel("saxpy"), cache.kernel("sobel_magnitude")
    passed = failed = 0
    for name, (to_device, to_host) in libraries().items():
        if wanted and name not in wanted:
            continue
        n = 4096
        x = np.arange(n, dtype=np.float32)
        out = to_device(np.zeros(n, np.float32))
        saxpy.launch(n // 256, 256, out, np.float32(2.0), to_device(x), to_device(x))
        ok = bool(np.allclose(to_host(out), 3 * x))
        print(f"{'PASS' if ok else 'FAIL'} saxpy on {name} arrays")
        passed, failed = passed + ok, failed + (not ok)

        h, w = 40, 56
        img = np.random.default_rng(0).random((h, w), dtype=np.float32)
        dst = to_device(np.zeros((h, w), np.float32))
        sobel.launch(
            (w // 8, h // 8), (8, 8), to_device(img), dst, np.int32(w), np.int32(h), np.int32(w)
        )
        got = to_host(dst)
        ok = bool(np.allclose(got, sobel_ref(img), rtol=1e-4, atol=1e-4))
        print(f"{'PASS' if ok else 'FAIL'} sobel_magnitude on {name} arrays")
        passed, failed = passed + ok, failed + (not ok)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
