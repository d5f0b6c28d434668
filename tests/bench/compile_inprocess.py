"""In-process compile times of the example kernels: the floor under Pants' per-process cost.

Run through Pants so it uses the pinned cuda13 toolchain (see compile_bench.py):
    ./pants run tests/bench/compile_inprocess.py -- --repo . --json out.json
For each (kernel, capability) it records the first compile in a fresh process state (imports
already paid once, up front) and the median of `--repeat` further compiles.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--json", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.chdir(args.repo)
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
        json.dump({"import_s": import_s, "compiles": rows}, f, indent=1)


if __name__ == "__main__":
    main()
