"""In-process compile times of the example kernels: the floor under Pants' per-process cost.

Run through Pants so it uses the pinned cuda13 toolchain (see compile_bench.py):
    ./pants run tests/bench/compile_inprocess.py -- --repo . --json out.json
For each (kernel, capability) it records the first compile in a fresh process state (imports
already paid once, up front) and the median of `--repeat` further compiles. First, before numba
is imported here, it times `--fresh` fresh processes of this interpreter that each run
`python -m gpu_compiler compile` on saxpy.py for sm_90 (import numba, compile, link with
nvJitLink, write): the reference the issue's goal is stated against.
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

from gpu_compiler.compile import CompileOptions, compile_source

KERNELS = {
    "saxpy.py": CompileOptions(sys_path=("src/python",)),
    "blur.py": CompileOptions(sys_path=("src/python",)),
    "histogram.py": CompileOptions(sys_path=("src/python",)),
    "sobel.cu": CompileOptions(),
    "matmul.cu": CompileOptions(name_expressions=("matmul<float, 16>", "matmul<double, 16>")),
}
CAPABILITIES = ("sm_75", "sm_80", "sm_87", "sm_90")


SAXPY = "src/python/imaging/kernels/saxpy.py"


def fresh_processes(runs: int) -> list[float]:
    """Walls of `runs` fresh `python -m gpu_compiler compile` processes: saxpy.py for sm_90,
    after one untimed run. As Pants runs a compile: from a clean environment, so bytecode
    caching is on whatever this shell sets (PYTHONDONTWRITEBYTECODE would make every process
    compile numba from source, which no build process does), and with the .pyc in place."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = tempfile.mkdtemp(prefix="fresh-compile-")
    walls = []
    try:
        for i in range(-1, runs):
            argv = [sys.executable, "-m", "gpu_compiler", "compile", "--source", SAXPY]
            argv += ["--capability", "sm_90", "--sys-path", "src/python"]
            argv += ["--out-dir", os.path.join(out, str(i))]
            start = time.perf_counter()
            subprocess.run(argv, env=env, check=True)
            if i >= 0:
                walls.append(time.perf_counter() - start)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return walls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--json", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fresh", type=int, default=5)
    args = parser.parse_args()
    os.chdir(args.repo)
    fresh = fresh_processes(args.fresh)
    t0 = time.perf_counter()
    import numba.cuda  # noqa: F401  (the import cost every compile process pays once)

    import_s = time.perf_counter() - t0
    rows = {}
    for name, options in KERNELS.items():
        source = f"src/python/imaging/kernels/{name}"
        for cap in CAPABILITIES:
            times = []
            for _ in range(1 + args.repeat):
                start = time.perf_counter()
                compile_source(source, cap, options)
                times.append(time.perf_counter() - start)
            rows[f"{name} {cap}"] = {"first_s": times[0], "median_s": statistics.median(times[1:])}
    with open(args.json, "w") as f:
        json.dump({"import_s": import_s, "fresh_s": fresh, "compiles": rows}, f, indent=1)


if __name__ == "__main__":
    main()
