"""JIT mode's start-up on a GPU: process start to the first saxpy, against numba-cuda's own JIT
and a device bundle, fresh processes taken in turn so that all see the same machine state.

Run on the GPU machine from the repo root, with the machine's python3 (numba-cuda, cuda-bindings;
PYTHONPATH giving a numpy numba can import), JIT mode's kernel index written by
`pants export-codegen src/python/imaging/kernels:saxpy` (dist/codegen/src/python) and a built
bundle:

    python3 tests/bench/jit_start_bench.py --bundle dist/imaging_h200 [--runs 5]

Rows (median of --runs, min-max):
- context only: cuda.bindings, cuInit, the primary context (the floor every row pays);
- numba-cuda JIT: `import numba.cuda`, the saxpy kernel module of the example app as numba-cuda
  compiles it on its first call (its own disk cache off), launch, copy out;
- gpu_runtime JIT, cold: `open_cache()` in JIT mode with an empty JIT cache: the kernel compiled
  by `python -m gpu_compiler compile` (the build's command), then loaded and launched;
- gpu_runtime JIT, warm: the same with the JIT cache filled by the cold run before it;
- the bundle through its launcher (its venv made before timing), the same first saxpy;
- JIT warm again with the app's imports reordered (gpu_runtime's GPU API before numpy): not a
  goal row, it shows what of "warm - bundle" is the app's own imports before gpu_runtime, which
  a process started by plain python3 cannot overlap and the bundle's launcher does.
Issue 22's goals: JIT cold no slower than numba-cuda's JIT; JIT warm within 50 ms of the bundle.
Every process sets CUDA_CACHE_DISABLE=1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from runtime_bench import CONTEXT_ONLY, timed  # noqa: E402

NUMBA_FIRST = """
import numpy as np
from numba import cuda
import importlib.util, sys
spec = importlib.util.spec_from_file_location("saxpy", sys.argv[1])
saxpy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(saxpy)
x = cuda.to_device(np.ones(1024, np.float32))
out = cuda.device_array(1024, np.float32)
saxpy.saxpy[4, 256](out, np.float32(2.0), x, x)
assert out.copy_to_host()[0] == 3.0
"""

RUNTIME_FIRST = """
import numpy as np
import gpu_runtime
from gpu_runtime import DeviceArray
cache = gpu_runtime.open_cache()
k = cache.kernel("saxpy")
x = DeviceArray.from_numpy(np.ones(1024, np.float32))
out = DeviceArray.empty(1024, np.float32)
k.launch(4, 256, out, np.float32(2.0), x, x)
assert out.to_numpy()[0] == 3.0
"""


# The same app with its imports the other way round: gpu_runtime's first GPU name (which starts
# CUDA in a thread) before numpy's import, as a bundle's launcher starts CUDA before the app's
# first line. Shows how much of "warm - bundle" is the app's imports that come before it.
RUNTIME_FIRST_GPU_API_FIRST = RUNTIME_FIRST.replace(
    "import numpy as np\nimport gpu_runtime\nfrom gpu_runtime import DeviceArray\n",
    "import gpu_runtime\nfrom gpu_runtime import DeviceArray\nimport numpy as np\n",
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bundle", required=True, help="dist/<bundle> (its launcher `app`)")
    parser.add_argument("--codegen", default="dist/codegen/src/python")
    parser.add_argument("--kernel", default="src/python/imaging/kernels/saxpy.py")
    parser.add_argument("--runs", type=int, default=5)
    a = parser.parse_args()
    work = tempfile.mkdtemp(prefix="jit_start_bench_")
    rows = timed_rows(a, work, write_scripts(work))
    times: dict = {name: [] for name in rows}
    for _ in range(a.runs):  # each row once per round: the machine's noise falls on all alike
        for name, run in rows.items():
            times[name].append(run())
    shutil.rmtree(work, ignore_errors=True)
    print_table(times, a.runs)


def write_scripts(work: str) -> dict:
    scripts = {}
    for name, code in (
        ("context", CONTEXT_ONLY),
        ("numba", NUMBA_FIRST),
        ("runtime", RUNTIME_FIRST),
        ("runtime_api_first", RUNTIME_FIRST_GPU_API_FIRST),
    ):
        scripts[name] = os.path.join(work, f"jit_bench_{name}.py")  # not numba.py: an import
        with open(scripts[name], "w") as f:
            f.write(code)
    return scripts


def timed_rows(a: argparse.Namespace, work: str, scripts: dict) -> dict:
    """{row: a function timing one run of it}, each way made warm first where it is warm."""
    py = sys.executable
    base = dict(os.environ, CUDA_CACHE_DISABLE="1", NUMBA_DISABLE_CACHE="1")
    here = os.pathsep.join(
        [os.path.abspath(p) for p in (a.codegen, "src/python", "src/spec")]
        + [base.get("PYTHONPATH", "")]
    )
    jit = dict(base, PYTHONPATH=here)
    launcher = os.path.join(a.bundle, "app")
    in_bundle = dict(
        base, GPU_BUNDLE_PYTHON=py, GPU_BUNDLE_VENVS=os.path.join(work, "venvs"),
        PEX_MODULE="jit_bench_runtime", PEX_EXTRA_SYS_PATH=work,
    )
    timed([launcher], in_bundle)  # its venv made once, before timing
    warm = dict(jit, GPU_RUNTIME_JIT_CACHE=os.path.join(work, "jit_warm"))
    timed([py, scripts["runtime"]], warm)
    return {
        "context only (cuda.bindings + cuInit + primary context)": lambda: timed(
            [py, scripts["context"]], base
        ),
        "numba-cuda JIT (its first call compiles)": lambda: timed(
            [py, scripts["numba"], os.path.abspath(a.kernel)], base
        ),
        "gpu_runtime JIT, cold (empty JIT cache)": lambda: cold(py, scripts["runtime"], jit, work),
        "gpu_runtime JIT, warm": lambda: timed([py, scripts["runtime"]], warm),
        "bundle, through its launcher (cubin)": lambda: timed([launcher], in_bundle),
        "gpu_runtime JIT, warm, GPU API reached before numpy's import": lambda: timed(
            [py, scripts["runtime_api_first"]], warm
        ),
    }


def print_table(times: dict, runs: int) -> None:
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"\n| process start to the first saxpy, median of {runs} | s | min-max |")
    print("|---|---|---|")
    for name, t in times.items():
        print(f"| {name} | {med[name]:.3f} | {min(t):.3f}-{max(t):.3f} |")
    names = list(times)
    numba, cold_, warm, bundle = med[names[1]], med[names[2]], med[names[3]], med[names[4]]
    print(f"\nJIT cold / numba-cuda JIT: {cold_ / numba:.2f}x ({(cold_ - numba) * 1000:+.0f} ms); "
          f"goal <= 1.00x: {'met' if cold_ <= numba else 'MISSED'}")
    print(f"JIT warm - bundle: {(warm - bundle) * 1000:+.0f} ms; goal <= 50 ms: "
          f"{'met' if warm - bundle <= 0.050 else 'MISSED'}")
    print(f"(imports reordered: JIT warm - bundle {(med[names[5]] - bundle) * 1000:+.0f} ms)")


def cold(py: str, script: str, env: dict, work: str) -> float:
    cache = tempfile.mkdtemp(prefix="jit_cold_", dir=work)
    try:
        return timed([py, script], dict(env, GPU_RUNTIME_JIT_CACHE=cache))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
