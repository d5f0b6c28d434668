"""Sandbox benchmark: what the namespaces (issue 31) cost a compile process, and that they
change no byte.

    ./pants package src/python/gpu_compiler:toolchain-cuda13
    python3 tests/bench/sandbox_bench.py [--runs 5] \\
        [--toolchain dist/src.python.gpu_compiler/toolchain-cuda13.pex]

For every example kernel of `./pants package ::` (src/python/imaging/kernels and
src/python/numba_docs/kernels, with their BUILD files' flags), one compile process for sm_87 and
sm_90, as the Pants rule runs it (the packaged toolchain PEX, cwd = a sandbox holding the
kernels, `--input` of its top-level directory), alternating the two walls in each run:
- `namespaces`: the default, new user, mount, network, UTS, IPC and PID namespaces, then Landlock;
- `landlock`: Landlock alone (`--sandbox landlock`), as before issue 31.
Prints per kernel the median wall of each, the difference, and whether every output file was
the same bytes in every run of both; then the median added cost over all processes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNEL_DIRS = ("src/python/imaging/kernels", "src/python/numba_docs/kernels")
# The kernels whose BUILD targets give flags (the rest compile with none).
FLAGS = {
    "matmul.cu": [
        "--include-dir=src/python/imaging/kernels",
        "--name-expression=matmul<float, 16>",
    ],
}
WALLS = ("namespaces", "landlock")


def _sources() -> list[str]:
    found = []
    for d in KERNEL_DIRS:
        for name in sorted(os.listdir(os.path.join(REPO, d))):
            if name.endswith((".py", ".cu")) and not name.startswith("_") and name != "BUILD":
                found.append(os.path.join(d, name))
    return found


def _tree(root: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            path = os.path.join(dirpath, n)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def _compile(toolchain: str, sandbox: str, source: str, walls: str) -> tuple[float, dict]:
    out = os.path.join(sandbox, "__gpu_out")
    shutil.rmtree(out, ignore_errors=True)
    argv = [toolchain, "compile", "--source", source, "--capability", "sm_87,sm_90"]
    argv += ["--out-dir", "__gpu_out", "--input", "src", "--sandbox", walls]
    argv += ["--sys-path", "src/python", *FLAGS.get(os.path.basename(source), [])]
    env = dict(os.environ, PEX_MODULE="gpu_compiler")
    start = time.perf_counter()
    p = subprocess.run(argv, cwd=sandbox, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if p.returncode != 0 or p.stderr.strip():
        sys.exit("%s (%s): exit %d\n%s" % (source, walls, p.returncode, p.stderr))
    return wall, _tree(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--toolchain", default="dist/src.python.gpu_compiler/toolchain-cuda13.pex")
    args = parser.parse_args()
    toolchain = os.path.abspath(args.toolchain)
    sandbox = tempfile.mkdtemp(prefix="sandbox-bench-")
    try:
        for d in KERNEL_DIRS:
            shutil.copytree(os.path.join(REPO, d), os.path.join(sandbox, d))
        sources = _sources()
        _compile(toolchain, sandbox, sources[0], "namespaces")  # the PEX's venv, once
        walls: dict[tuple[str, str], list[float]] = {}
        first: dict[str, dict] = {}
        differ: set[str] = set()
        for run in range(args.runs):
            for source in sources:
                order = WALLS if run % 2 == 0 else WALLS[::-1]
                for mode in order:
                    wall, tree = _compile(toolchain, sandbox, source, mode)
                    walls.setdefault((source, mode), []).append(wall)
                    if source not in first:
                        first[source] = tree
                    elif tree != first[source]:
                        differ.add(source)
        print("kernel | namespaces ms | landlock ms | added ms | files | identical")
        added = []
        for source in sources:
            ns = statistics.median(walls[(source, "namespaces")]) * 1000
            ll = statistics.median(walls[(source, "landlock")]) * 1000
            added += [
                (a - b) * 1000
                for a, b in zip(walls[(source, "namespaces")], walls[(source, "landlock")])
            ]
            same = "no" if source in differ else "yes"
            print(
                "%s | %.0f | %.0f | %+.0f | %d | %s"
                % (os.path.basename(source), ns, ll, ns - ll, len(first[source]), same)
            )
        print(
            "\n%d kernels x %d runs: added cost per compile process, median %.1f ms; "
            "identical outputs: %d of %d kernels"
            % (
                len(sources),
                args.runs,
                statistics.median(added),
                len(sources) - len(differ),
                len(sources),
            )
        )
        return 1 if differ else 0
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
