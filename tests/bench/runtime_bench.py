"""Runtime benchmark on a GPU: a device bundle's launch path against its peers, and start-up.

Run on the GPU machine from the repo root, next to a built bundle (the app PEX carries
gpu_runtime, cuda-bindings, cuda-core and numpy; numba-cuda and CuPy come from the machine's
python3, with PYTHONPATH for a numpy numba can import):

    python3 tests/bench/runtime_bench.py --bundle dist/imaging_h200 [--runs 5] [--launches 20000]

Prints one table of medians:
- launch overhead per call, asynchronous launches then one sync, for saxpy (numba ABI, 4
  arguments, 22 parameters), box_blur_3x3 (numba ABI, two 2-D arrays, 18 parameters) and
  matmul_ld<float, 16> (CUDA C++, 10 arguments: 3 pointers, 6 ints, a float; 16x16, one block):
  gpu_runtime (`k.launch(grid, block, a0, a1, ...)` as an app writes it; spread from a tuple as a
  diagnostic row); cuda.core `launch` with preconverted numpy scalars and bare `cuLaunchKernel` on a
  prepacked `void**` (the floor), both on the bundle's cubin inside the PEX; CuPy (RawKernel of a
  C saxpy, matmul.cu compiled by CuPy through its name expression, RawModule on the bundle's
  cubins); numba-cuda compiling the same Python kernels, and for matmul_ld a numba kernel of the
  same 10 arguments (its body untiled: the launch path does not depend on it);
- process start to the first saxpy launched from the bundle, through the PEX (`python3 app.pex`)
  and through the bundle's launcher (`app`, a venv of the PEX made once), against a process that
  only imports cuda.bindings, initialises the driver and makes the primary context (machine
  python3, the PEX, the launcher), fresh processes in turn, median of --runs; and the slowest
  imports of that first saxpy (-X importtime, the launcher's venv);
- the first run of each into an empty PEX_ROOT and venv directory, median of 3.
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

# The first saxpy; with $BENCH_PHASES, each phase's seconds are appended there as a JSON line.
FIRST_LAUNCH_BUNDLE = """
import time
t = [time.perf_counter()]
import numpy as np
t.append(time.perf_counter())
import gpu_runtime
from gpu_runtime import DeviceArray
t.append(time.perf_counter())
cache = gpu_runtime.open_cache()
k = cache.kernel("saxpy")
k.load()  # the context, then the cubin (otherwise on the launch)
t.append(time.perf_counter())
x = DeviceArray.from_numpy(np.ones(1024, np.float32))
out = DeviceArray.empty(1024, np.float32)
t.append(time.perf_counter())
k.launch(4, 256, out, np.float32(2.0), x, x)
assert out.to_numpy()[0] == 3.0
t.append(time.perf_counter())
import json, os
if os.environ.get("BENCH_PHASES"):
    with open(os.environ["BENCH_PHASES"], "a") as f:
        f.write(json.dumps([b - a for a, b in zip(t, t[1:])]) + "\\n")
"""
NO_INIT = "CUDA left to the app (GPU_BUNDLE_INIT_CUDA=0)"
PHASES = (
    "import numpy",
    "import gpu_runtime",
    "open_cache, kernel: context and cubin load",
    "two DeviceArrays (alloc, copy in)",
    "launch, copy out (sync)",
)

# matmul_ld's 10 arguments on 16x16 matrices (a, b, c: 256-element arrays), in every inner
# script; numpy scalars of the C types (CuPy would pass a Python int as 8 bytes).
MATMUL_LD = r"""
import numpy
def MATMUL_LD_ARGS(a, c):
    i = numpy.int32(16)
    return (a, i, a, i, c, i, i, i, i, numpy.float32(1.0))
"""

# The timing loops of every inner script (each runs in its own interpreter: the PEX, numba's,
# CuPy's); `launches` and `runs` are the script's own globals. `timed_together` interleaves its
# peers, one batch of each per round, so that a ratio compares batches run side by side.
TIMED = r"""
def timed(go, sync):
    return timed_together({"": go}, sync)[""]

def timed_together(gos, sync):
    for go in gos.values():
        go()
    sync()
    per_call = {name: [] for name in gos}
    for _ in range(runs):
        for name, go in gos.items():
            start = time.perf_counter()
            for _ in range(launches):
                go()
            per_call[name].append((time.perf_counter() - start) / launches * 1e6)
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
ma = DeviceArray.from_numpy(np.ones(256, np.float32))
mc = DeviceArray.empty(256, np.float32)
CASES = {
    "saxpy": ("saxpy", 4, 256, (out, np.float32(2.0), x, x)),
    "box_blur_3x3": ("box_blur_3x3", (40, 30), (16, 16), (img, dst)),
    "matmul_ld": ("matmul_ld<float, 16>", (1, 1), (16, 16), MATMUL_LD_ARGS(ma, mc)),
}

