"""Runtime benchmark on a GPU: a device bundle's launch path against its peers, and start-up.

Run on the GPU machine from the repo root, next to a built bundle (the app PEX carries
gpu_runtime, cuda-bindings, cuda-core and numpy; numba-cuda and CuPy come from the machine's
python3, with PYTHONPATH for a numpy numba can import):

    python3 tests/bench/runtime_bench.py --bundle dist/imaging_h200 [--runs 5] [--launches 20000]

Prints one table of medians:
- launch overhead per call, asynchronous launches then one sync, for saxpy (numba ABI, 4
  arguments, 22 parameters) and box_blur_3x3 (numba ABI, two 2-D arrays, 18 parameters):
  gpu_runtime; cuda.core `launch` with preconverted numpy scalars and bare `cuLaunchKernel` on a
  prepacked `void**` (the floor), both on the bundle's cubin inside the PEX; CuPy (RawKernel of a
  C saxpy, RawModule on the bundle's cubin); numba-cuda compiling the same Python kernels;
- process start to the first saxpy launched from the bundle, against a process that only imports
  cuda.bindings, initialises the driver and makes the primary context (both through the PEX and
  with the machine's python3), fresh processes, median of --runs;
- the first run of the PEX into an empty PEX_ROOT (unpacking), median of 3 fresh roots.
Peers that cannot run here (numba-cuda beside numpy 2.5, no CuPy) are listed with the reason.
Every process sets CUDA_CACHE_DISABLE=1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CONTEXT_ONLY = """
from cuda.bindings import driver as d
d.cuInit(0)
_, dev = d.cuDeviceGet(0)
_, ctx = d.cuDevicePrimaryCtxRetain(dev)
d.cuCtxSetCurrent(ctx)
"""

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

# The timing loop of every inner script (each runs in its own interpreter: the PEX, numba's,
# CuPy's); `launches` and `runs` are the script's own globals.
TIMED = r"""
def timed(go, sync):
    go()
    sync()
    per_call = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(launches):
            go()
        per_call.append((time.perf_counter() - start) / launches * 1e6)
        sync()
    return per_call
"""

# Inside the PEX: gpu_runtime, cuda.core and bare cuLaunchKernel on the bundle's own cubins.
INNER_PEX = r"""
import json, sys, time
import numpy as np, gpu_runtime
from gpu_runtime import DeviceArray
from gpu_runtime.launch.param_buffer import ParamBuffer

cache_dir, launches, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
label, out_path = sys.argv[4], sys.argv[5]
cache = gpu_runtime.open_cache(cache_dir)
img = DeviceArray.from_numpy(np.ones((480, 640), np.float32))
dst = DeviceArray.empty((480, 640), np.float32)
x = DeviceArray.from_numpy(np.ones(1024, np.float32))
out = DeviceArray.empty(1024, np.float32)
CASES = {
    "saxpy": ("saxpy", 4, 256, (out, np.float32(2.0), x, x)),
    "box_blur_3x3": ("box_blur_3x3", (40, 30), (16, 16), (img, dst)),
}

sync = cache.backend.synchronize

from cuda.bindings import driver as drv
try:
    import cuda.core as core
    dev = core.Device(0)
    dev.set_current()
except ImportError as e:  # the app PEX has no cuda-core since gpu_runtime stopped using it
    core = None
    print(f"no cuda.core here: {e}", file=sys.stderr)
result = {"cubins": {}}
for case, (name, grid, block, args) in CASES.items():
    k = cache.kernel(name)
    module, spec = k.resolve(*args)
    path = cache.choice(k.library).path_of(module)
    data = open(f"{cache_dir}/{path}", "rb").read()
    result["cubins"][case] = {"path": f"{cache_dir}/{path}", "entry": spec.entry}
    packed = k.pack(*args)
    result[f"gpu_runtime{label}|{case}"] = timed(lambda: k.launch(grid, block, *args), sync)
    if core is not None:
        kern = core.ObjectCode.from_cubin(data).get_kernel(spec.entry)
        config = core.LaunchConfig(grid=grid, block=block)
        stream = dev.default_stream
        scalars = packed.launch_args()
        result[f"cuda.core launch, preconverted args{label}|{case}"] = timed(
            lambda: core.launch(stream, config, kern, *scalars), sync
        )
    _, mod = drv.cuModuleLoadData(data)
    _, func = drv.cuModuleGetFunction(mod, spec.entry.encode())
    buf = ParamBuffer.from_packed(packed)
    g = (grid, 1, 1) if isinstance(grid, int) else (*grid, 1)
    b = (block, 1, 1) if isinstance(block, int) else (*block, 1)
    s0 = drv.CUstream(0)
    addr = buf.address
    result[f"bare cuLaunchKernel, prepacked void**{label}|{case}"] = timed(
        lambda: drv.cuLaunchKernel(func, *g[:3], *b[:3], 0, s0, addr, 0), sync
    )
