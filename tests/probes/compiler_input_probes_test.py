"""Compiler input probes: what JIT mode (or a caller) hands `python -m gpu_compiler compile`.

The capability of `--capability-from-stdin` is text from another process: a hostile or garbled
line must be refused in one line naming it (exit 1, nothing written), never a traceback from
the regular expressions that later group a compile's failures by capability.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, List, Tuple

from probe_table import findings, refused, run_probes

KERNEL_CU = 'extern "C" __global__ void k(int* o) { *o = 1; }\n'


def _code_roots() -> List[str]:
    """The directories holding gpu_compiler and gpu_spec, for the compile's PYTHONPATH."""
    import gpu_compiler
    import gpu_spec

    return [os.path.dirname(os.path.dirname(str(m.__file__))) for m in (gpu_compiler, gpu_spec)]


def capability_on_stdin(line: str) -> Callable[[], str]:
    def probe() -> str:
        repo = tempfile.mkdtemp(prefix="compiler_probe_")
        try:
            with open(os.path.join(repo, "k.cu"), "w") as f:
                f.write(KERNEL_CU)
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUDA_HOME")}
            env["PYTHONPATH"] = os.pathsep.join(_code_roots())
            argv = ["compile", "--source", "k.cu", "--out-dir", "out", "--capability-from-stdin"]
            p = subprocess.run(
                [sys.executable, "-m", "gpu_compiler", *argv],
                cwd=repo,
                env=env,
                input=line + "\n",
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                universal_newlines=True,
                timeout=300,
            )
            err = p.stderr.strip()
            if p.returncode == 0:
                return f"FINDING: {line!r} was compiled: {os.listdir(os.path.join(repo, 'out'))}"
            if "Traceback" in err or len(err.splitlines()) != 1:
                return f"FINDING: exit {p.returncode}: {err.splitlines()[-1:]!r}"
            if p.returncode == 2 or repr(line.split(",")[-1]) not in err:
                return f"FINDING: exit {p.returncode} (2 reads as an old compiler): {err}"
            if os.path.exists(os.path.join(repo, "out")):
                return f"FINDING: refused, yet wrote out/: {err}"
            return refused(err, "invalid GPU capability")
        finally:
            shutil.rmtree(repo, ignore_errors=True)

    return probe


PROBES: List[Tuple[str, Callable[[], str]]] = [
    ("stdin capability 'sm_90\\Q' (a regex escape)", capability_on_stdin("sm_90\\Q")),
    ("stdin capability 'sm_9x'", capability_on_stdin("sm_9x")),
    ("stdin capability 'sm_90,sm_\\1'", capability_on_stdin("sm_90,sm_\\1")),
]


def test_compiler_input_probes() -> None:
    rows = run_probes("compiler-inputs", PROBES)
    assert findings(rows) == []