sync = cache.backend.synchronize

def app_call(k, grid, block, args):
    # `k.launch(grid, block, a0, a1, ...)` as an app writes it: each argument by name, no tuple
    # spread into the call (the bare calls below spread none either)
    names = ", ".join(f"a{i}" for i in range(len(args)))
    scope = dict(k=k, grid=grid, block=block, **{f"a{i}": a for i, a in enumerate(args)})
    return eval(f"lambda: k.launch(grid, block, {names})", scope)

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
    gos = {f"gpu_runtime{label}": app_call(k, grid, block, args)}
    gos[f"  gpu_runtime, arguments spread from a tuple{label}"] = (
        lambda: k.launch(grid, block, *args)
    )
    if core is not None:
        kern = core.ObjectCode.from_cubin(data).get_kernel(spec.entry)
        config = core.LaunchConfig(grid=grid, block=block)
        stream = dev.default_stream
        scalars = packed.launch_args()
        gos[f"cuda.core launch, preconverted args{label}"] = (
            lambda: core.launch(stream, config, kern, *scalars)
        )
    _, mod = drv.cuModuleLoadData(data)
    _, func = drv.cuModuleGetFunction(mod, spec.entry.encode())
    buf = ParamBuffer.from_packed(packed)
    g = (grid, 1, 1) if isinstance(grid, int) else (*grid, 1)
    b = (block, 1, 1) if isinstance(block, int) else (*block, 1)
    gx, gy, gz, bx, by, bz = (*g[:3], *b[:3])
    s0 = drv.CUstream(0)
    addr = buf.address
    gos[f"bare cuLaunchKernel, prepacked void**{label}"] = (
        lambda: drv.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, 0, s0, addr, 0)
    )
    if case == "saxpy":  # where gpu_runtime's time goes: its plan's fire alone, and the bare
        # call as fire makes it (stream None: cuda.bindings' legacy default stream)
        k.launch(grid, block, *args)  # the plan, and its fire, exist from the first launch on
        fire, dims = k._fire, k._launch_dims(grid, block)
        gos[f"  gpu_runtime's fire(args) alone{label}"] = lambda: fire(args, dims, 0, None)
        gos[f"  bare cuLaunchKernel, stream None{label}"] = (
            lambda: drv.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, 0, None, addr, 0)
        )
    for peer, per_call in timed_together(gos, sync).items():
        result[f"{peer}|{case}"] = per_call
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

@cuda.jit
def matmul_ld(a, lda, b, ldb, c, ldc, m, n, k, alpha):  # matmul.cu's arguments, untiled
    col, row = cuda.grid(2)
    if row < m and col < n:
        acc = alpha * 0
        for i in range(k):
            acc += a[row * lda + i] * b[i * ldb + col]
        c[row * ldc + col] = alpha * acc

ma, mc = cuda.to_device(np.ones(256, np.float32)), cuda.device_array(256, np.float32)
ld_args = MATMUL_LD_ARGS(ma, mc)
cases = {"saxpy": lambda: saxpy[4, 256](out, a, x, x),
         "box_blur_3x3": lambda: box_blur_3x3[(40, 30), (16, 16)](img, dst),
         "matmul_ld": lambda: matmul_ld[(1, 1), (16, 16)](*ld_args)}
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
blur_fn, saxpy_fn, ld_fn = function("box_blur_3x3"), function("saxpy"), function("matmul_ld")
kernels = "src/python/imaging/kernels"
ld_name = "matmul_ld<float, 16>"
ld_src = cp.RawModule(code=open(f"{kernels}/matmul.cu").read(), options=(f"-I{kernels}",),
                      name_expressions=[ld_name]).get_function(ld_name)