json.dump(result, open(out_path, "w"))
"""

INNER_NUMBA = r"""
import json, sys, time
import numpy as np
from numba import cuda
sys.path.insert(0, "src/python")
from imaging.kernels.saxpy import saxpy
from imaging.kernels.blur import box_blur_3x3
launches, runs, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
x = cuda.to_device(np.ones(1024, np.float32)); out = cuda.device_array(1024, np.float32)
img = cuda.to_device(np.ones((480, 640), np.float32))
dst = cuda.device_array((480, 640), np.float32)
a = np.float32(2.0)
cases = {"saxpy": lambda: saxpy[4, 256](out, a, x, x),
         "box_blur_3x3": lambda: box_blur_3x3[(40, 30), (16, 16)](img, dst)}
result = {}
for case, go in cases.items():
    result[f"numba-cuda|{case}"] = timed(go, cuda.synchronize)
json.dump(result, open(out_path, "w"))
"""

INNER_CUPY = r"""
import json, sys, time
import numpy as np
import cupy as cp
launches, runs = int(sys.argv[1]), int(sys.argv[2])
cubins, out_path = json.loads(sys.argv[3]), sys.argv[4]
raw = cp.RawKernel(r'''
extern "C" __global__ void saxpy(float* out, float a, const float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}''', "saxpy")
x = cp.ones(1024, cp.float32); out = cp.empty(1024, cp.float32)
img = cp.ones((480, 640), cp.float32); dst = cp.empty((480, 640), cp.float32)
def arr(a):  # the numba ABI by hand: meminfo, parent, nitems, itemsize, data, shape, strides
    vals = [0, 0, a.size, a.itemsize, a.data.ptr, *a.shape, *a.strides]
    return [np.int64(v) for v in vals]
def function(case):
    return cp.RawModule(path=cubins[case]["path"]).get_function(cubins[case]["entry"])
blur_fn, saxpy_fn = function("box_blur_3x3"), function("saxpy")
sax_c = (out, cp.float32(2.0), x, x, cp.int32(1024))
blur_args = (*arr(img), *arr(dst))
sax_args = (*arr(out), np.float32(2.0), *arr(x), *arr(x))
cases = {
    "CuPy RawKernel (C saxpy, 5 params)|saxpy": lambda: raw((4,), (256,), sax_c),
    "CuPy RawModule on the bundle cubin|saxpy": lambda: saxpy_fn((4,), (256,), sax_args),
    "CuPy RawModule on the bundle cubin|box_blur_3x3": (
        lambda: blur_fn((40, 30), (16, 16), blur_args)
    ),
}
result = {}
for name, go in cases.items():
    result[name] = timed(go, cp.cuda.runtime.deviceSynchronize)
