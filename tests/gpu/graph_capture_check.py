"""CUDA graph capture of the example pipeline's launches, replayed, against a direct run and numpy.

Run on the GPU machine with the bundle's own PEX (its gpu_runtime, cuda-bindings and numpy):

    PEX_INTERPRETER=1 python3 dist/imaging_h200/app.pex tests/gpu/graph_capture_check.py \
        dist/imaging_h200/cache

(or `PYTHONPATH=src/python:src/spec python3 tests/gpu/graph_capture_check.py <cache>`).

blur -> sobel -> histogram, saxpy, matmul and matmul_ld (10 arguments), with inputs built as src/python/imaging/app.py
builds them, are launched directly on a created stream, then captured into one graph (with the
histogram's zeroing as a captured memset) and replayed: the replay must equal the direct run
exactly and numpy within the app's tolerances; then new inputs are copied into the same device
arrays and the graph replayed again (a graph reads memory at replay time). Prints one line per
check and "N passed, N failed"; exit status 1 if any failed.
"""

from __future__ import annotations

import sys
import time
from typing import Dict, List, Tuple

import numpy as np

import gpu_runtime
from gpu_runtime import DeviceArray
from gpu_runtime.driver.device import check, driver_api
from imaging.references import box_blur_ref, cdiv, sobel_ref

TILE = 16
H, W = 480, 640
M, K, N = 200, 130, 170
NX = 1 << 20


