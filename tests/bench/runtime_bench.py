"""Runtime benchmark on a GPU: a device bundle (cubin, PTX) against numba-cuda's own JIT.

Run on the GPU machine, next to a built bundle (the app PEX carries gpu_runtime; numba-cuda and
a numpy it imports beside, for the comparison, come from the machine's python3 / PYTHONPATH):

    python3 tests/bench/runtime_bench.py --bundle dist/imaging_h200 [--runs 5] [--launches 20000]

Prints a table of medians:
- process start to first kernel launched (and synchronised): the bundle from cubin, the bundle
  from PTX only (driver JIT), and numba-cuda compiling the same saxpy from Python source;
- load time per kernel (read + sha256 + cuModuleLoadData + get function), cubin vs PTX;
- launch overhead per call of saxpy on 1024 elements, asynchronous launches then one sync:
  gpu_runtime vs numba-cuda (vs CuPy when it is installed).
Every run sets CUDA_CACHE_DISABLE=1 so the driver's JIT cache never hides the PTX cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

FIRST_LAUNCH_BUNDLE = """
import numpy as np, gpu_runtime
from gpu_runtime import DeviceArray
cache = gpu_runtime.open_cache()
k = cache.kernel("saxpy")
x = DeviceArray.from_numpy(np.ones(1024, np.float32))
out = DeviceArray.empty(1024, np.float32)
k.launch(4, 256, out, np.float32(2.0), x, x)
assert out.to_numpy()[0] == 3.0
"""

FIRST_LAUNCH_NUMBA = """
import numpy as np
from numba import cuda

@cuda.jit("void(float32[::1], float32, float32[::1], float32[::1])")
def saxpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]

x = cuda.to_device(np.ones(1024, np.float32))
out = cuda.device_array(1024, np.float32)
saxpy[4, 256](out, np.float32(2.0), x, x)
assert out.copy_to_host()[0] == 3.0
"""

INNER_BUNDLE = """
import json, sys, time
import numpy as np, gpu_runtime
from gpu_runtime import DeviceArray

cache_dir, launches, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
result = {"load_ms": {}}
for prefer in ("cubin", "ptx"):
    cache = gpu_runtime.open_cache(cache_dir, prefer=prefer)
    DeviceArray.empty(1, np.float32)  # context creation out of the way, no module loaded
    for name in cache.kernel_names():
        kernel = cache.kernel(name)
        start = time.perf_counter()
        kernel.load()
        result["load_ms"].setdefault(name, {})[prefer] = (time.perf_counter() - start) * 1e3
cache = gpu_runtime.open_cache(cache_dir)
k = cache.kernel("saxpy")
x = DeviceArray.from_numpy(np.ones(1024, np.float32))
out = DeviceArray.empty(1024, np.float32)
a = np.float32(2.0)
k.launch(4, 256, out, a, x, x)
per_call = []
for _ in range(5):
    start = time.perf_counter()
    for _ in range(launches):
        k.launch(4, 256, out, a, x, x)
    per_call.append((time.perf_counter() - start) / launches * 1e6)
    out.to_numpy()
result["launch_us"] = per_call
json.dump(result, open(out_path, "w"))
"""

INNER_NUMBA = FIRST_LAUNCH_NUMBA + """
import json, sys, time
launches, out_path = int(sys.argv[1]), sys.argv[2]
a = np.float32(2.0)
per_call = []
for _ in range(5):
    start = time.perf_counter()
    for _ in range(launches):
        saxpy[4, 256](out, a, x, x)
    per_call.append((time.perf_counter() - start) / launches * 1e6)
    cuda.synchronize()
json.dump({"launch_us": per_call}, open(out_path, "w"))
"""

INNER_CUPY = """
import json, sys, time
import cupy as cp
launches, out_path = int(sys.argv[1]), sys.argv[2]
saxpy = cp.RawKernel(r'''
extern "C" __global__ void saxpy(float* out, float a, const float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}''', "saxpy")
x = cp.ones(1024, cp.float32); out = cp.empty(1024, cp.float32)
args = (out, cp.float32(2.0), x, x, cp.int32(1024))
saxpy((4,), (256,), args)
per_call = []
for _ in range(5):
    start = time.perf_counter()
    for _ in range(launches):
        saxpy((4,), (256,), args)
    per_call.append((time.perf_counter() - start) / launches * 1e6)
    cp.cuda.runtime.deviceSynchronize()
