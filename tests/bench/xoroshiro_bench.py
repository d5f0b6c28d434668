"""Cost of gpu_runtime's xoroshiro128+ state creation (numpy only): prints a table of medians.

    python tests/bench/xoroshiro_bench.py [--runs 5]

"first" is a fresh process's first call, after the import (it computes the jump matrix and its
powers); "warm" a later call with the powers kept. The machine's load shows in these figures:
run it on an idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CHILD = """
import time
from gpu_runtime.numba_compat.xoroshiro import xoroshiro128p_states
t = time.perf_counter()
xoroshiro128p_states({n}, 42, {sub})
print(time.perf_counter() - t)
"""


def first_call(n: int, sub: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(n=n, sub=sub)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip())


def warm_call(n: int, sub: int) -> float:
    from gpu_runtime.numba_compat.xoroshiro import xoroshiro128p_states

    xoroshiro128p_states(n, 42, sub)
    t = time.perf_counter()
    xoroshiro128p_states(n, 42, sub)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    runs = p.parse_args().runs
    print("| n | subsequence_start | first call (s) | warm (s) |")
    print("|---|---|---|---|")
    for n, sub in [(10**4, 0), (10**6, 0), (10**6, 2**63)]:
        first = statistics.median(first_call(n, sub) for _ in range(runs))
        warm = statistics.median(warm_call(n, sub) for _ in range(runs))
        print(f"| {n:,} | {sub} | {first:.3f} | {warm:.3f} |")


if __name__ == "__main__":
    main()