class Pipeline:
    """The device arrays of every stage, and the launches that fill them (on one stream)."""

    def __init__(self, cache: gpu_runtime.KernelCache, stream) -> None:
        self.cache, self.stream = cache, stream
        self.src = DeviceArray.empty((H, W), np.float32)
        self.blurred = DeviceArray.empty((H, W), np.float32)
        self.edges = DeviceArray.empty((H, W), np.float32)
        self.quantized = DeviceArray.empty(H * W, np.uint8)
        self.bins = DeviceArray.empty(256, np.uint32)
        self.x, self.y = DeviceArray.empty(NX, np.float32), DeviceArray.empty(NX, np.float32)
        self.out = DeviceArray.empty(NX, np.float32)
        self.a, self.b = DeviceArray.empty((M, K), np.float32), DeviceArray.empty(
            (K, N), np.float32
        )
        self.c = DeviceArray.empty((M, N), np.float32)
        self.c_ld = DeviceArray.empty((M, N), np.float32)  # matmul_ld: its top-left block, 0.5 AB

    def upload(self, seed: int) -> Dict[str, np.ndarray]:
        """New inputs (as app.py draws them), copied into the same device arrays."""
        rng = np.random.default_rng(seed)
        host = {"image": rng.random((H, W), dtype=np.float32)}
        host["x"], host["y"] = rng.random(NX, dtype=np.float32), rng.random(NX, dtype=np.float32)
        host["a"] = rng.random((M, K), dtype=np.float32)
        host["b"] = rng.random((K, N), dtype=np.float32)
        blurred = box_blur_ref(host["image"])
        edges = sobel_ref(blurred)
        scaled = edges / max(float(edges.max()), 1e-12) * 255
        host["quantized"] = np.clip(scaled, 0, 255).astype(np.uint8).ravel()
        host["want_blur"], host["want_sobel"] = blurred, edges
        self.src.copy_from_numpy(host["image"])
        self.quantized.copy_from_numpy(host["quantized"])
        self.x.copy_from_numpy(host["x"])
        self.y.copy_from_numpy(host["y"])
        self.a.copy_from_numpy(host["a"])
        self.b.copy_from_numpy(host["b"])
        return host

    def launch_all(self) -> None:
        k, s = self.cache.kernel, self.stream
        grid2d = (cdiv(W, TILE), cdiv(H, TILE))
        drv = driver_api()
        check(drv.cuMemsetD8Async(self.bins.ptr, 0, self.bins.nbytes, s.handle), "cuMemsetD8Async")
        k("box_blur_3x3").launch(grid2d, (TILE, TILE), self.src, self.blurred, stream=s)
        dims = (np.int32(W), np.int32(H), np.int32(W))
        k("sobel_magnitude").launch(grid2d, (TILE, TILE), self.blurred, self.edges, *dims, stream=s)
        k("histogram_256").launch(64, 256, self.quantized, self.bins, stream=s)
        k("saxpy").launch(cdiv(NX, 256), 256, self.out, np.float32(2.5), self.x, self.y, stream=s)
        mdims = (np.int32(M), np.int32(N), np.int32(K))
        k("matmul<float, 16>").launch(
            (cdiv(N, TILE), cdiv(M, TILE)), (TILE, TILE), self.a, self.b, self.c, *mdims, stream=s
        )
        hm, hn = M // 2, N // 2
        ld = (self.a, np.int32(K), self.b, np.int32(N), self.c_ld, np.int32(N))
        shape = (np.int32(hm), np.int32(hn), np.int32(K), np.float32(0.5))
        grid = (cdiv(hn, TILE), cdiv(hm, TILE))
        k("matmul_ld<float, 16>").launch(grid, (TILE, TILE), *ld, *shape, stream=s)

    def poison(self) -> None:
        """Overwrite every output, so a replay that ran nothing cannot pass."""
        for arr in (self.blurred, self.edges, self.out, self.c, self.c_ld):
            arr.copy_from_numpy(np.full(arr.shape, np.nan, np.float32))
        self.bins.copy_from_numpy(np.full(256, 7, np.uint32))

    def outputs(self) -> Dict[str, np.ndarray]:
        self.stream.synchronize()
        names = ("blurred", "edges", "bins", "out", "c", "c_ld")
        got = {n: getattr(self, n).to_numpy(stream=self.stream) for n in names}
        got["c_ld"] = got["c_ld"][: M // 2, : N // 2]  # what matmul_ld writes
        return got


def against_numpy(
    got: Dict[str, np.ndarray], host: Dict[str, np.ndarray]
) -> List[Tuple[str, bool]]:
    want_c = host["a"].astype(np.float64) @ host["b"]
    return [
        ("blur", np.allclose(got["blurred"], host["want_blur"], rtol=1e-5, atol=1e-5)),
        ("sobel", np.allclose(got["edges"], sobel_ref(got["blurred"]), rtol=1e-4, atol=1e-4)),
        ("histogram", np.array_equal(got["bins"], np.bincount(host["quantized"], minlength=256))),
        ("saxpy", np.allclose(got["out"], 2.5 * host["x"] + host["y"], rtol=1e-5, atol=1e-5)),
        ("matmul", np.allclose(got["c"], want_c, rtol=1e-4, atol=1e-4)),
        ("matmul_ld", np.allclose(got["c_ld"], 0.5 * want_c[: M // 2, : N // 2], 1e-4, 1e-4)),
    ]


def main(argv: List[str]) -> int:
    cache = gpu_runtime.open_cache(argv[0] if argv else None)
    print(cache.device.describe())
    stream = cache.create_stream()
    pipe = Pipeline(cache, stream)
    results: List[Tuple[str, bool]] = []
    host = pipe.upload(0)
    pipe.launch_all()
    direct = pipe.outputs()
    results += [(f"direct run: {n} vs numpy", ok) for n, ok in against_numpy(direct, host)]

    with cache.capture(stream) as graph:
        pipe.launch_all()
    pipe.poison()
    graph.launch()
    replayed = pipe.outputs()
    for name, arr in direct.items():
        results.append((f"replay == direct run: {name}", np.array_equal(replayed[name], arr)))

    host = pipe.upload(1)
    pipe.poison()
    graph.replay()
    again = pipe.outputs()
    results += [(f"replay, new inputs: {n} vs numpy", ok) for n, ok in against_numpy(again, host)]

    timings(pipe, graph)
    graph.close()
    failed = 0
    for what, ok in results:
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def timings(pipe: Pipeline, graph: gpu_runtime.Graph, reps: int = 200) -> None:
    """Informative only: host time to queue the 6 launches + memset, directly and as a graph."""
    for what, go in (("direct launches", pipe.launch_all), ("graph replay", graph.launch)):
        pipe.stream.synchronize()
        start = time.perf_counter()
        for _ in range(reps):
            go()
        queued = (time.perf_counter() - start) / reps * 1e6
        pipe.stream.synchronize()
        total = (time.perf_counter() - start) / reps * 1e6
        print(f"{what}: {queued:.1f} us to queue, {total:.1f} us per pipeline incl. GPU time")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