json.dump({"launch_us": per_call}, open(out_path, "w"))
"""


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True)
    return time.perf_counter() - start


def first_launch_times(py: str, pex: str, base: dict, in_pex: dict, runs: int) -> dict:
    """Seconds from process start to the first saxpy launched, `runs` times each way."""
    starts = {
        "bundle, cubin": ([py, pex, "-c", FIRST_LAUNCH_BUNDLE], in_pex),
        "bundle, PTX only (driver JIT)": (
            [py, pex, "-c", FIRST_LAUNCH_BUNDLE],
            dict(in_pex, GPU_RUNTIME_PREFER="ptx"),
        ),
        "numba-cuda JIT from source": ([py, "-c", FIRST_LAUNCH_NUMBA], base),
    }
    return {name: [timed(argv, env) for _ in range(runs)] for name, (argv, env) in starts.items()}


def run_inner(
    tmp: str, name: str, source: str, prefix: list[str], argv: list[str], env: dict, check=True
) -> tuple[dict | None, subprocess.CompletedProcess]:
    """Run `source` as `prefix + [script] + argv + [json out]`; (its figures or None, process).

    With `check`, a failure raises and the output is shown; without, it is captured (CuPy may
    well be missing).
    """
    script = os.path.join(tmp, f"inner_{name}.py")
    with open(script, "w") as f:
        f.write(source)
    out = os.path.join(tmp, f"{name}.json")
    proc = subprocess.run(
        [*prefix, script, *argv, out], env=env, check=check, capture_output=not check, text=True
    )
    if proc.returncode != 0:
        return None, proc
    with open(out) as f:
        return json.load(f), proc


def print_tables(results: dict, runs: int, launches: int, cupy_failure: str | None) -> None:
    med = statistics.median
    print(
        f"PEX first run (unpack into PEX_ROOT + first launch): {results['pex_first_run_s']:.2f} s"
    )
    print(f"\n| process start to first saxpy launched, median of {runs} | s |\n|---|---|")
    for name, times in results["first_launch_s"].items():
        print(f"| {name} | {med(times):.3f} |")
    print("\n| kernel | load from cubin, ms | load from PTX (JIT), ms |\n|---|---|---|")
    for name, by_kind in sorted(results["load_ms"].items()):
        print(f"| {name} | {by_kind['cubin']:.2f} | {by_kind['ptx']:.2f} |")
    print(
        f"\n| launch overhead, saxpy n=1024, {launches} async launches, median of 5 "
        f"| us per call |\n|---|---|"
    )
    for name, per_call in results["launch_us"].items():
        print(f"| {name} | {med(per_call):.2f} |")
    if cupy_failure is not None:
        print(f"| CuPy | not installed here ({cupy_failure}) |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bundle", required=True, help="dist/<bundle> (holds <app>.pex, cache/)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--launches", type=int, default=20000)
    parser.add_argument("--json", help="also write the raw figures here")
    args = parser.parse_args()

    pex = next(os.path.join(args.bundle, f) for f in os.listdir(args.bundle) if f.endswith(".pex"))
    base = dict(os.environ, CUDA_CACHE_DISABLE="1")
    in_pex = dict(base, PEX_INTERPRETER="1")
    py = sys.executable
    # The first run of a PEX unpacks it into PEX_ROOT: report it, then time warm starts.
    results: dict = {"pex_first_run_s": timed([py, pex, "-c", FIRST_LAUNCH_BUNDLE], in_pex)}
    results["first_launch_s"] = first_launch_times(py, pex, base, in_pex, args.runs)

    launches = str(args.launches)
    with tempfile.TemporaryDirectory() as tmp:
        cache_dir = os.path.join(args.bundle, "cache")
        bundle, _ = run_inner(tmp, "bundle", INNER_BUNDLE, [py, pex], [cache_dir, launches], in_pex)
        numba, _ = run_inner(tmp, "numba", INNER_NUMBA, [py], [launches], base)
        cupy, cupy_run = run_inner(tmp, "cupy", INNER_CUPY, [py], [launches], base, check=False)
    assert bundle is not None and numba is not None  # check=True raised otherwise
    launch_us = {"gpu_runtime": bundle["launch_us"], "numba-cuda": numba["launch_us"]}
    results.update(load_ms=bundle["load_ms"], launch_us=launch_us)
    cupy_failure = None
    if cupy:
        results["launch_us"]["CuPy RawKernel"] = cupy["launch_us"]
    else:
        err = cupy_run.stderr.strip()
        cupy_failure = err.splitlines()[-1] if err else "failed"
    print_tables(results, args.runs, args.launches, cupy_failure)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