ma, mc = cp.ones(256, cp.float32), cp.empty(256, cp.float32)
ld_args = MATMUL_LD_ARGS(ma, mc)
sax_c = (out, cp.float32(2.0), x, x, cp.int32(1024))
blur_args = (*arr(img), *arr(dst))
sax_args = (*arr(out), np.float32(2.0), *arr(x), *arr(x))
cases = {
    "CuPy RawKernel (C saxpy, 5 params; matmul.cu by name expression)|saxpy": (
        lambda: raw((4,), (256,), sax_c)
    ),
    "CuPy RawKernel (C saxpy, 5 params; matmul.cu by name expression)|matmul_ld": (
        lambda: ld_src((1, 1), (16, 16), ld_args)
    ),
    "CuPy RawModule on the bundle cubin|matmul_ld": lambda: ld_fn((1, 1), (16, 16), ld_args),
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
        f.write(TIMED + MATMUL_LD + source)
    out = os.path.join(tmp, f"{name}.json")
    proc = subprocess.run(
        [*launcher, script, *args, out], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        err = proc.stderr.strip().splitlines()
        return None, err[-1] if err else f"exit status {proc.returncode}"
    with open(out) as f:
        return json.load(f), None


# The start-up probes, run as an app runs: a module (`PEX_MODULE`, found through
# PEX_EXTRA_SYS_PATH) rather than `PEX_INTERPRETER=1 -c`, whose REPL set-up imports readline
# and rlcompleter (25 ms on the H200) before the code; python3 runs the same file as a script.
PROBES = {"context": CONTEXT_ONLY, "first_saxpy": FIRST_LAUNCH_BUNDLE}


def write_probes(work: str) -> None:
    for name, code in PROBES.items():
        with open(os.path.join(work, f"bench_probe_{name}.py"), "w") as f:
            f.write(code)


def probe(argv: list, env: dict, name: str, work: str) -> tuple:
    """(argv, env) that run probe `name`: as a script with python3, as PEX_MODULE otherwise."""
    if argv == [sys.executable]:
        return [*argv, os.path.join(work, f"bench_probe_{name}.py")], env
    return argv, dict(env, PEX_MODULE=f"bench_probe_{name}", PEX_EXTRA_SYS_PATH=work)


def startup(py: str, pex: str, launcher: str, envs: dict, work: str, runs: int) -> dict:
    """Seconds from process start to the point named, fresh processes, `runs` each, taken in
    turn (one of each per round) so that all see the same machine state."""
    base, in_launcher = envs["base"], envs["launcher"]
    starts = {
        "context only (cuda.bindings + cuInit + primary context), machine python3": (
            [py],
            base,
            "context",
        ),
        "context only, through the PEX": ([py, pex], base, "context"),
        "context only, through the bundle's launcher": ([launcher], in_launcher, "context"),
        "first saxpy launched from the bundle (cubin), through the PEX": (
            [py, pex],
            dict(base, BENCH_PHASES=os.path.join(work, "phases_pex.jsonl")),
            "first_saxpy",
        ),
        "first saxpy launched from the bundle (cubin), through the launcher": (
            [launcher],
            dict(in_launcher, BENCH_PHASES=os.path.join(work, "phases_launcher.jsonl")),
            "first_saxpy",
        ),
        # The launcher as it was before it started CUDA itself (deploy_bundle's
        # init_cuda_at_start=False): the app's imports, then the driver's set-up.
        f"first saxpy launched from the bundle (cubin), through the launcher, {NO_INIT}": (
            [launcher],
            dict(
                in_launcher,
                GPU_BUNDLE_INIT_CUDA="0",
                BENCH_PHASES=os.path.join(work, "phases_launcher_noinit.jsonl"),
            ),
            "first_saxpy",
        ),
    }
    times: dict = {name: [] for name in starts}
    for _ in range(runs):
        for name, (argv, env, which) in starts.items():
            times[name].append(timed(*probe(argv, env, which, work)))
    return times


PHASE_COLUMNS = (  # (phases file, how the start-up row ends, column)
    ("pex", "through the PEX", "through the PEX"),
    ("launcher", "through the launcher", "through the launcher"),
    ("launcher_noinit", NO_INIT, "launcher, GPU_BUNDLE_INIT_CUDA=0"),
)


def phases(work: str, start: dict) -> dict:
    """{column: [(phase, median s)]} of the first saxpy runs, with what came before the probe's
    first line (interpreter, site, the PEX's boot) as total minus phases."""
    out = {}
    for how, ending, column in PHASE_COLUMNS:
        with open(os.path.join(work, f"phases_{how}.jsonl")) as f:
            runs = [json.loads(line) for line in f if line.strip()]
        total = next(v for k, v in start.items() if k.startswith("first") and k.endswith(ending))
        before = [t - sum(r) for t, r in zip(total, runs)]
        rows = [("process start to the probe's first line", statistics.median(before))]
        rows += [(name, statistics.median(r[i] for r in runs)) for i, name in enumerate(PHASES)]
        out[column] = rows
    return out


def fresh_runs(ways: dict, work: str, n: int = 3) -> dict:
    """{name: seconds of first runs} of each (argv, env) of `ways` (first saxpy) with an empty
    PEX_ROOT and venv directory, `n` each, taken in turn; with the PEX_ROOT's size after each."""
    times: dict = {name: [] for name in ways}
    sizes: dict = {name: [] for name in ways}
    for _ in range(n):
        for name, (argv, env) in ways.items():
            root = tempfile.mkdtemp(prefix="fresh_root_")
            try:
                fresh = dict(env, PEX_ROOT=os.path.join(root, "pex"))
                fresh["GPU_BUNDLE_VENVS"] = os.path.join(root, "venvs")
                times[name].append(timed(*probe(argv, fresh, "first_saxpy", work)))
                sizes[name].append(tree_bytes(fresh["PEX_ROOT"]))
            finally:
                shutil.rmtree(root, ignore_errors=True)
    return {"s": times, "bytes": sizes}


def size(pex: str) -> int:
    """Bytes of a PEX: a zipapp file, or a packed directory (deploy_bundle's default)."""
    return tree_bytes(pex) if os.path.isdir(pex) else os.path.getsize(pex)


def tree_bytes(top: str) -> int:
    return sum(
        os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(top) for f in files
    )


def import_profile(venv: str, env: dict, work: str, top: int = 8) -> list:
    """(module, cumulative ms) of the slowest imports of the first saxpy, in the launcher's venv
    (its interpreter run as the launcher runs it, with -X importtime)."""
    argv, env = probe([f"{venv}/bin/python", "-X", "importtime", "-sE", f"{venv}/pex"], env,
                      "first_saxpy", work)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            if len(name) - len(name.lstrip()) <= 1:  # top-level imports of the probe only
                rows.append((name.strip(), int(parts[1]) / 1000))
    return sorted(rows, key=lambda r: -r[1])[:top]


CASE_NAMES = ("saxpy", "box_blur_3x3", "matmul_ld")


def print_ratios(launch: dict) -> None:
    """The goals' ratios: gpu_runtime against the fastest bare call (the median over rounds of
    each round's ratio: the peers of one interpreter ran interleaved) and against CuPy's
    RawKernel (ratio of medians: another process), per interpreter and case."""
    med = statistics.median
    print("\n| gpu_runtime / peer | " + " | ".join(CASE_NAMES) + " |\n|---|---|---|---|")
    cupy = next((k.split("|")[0] for k in launch if k.startswith("CuPy RawKernel")), None)
    for where in (" (app PEX)", " (python3)"):
        floors = [f"cuda.core launch, preconverted args{where}"]
        floors.append(f"bare cuLaunchKernel, prepacked void**{where}")
        for label in ("fastest bare call", "CuPy RawKernel"):
            cells = []
            for case in CASE_NAMES:
                ours = launch.get(f"gpu_runtime{where}|{case}")
                if ours is None:
                    cells.append("-")
                elif label == "CuPy RawKernel":
                    ref = launch.get(f"{cupy}|{case}")
                    cells.append(f"{med(ours) / med(ref):.2f}x" if ref else "-")
                else:
                    known = [launch[f"{f}|{case}"] for f in floors if f"{f}|{case}" in launch]
                    per_round = [o / min(f[r] for f in known) for r, o in enumerate(ours)]
                    cells.append(f"{med(per_round):.2f}x" if known else "-")
            suffix = where if label == "fastest bare call" else ""
            print(f"| gpu_runtime{where} / {label}{suffix} | " + " | ".join(cells) + " |")


def print_table(
    launch: dict, start: dict, firsts: dict, imports: list, split: dict, skipped: dict, a
) -> None:
    med = statistics.median
    print(
        f"| launch overhead, us per call ({a.launches} async launches, median of {a.runs}) "
        f"| saxpy (4 args, 22 params) | box_blur_3x3 (2 args, 18 params) "
        f"| matmul_ld (10 args, 10 params) |\n|---|---|---|---|"
    )
    peers: dict = {}
    for key, per_call in launch.items():
        peer, case = key.split("|")
        peers.setdefault(peer, {})[case] = f"{med(per_call):.2f}"
    for peer, by_case in peers.items():
        cells = " | ".join(by_case.get(case, "-") for case in CASE_NAMES)
        print(f"| {peer} | {cells} |")
    for peer, why in skipped.items():
        print(f"| {peer} | not run: {why} | | |")
    print_ratios(launch)
    print(f"\n| start-up, s (median of {a.runs} fresh processes) | s |\n|---|---|")
    for name, times in start.items():
        print(f"| {name} | {med(times):.3f} |")
    names = list(start)
    context = med(start[names[0]])
    for name in names[3:]:
        print(f"| {name.split(', through ')[-1]}: first saxpy minus python3 context only "
              f"| {med(start[name]) - context:+.3f} |")
    print(f"\n| first run, empty PEX_ROOT and venvs (median of {len(next(iter(firsts['s'].values())))}) "
          "| s | PEX_ROOT after it, MB |\n|---|---|---|")
    for name, times in firsts["s"].items():
        print(f"| {name} | {med(times):.3f} | {med(firsts['bytes'][name]) / 1e6:.0f} |")
    columns = [column for _, _, column in PHASE_COLUMNS]
    print("\n| first saxpy, where the time goes (medians), ms | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for i, (name, _) in enumerate(split[columns[0]]):
        cells = " | ".join(f"{split[column][i][1] * 1e3:.1f}" for column in columns)
        print(f"| {name} | {cells} |")
    print("\n| first saxpy through the launcher: slowest imports | ms |\n|---|---|")
    for module, ms in imports:
        print(f"| {module} | {ms:.1f} |")
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
    parser.add_argument(
        "--baseline-pex",
        help="the bundle's app PEX built with its wheels whole "
        "(PANTS_GPU_BUNDLE_STRIP_WHEEL_FILES='[]'), or another build of it: its first runs go "
        "in the same table",
    )
    parser.add_argument(
        "--baseline-label", default="its wheels whole", help="what --baseline-pex differs by"
    )
    a = parser.parse_args()

    pex = next(os.path.join(a.bundle, f) for f in os.listdir(a.bundle) if f.endswith(".pex"))
    launcher = pex[: -len(".pex")]  # the bundle's launcher (gpu_build/util_rules/bundle_launcher.py)
    base = dict(os.environ, CUDA_CACHE_DISABLE="1")
    in_pex = dict(base, PEX_INTERPRETER="1")
    py = sys.executable
    work = tempfile.mkdtemp(prefix="runtime_bench_")
    write_probes(work)
    in_launcher = dict(base, GPU_BUNDLE_PYTHON=py, GPU_BUNDLE_VENVS=os.path.join(work, "venvs"))
    ways = {
        f"the PEX ({size(pex) >> 20} MiB)": ([py, pex], base),
        "the launcher": ([launcher], in_launcher),
    }
    if a.baseline_pex:  # the same app built another way (e.g. [gpu-bundle].strip_wheel_files=[])
        whole = f"the PEX, {a.baseline_label} ({size(a.baseline_pex) >> 20} MiB)"
        cache = os.path.abspath(os.path.join(a.bundle, "cache"))  # the bundle's, not beside it
        ways[whole] = ([py, a.baseline_pex], dict(base, GPU_RUNTIME_CACHE=cache))
    firsts = fresh_runs(ways, work)
    timed([py, pex, "-c", "pass"], in_pex)  # unpack into the usual PEX_ROOT before timing
    timed([launcher, "-c", "pass"], dict(in_launcher, PEX_INTERPRETER="1"))  # and make its venv
    envs = {"base": base, "launcher": in_launcher}
    start = startup(py, pex, launcher, envs, work, a.runs)
    venv = os.path.join(in_launcher["GPU_BUNDLE_VENVS"], os.listdir(in_launcher["GPU_BUNDLE_VENVS"])[0])
    imports = import_profile(venv, dict(in_launcher, PEX=pex), work)
    split = phases(work, start)
    launch, skipped = launch_overheads(a, py, pex, base, in_pex)
    print_table(launch, start, firsts, imports, split, skipped, a)
    shutil.rmtree(work, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"launch_us": launch, "startup_s": start, "first_run_s": firsts}, f)


def launch_overheads(
    a: argparse.Namespace, py: str, pex: str, base: dict, in_pex: dict
) -> tuple:
    """({row: microseconds per launch}, {peer: why it did not run}): the bundle's launch path
    in its PEX and with this checkout's gpu_runtime, then numba-cuda and CuPy."""
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
        # The same with the machine's python3 (its cuda-bindings and cuda-core) and this
        # checkout's gpu_runtime: where the cuda.core peer runs.
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
    return launch, skipped


if __name__ == "__main__":
    main()
