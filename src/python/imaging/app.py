"""Example app: an image pipeline (blur -> sobel -> histogram) plus saxpy and a tiled matmul.

Every kernel was compiled ahead of time by `pants package` into the bundle's `cache/`;
`gpu_runtime` picks the variant for this GPU and launches it, with no compiler on the device.
Each stage is checked against numpy, so running the bundle is also its acceptance test:

    python3 dist/imaging_h200/app.pex            # the pipeline, checked against numpy
    python3 dist/imaging_h200/app.pex --self-test  # every kernel and signature in the manifest
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

import gpu_runtime
from gpu_runtime import DeviceArray

TILE = 16


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def box_blur_ref(src: np.ndarray) -> np.ndarray:
    padded = np.pad(src, 1, mode="edge")
    h, w = src.shape
    return sum(padded[dy : dy + h, dx : dx + w] for dy in range(3) for dx in range(3)) / 9.0


def sobel_ref(img: np.ndarray) -> np.ndarray:
    p = np.pad(img, 1, mode="edge").astype(np.float64)
    h, w = img.shape

    def at(dy: int, dx: int) -> np.ndarray:
        return p[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w]

    gx = (at(-1, 1) + 2 * at(0, 1) + at(1, 1)) - (at(-1, -1) + 2 * at(0, -1) + at(1, -1))
    gy = (at(1, -1) + 2 * at(1, 0) + at(1, 1)) - (at(-1, -1) + 2 * at(-1, 0) + at(-1, 1))
    return np.sqrt(gx * gx + gy * gy)


def run_pipeline(cache: gpu_runtime.KernelCache, height: int, width: int) -> list[tuple[str, bool, str]]:
    rng = np.random.default_rng(0)
    image = rng.random((height, width), dtype=np.float32)
    results = []

    def check(name: str, got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-5) -> None:
        ok = bool(np.allclose(got, want, rtol=rtol, atol=atol))
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
        results.append((name, ok, f"max abs err {err:.3g}"))

    grid2d = (cdiv(width, TILE), cdiv(height, TILE))
    src = DeviceArray.from_numpy(image)
    blurred = DeviceArray.empty((height, width), np.float32)
    cache.kernel("box_blur_3x3").launch(grid2d, (TILE, TILE), src, blurred)
    blurred_host = blurred.to_numpy()
    check("blur (numba, shared memory)", blurred_host, box_blur_ref(image))

    edges = DeviceArray.empty((height, width), np.float32)
    cache.kernel("sobel_magnitude").launch(
        grid2d, (TILE, TILE), blurred, edges, np.int32(width), np.int32(height), np.int32(width)
    )
    edges_host = edges.to_numpy()
    check("sobel (CUDA C++, extern C)", edges_host, sobel_ref(blurred_host), rtol=1e-4, atol=1e-4)

    quantized = np.clip(edges_host / max(float(edges_host.max()), 1e-12) * 255, 0, 255).astype(np.uint8)
    bins = DeviceArray.zeros(256, np.uint32)
    cache.kernel("histogram_256").launch(64, 256, DeviceArray.from_numpy(quantized.ravel()), bins)
    check("histogram (numba, atomics)", bins.to_numpy(), np.bincount(quantized.ravel(), minlength=256), 0, 0)

    n = 1 << 20
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = DeviceArray.empty(n, np.float32)
    cache.kernel("saxpy").launch(cdiv(n, 256), 256, out, np.float32(2.5), DeviceArray.from_numpy(x), DeviceArray.from_numpy(y))
    check("saxpy (numba, 1-D)", out.to_numpy(), 2.5 * x + y)

    m, k, nn = 200, 130, 170
    a, b = rng.random((m, k), dtype=np.float32), rng.random((k, nn), dtype=np.float32)
    c = DeviceArray.empty((m, nn), np.float32)
    cache.kernel("matmul<float, 16>").launch(
        (cdiv(nn, TILE), cdiv(m, TILE)), (TILE, TILE),
        DeviceArray.from_numpy(a), DeviceArray.from_numpy(b), c, np.int32(m), np.int32(nn), np.int32(k),
    )
    check("matmul<float, 16> (CUDA C++, template)", c.to_numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--self-test", action="store_true", help="check every kernel and signature of the bundle")
    parser.add_argument("--size", type=int, nargs=2, default=(480, 640), metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("-v", "--verbose", action="store_true", help="log which variant each kernel loads")
    args, rest = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")

    if args.self_test:
        from gpu_runtime import gpu_smoke

        return gpu_smoke.main(rest)

    start = time.perf_counter()
    cache = gpu_runtime.open_cache()
    print(cache.describe())
    results = run_pipeline(cache, *args.size)
    failed = 0
    for name, ok, detail in results:
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    print(f"{len(results) - failed} passed, {failed} failed ({time.perf_counter() - start:.2f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