json.dump(result, open(out_path, "w"))
"""


def timed(argv: list, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True)
    return time.perf_counter() - start


def run_inner(tmp: str, name: str, source: str, launcher: list, args: list, env: dict):
    """Run `source` as `launcher script args json-out` (launcher: python3, or python3 app.pex);
    (figures, None) or (None, why)."""
    script = os.path.join(tmp, f"inner_{name}.py")
    with open(script, "w") as f:
        f.write(TIMED + source)
    out = os.path.join(tmp, f"{name}.json")
    proc = subprocess.run(
        [*launcher, script, *args, out], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        err = proc.stderr.strip().splitlines()
        return None, err[-1] if err else f"exit status {proc.returncode}"
    with open(out) as f:
        return json.load(f), None


def startup(py: str, pex: str, base: dict, in_pex: dict, runs: int) -> dict:
    """Seconds from process start to the point named, fresh processes, `runs` each."""
    starts = {
        "context only (cuda.bindings + cuInit + primary context), machine python3": (
            [py, "-c", CONTEXT_ONLY],
            base,
        ),
        "context only, through the PEX": ([py, pex, "-c", CONTEXT_ONLY], in_pex),
        "first saxpy launched from the bundle (cubin), through the PEX": (
            [py, pex, "-c", FIRST_LAUNCH_BUNDLE],
            in_pex,
        ),
    }
    return {name: [timed(argv, env) for _ in range(runs)] for name, (argv, env) in starts.items()}


def fresh_pex_runs(py: str, pex: str, in_pex: dict, n: int = 3) -> list:
    """First run of the PEX (unpack into an empty PEX_ROOT + first saxpy), `n` fresh roots."""
    times = []
    for _ in range(n):
        root = tempfile.mkdtemp(prefix="pex_root_")
        try:
            env = dict(in_pex, PEX_ROOT=root)
            times.append(timed([py, pex, "-c", FIRST_LAUNCH_BUNDLE], env))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return times


def print_table(launch: dict, start: dict, pex_first: list, skipped: dict, a) -> None:
    med = statistics.median
    print(
        f"| launch overhead, us per call ({a.launches} async launches, median of {a.runs}) "
        f"| saxpy (4 args, 22 params) | box_blur_3x3 (2 args, 18 params) |\n|---|---|---|"
    )
    peers: dict = {}
    for key, per_call in launch.items():
        peer, case = key.split("|")
        peers.setdefault(peer, {})[case] = f"{med(per_call):.2f}"
    for peer, by_case in peers.items():
        print(f"| {peer} | {by_case.get('saxpy', '-')} | {by_case.get('box_blur_3x3', '-')} |")
    for peer, why in skipped.items():
        print(f"| {peer} | not run: {why} | |")
    print(f"\n| start-up, s (median of {a.runs} fresh processes) | s |\n|---|---|")
    for name, times in start.items():
        print(f"| {name} | {med(times):.3f} |")
    names = list(start)
    gap = med(start[names[2]]) - med(start[names[1]])
    print(f"| first saxpy minus context only (both through the PEX) | {gap:.3f} |")
    print(
        f"| first run of the PEX, empty PEX_ROOT (median of {len(pex_first)}) | "
        f"{med(pex_first):.3f} |"
    )
    print(
        "\npeers run: " + ", ".join(peers) + (f"; skipped: {', '.join(skipped)}" if skipped else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bundle", required=True, help="dist/<bundle> (holds <app>.pex, cache/)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--launches", type=int, default=20000)
    parser.add_argument("--json", help="also write the raw figures here")
    a = parser.parse_args()

    pex = next(os.path.join(a.bundle, f) for f in os.listdir(a.bundle) if f.endswith(".pex"))
    base = dict(os.environ, CUDA_CACHE_DISABLE="1")
    in_pex = dict(base, PEX_INTERPRETER="1")
    py = sys.executable
    pex_first = fresh_pex_runs(py, pex, in_pex)
    timed([py, pex, "-c", "pass"], in_pex)  # unpack into the usual PEX_ROOT before timing
    start = startup(py, pex, base, in_pex, a.runs)
    n, runs = str(a.launches), str(a.runs)
    launch: dict = {}
    skipped: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache_dir = os.path.abspath(os.path.join(a.bundle, "cache"))
        args = [cache_dir, n, runs, " (app PEX)"]
        got, why = run_inner(tmp, "pex", INNER_PEX, [py, pex], args, in_pex)
        if got is None:
            raise SystemExit(f"the bundle's own launches failed: {why}")
        cubins = got.pop("cubins")
        launch.update(got)
        # The same with the machine's python3 (its cuda-bindings and cuda-core) and this checkout's
        # gpu_runtime: where the cuda.core peer runs.
        src_env = dict(
            base, PYTHONPATH=os.pathsep.join(["src/python", "src/spec", base.get("PYTHONPATH", "")])
        )
        args = [cache_dir, n, runs, " (python3)"]
        got, why = run_inner(tmp, "py3", INNER_PEX, [py], args, src_env)
        if got is None:
            skipped["gpu_runtime / cuda.core / bare (python3)"] = why
        else:
            got.pop("cubins")
            launch.update(got)
        for name, src, args in (
            ("numba-cuda", INNER_NUMBA, [n, runs]),
            ("CuPy", INNER_CUPY, [n, runs, json.dumps(cubins)]),
        ):
            got, why = run_inner(tmp, name, src, [py], args, base)
            if got is None:
                skipped[name] = why
            else:
                launch.update(got)
    print_table(launch, start, pex_first, skipped, a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"launch_us": launch, "startup_s": start, "pex_first_s": pex_first}, f)


if __name__ == "__main__":
    main()
