"""Runs numba-cuda's documentation kernels from this bundle and prints a table.

    python3 dist/numba_docs_h200/check.pex               # cubins where the GPU has them
    python3 dist/numba_docs_h200/check.pex --prefer ptx  # PTX only (or GPU_RUNTIME_PREFER=ptx)

For each documentation example (`numba_docs.cases`): whether its kernels were built into the
bundle (in the manifest, with a variant for this GPU), whether they ran, the max abs error
against numpy and whether that is within the case's tolerance (and the docs' own assertion).
Exit status 0 if every case passed, 1 otherwise, 2 if gpu_runtime could not open the bundle.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from typing import List, Optional, Sequence, Tuple

import gpu_runtime
from gpu_runtime import GpuRuntimeError
from numba_docs.cases import CASES

Row = Tuple[str, str, str, str, str, str, str]
HEADER: Row = ("kernel", "built", "ran", "max error", "ok", "variant", "note")


def _variant(cache: gpu_runtime.KernelCache, library: str) -> str:
    ch = cache.choice(library)
    return f"{ch.kind} {ch.capability}"


def run_case(cache: gpu_runtime.KernelCache, library: str) -> Row:
    if library not in cache.libraries():
        return (library, "no", "-", "-", "FAIL", "-", "not in the bundle's manifest")
    try:
        variant = _variant(cache, library)
        cache.preload([f"{library}.{k}" for k in cache.library(library).kernel_names()])
    except GpuRuntimeError as e:
        return (library, "no", "-", "-", "FAIL", "-", f"{type(e).__name__}: {e}")
    t0 = time.perf_counter()
    try:
        result = CASES[library](cache)
        cache.backend.synchronize()
    except Exception as e:  # reported in the table; the traceback goes to stderr
        traceback.print_exc(file=sys.stderr)
        return (library, "yes", "no", "-", "FAIL", variant, f"{type(e).__name__}: {e}")
    note = f"{(time.perf_counter() - t0) * 1e3:.0f} ms" + (
        f"; {result.note}" if result.note else ""
    )
    return (
        library,
        "yes",
        "yes",
        f"{result.error:.3g}",
        "ok" if result.ok else "FAIL",
        variant,
        note,
    )


def format_table(rows: Sequence[Row]) -> str:
    table = [HEADER, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--prefer",
        choices=["auto", "cubin", "ptx"],
        default=None,
        help="restrict loading to cubins or to PTX (default: $GPU_RUNTIME_PREFER)",
    )
    p.add_argument("--only", action="append", choices=sorted(CASES), help="run only these")
    args = p.parse_args(argv)
    try:
        cache = gpu_runtime.open_cache(prefer=args.prefer)
        device = cache.device.describe()
    except GpuRuntimeError as e:
        print(f"numba_docs check: {e}", file=sys.stderr)
        return 2
    prefer = args.prefer or "env/auto"
    print(f"bundle {cache.manifest.bundle!r} at {cache.root} on {device}; prefer {prefer}")
    rows = [run_case(cache, lib) for lib in (args.only or list(CASES))]
    print(format_table(rows))
    failed = [r[0] for r in rows if r[4] != "ok"]
    print("all documentation kernels passed" if not failed else f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
