"""The sandbox probes' lab: a sandbox (``repo/``, the working directory, as in a Pants process)
and a directory beside it (``outside/``) standing in for the host, which holds ``MARK`` (a
header defining ``VAL`` as ``MARK``, a file holding ``MARK``, a module setting ``V = MARK``),
and a compile there as the Pants rule runs it (``python -m gpu_compiler compile`` in a
subprocess, cwd = the sandbox). Shared by sandbox_probes_test and host_probes_test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Sequence

from probe_table import held, refused

MARK = "913377"  # an integer and a float literal alike; in no toolchain's PTX by chance
KERNEL_CU = 'extern "C" __global__ void k(int* o) { *o = VAL; }\n'
COMPILE_BACKSTOP = 600  # seconds: far beyond any compile here (the examples' longest ~15 s)


def _code_roots() -> List[str]:
    """The directories holding gpu_compiler and gpu_spec, for the compile's PYTHONPATH."""
    import gpu_compiler
    import gpu_spec

    return [os.path.dirname(os.path.dirname(str(m.__file__))) for m in (gpu_compiler, gpu_spec)]


def _write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


class Lab:
    """A temporary ``repo/`` (the sandbox) and ``outside/`` (the host) beside it."""

    def __init__(self, top: str):
        self.repo = os.path.join(top, "repo")
        self.outside = os.path.join(top, "outside")
        os.makedirs(self.repo)
        _write(os.path.join(self.outside, "host.cuh"), "#pragma once\n#define VAL %s\n" % MARK)
        _write(os.path.join(self.outside, "secret.txt"), MARK + "\n")
        _write(os.path.join(self.outside, "vendmod.py"), "V = %s.0\n" % MARK)

    def host(self, name: str) -> str:
        return os.path.join(self.outside, name)

    def source(self, rel: str, text: str) -> str:
        _write(os.path.join(self.repo, rel), text)
        return rel

    def compile(self, source: str, *flags: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUDA_HOME")}
        env["PYTHONPATH"] = os.pathsep.join(_code_roots())
        argv = ["compile", "--source", source, "--capability", "sm_90", "--out-dir", "out"]
        return subprocess.run(
            [sys.executable, "-m", "gpu_compiler", *argv, *flags],
            cwd=self.repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
            timeout=COMPILE_BACKSTOP,  # a hang is this probe's finding, not the suite's hang
        )

    def outputs_hold_mark(self) -> bool:
        for dirpath, _, names in os.walk(os.path.join(self.repo, "out")):
            for n in names:
                with open(os.path.join(dirpath, n), "rb") as f:
                    if MARK.encode() in f.read():
                        return True
        return False

    def verdict(self, source: str, flags: Sequence[str], expect: str) -> str:
        """refused (exit 1, the one line it printed, saying `expect`) or held (exit 0, MARK not
        in the outputs)."""
        p = self.compile(source, *flags)
        if p.returncode == 1:
            if os.path.exists(os.path.join(self.repo, "out")):
                return "FINDING: refused, yet wrote outputs"
            return refused(p.stderr, expect)
        if p.returncode == 0:
            if self.outputs_hold_mark():
                return "FINDING: the host's value reached the outputs"
            return held("compiled; the host's value is not in the outputs")
        return "FINDING: exit %d: %s" % (p.returncode, p.stderr.strip()[-300:])
