"""Example app: an image pipeline (blur -> sobel -> histogram) plus saxpy and a tiled matmul.

Every kernel was compiled ahead of time by `pants package` into the bundle's `cache/`;
`gpu_runtime` picks the variant for this GPU and launches it, with no compiler on the device.
Each stage is checked against numpy, so running the bundle is also its acceptance test:

    python3 dist/imaging_h200/app.pex              # the pipeline, checked against numpy
    python3 dist/imaging_h200/app.pex --self-test  # every kernel and signature in the manifest

Exit status: 0 if every check passed, 1 if one failed, 2 if gpu_runtime could not run the
kernels at all (no bundle cache, no variant for this GPU, a tampered file, no driver), with its
message on stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import List, Tuple

import numpy as np

import gpu_runtime
from gpu_runtime import DeviceArray, GpuRuntimeError
from gpu_runtime.selftest.main import main as self_test
from imaging.references import REFERENCES, box_blur_ref, cdiv, sobel_ref

TILE = 16
EXIT_GPU_ERROR = 2  # not 1, which says that a check ran and failed


Results = List[Tuple[str, bool, str]]


def _check(
    results: Results,
    name: str,
    got: np.ndarray,
    want: np.ndarray,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> None:
    ok = bool(np.allclose(got, want, rtol=rtol, atol=atol))
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
    results.append((name, ok, f"max abs err {err:.3g}"))


def image_stages(cache: gpu_runtime.KernelCache, image: np.ndarray, results: Results) -> None:
    """blur -> sobel -> histogram, each stage's input the previous stage's device output."""
    height, width = image.shape
    grid2d = (cdiv(width, TILE), cdiv(height, TILE))
    src = DeviceArray.from_numpy(image)
    blurred = DeviceArray.empty((height, width), np.float32)
    cache.kernel("box_blur_3x3").launch(grid2d, (TILE, TILE), src, blurred)
    blurred_host = blurred.to_numpy()
    _check(results, "blur (numba, shared memory)", blurred_host, box_blur_ref(image))

    edges = DeviceArray.empty((height, width), np.float32)
    dims = (np.int32(width), np.int32(height), np.int32(width))
    cache.kernel("sobel_magnitude").launch(grid2d, (TILE, TILE), blurred, edges, *dims)
    edges_host = edges.to_numpy()
    want = sobel_ref(blurred_host)
    _check(results, "sobel (CUDA C++, extern C)", edges_host, want, rtol=1e-4, atol=1e-4)

    scaled = edges_host / max(float(edges_host.max()), 1e-12) * 255
    quantized = np.clip(scaled, 0, 255).astype(np.uint8).ravel()
    bins = DeviceArray.zeros(256, np.uint32)
    cache.kernel("histogram_256").launch(64, 256, DeviceArray.from_numpy(quantized), bins)
    want = np.bincount(quantized, minlength=256)
    _check(results, "histogram (numba, atomics)", bins.to_numpy(), want, 0, 0)


def saxpy_stage(cache: gpu_runtime.KernelCache, rng: np.random.Generator, results: Results) -> None:
    n = 1 << 20
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = DeviceArray.empty(n, np.float32)
    dx, dy = DeviceArray.from_numpy(x), DeviceArray.from_numpy(y)
    cache.kernel("saxpy").launch(cdiv(n, 256), 256, out, np.float32(2.5), dx, dy)
    _check(results, "saxpy (numba, 1-D)", out.to_numpy(), 2.5 * x + y)


def matmul_stage(
    cache: gpu_runtime.KernelCache, rng: np.random.Generator, results: Results
) -> None:
    m, k, nn = 200, 130, 170
    a, b = rng.random((m, k), dtype=np.float32), rng.random((k, nn), dtype=np.float32)
    c = DeviceArray.empty((m, nn), np.float32)
    da, db = DeviceArray.from_numpy(a), DeviceArray.from_numpy(b)
    dims = (np.int32(m), np.int32(nn), np.int32(k))
    grid = (cdiv(nn, TILE), cdiv(m, TILE))
    cache.kernel("matmul<float, 16>").launch(grid, (TILE, TILE), da, db, c, *dims)
    want = a.astype(np.float64) @ b
    name = "matmul<float, 16> (CUDA C++, template)"
    _check(results, name, c.to_numpy(), want, rtol=1e-4, atol=1e-4)

    # The top-left (m/2 x nn/2) block of the same product, scaled, written into a block of c:
    # matmul_ld reads and writes rows of the full matrices (leading dimensions k, nn, nn).
    half_m, half_n = m // 2, nn // 2
    grid = (cdiv(half_n, TILE), cdiv(half_m, TILE))
    ld = (da, np.int32(k), db, np.int32(nn), c, np.int32(nn))
    shape = (np.int32(half_m), np.int32(half_n), np.int32(k), np.float32(0.5))
    cache.kernel("matmul_ld<float, 16>").launch(grid, (TILE, TILE), *ld, *shape)
    want[:half_m, :half_n] *= 0.5
    name = "matmul_ld<float, 16> (CUDA C++, 10 arguments, leading dimensions)"
    _check(results, name, c.to_numpy(), want, rtol=1e-4, atol=1e-4)


def run_pipeline(cache: gpu_runtime.KernelCache, height: int, width: int) -> Results:
    """Every stage, checked against numpy: [(stage, ok, detail)]."""
    rng = np.random.default_rng(0)
    image = rng.random((height, width), dtype=np.float32)
    results: Results = []
    image_stages(cache, image, results)
    saxpy_stage(cache, rng, results)
    matmul_stage(cache, rng, results)
    return results


def run(size: tuple[int, int]) -> int:
    start = time.perf_counter()
    cache = gpu_runtime.open_cache()
    print(cache.describe())
    results = run_pipeline(cache, *size)
    failed = 0
    for name, ok, detail in results:
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    print(f"{len(results) - failed} passed, {failed} failed ({time.perf_counter() - start:.2f} s)")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--self-test", action="store_true", help="check every kernel and signature of the bundle"
    )
    parser.add_argument(
        "--size", type=int, nargs=2, default=(480, 640), metavar=("HEIGHT", "WIDTH")
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log which variant each kernel loads"
    )
    args, rest = parser.parse_known_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )
    try:
        if args.self_test:
            return self_test(rest, references=REFERENCES)
        return run(args.size)
    except GpuRuntimeError as e:
        # gpu_runtime's messages say what is wrong and how to fix it: a traceback adds nothing.
        print(f"error: {e}", file=sys.stderr)
        return EXIT_GPU_ERROR


if __name__ == "__main__":
    sys.exit(main())
