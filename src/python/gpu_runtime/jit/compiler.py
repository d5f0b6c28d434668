"""Finding the compiler JIT mode runs, and running it exactly as the build step does.

The compiler is `python -m gpu_compiler compile`, the command the plugin's Pants process runs
(`gpu_build.util_rules.compile_process`), with the same flags, in a working directory that holds
exactly the
kernel's input files (so its "nothing outside the inputs" check holds here too). Where it comes
from, in order:
1. $GPU_RUNTIME_TOOLCHAIN: a toolchain PEX
   (`pants package src/python/gpu_compiler:toolchain-cuda13`), or a Python interpreter (or venv
   directory) that can import gpu_compiler;
2. this interpreter, when gpu_compiler and numba-cuda are importable here (a checkout run with
   the exported toolchain venv: `pants export --resolve=cuda13`).
A device bundle has neither, so it never compiles.

The compiler runs in a fixed, scrubbed environment (`compiler_environment`), never in the app's:
only the variables in COMPILER_ENV pass, so nothing that changes codegen (NUMBA_OPT and the other
NUMBA_*, CUDA_HOME/CUDA_PATH, NVRTC/NVVM settings, LD_LIBRARY_PATH, PEX_PATH/PEX_PYTHON...) can
make a compile's bytes differ from what its key (`gpu_runtime.jit.key`) says; like the build
step's Pants process, which inherits nothing either. The one addition is PYTHONPATH for an
interpreter (not a PEX): it decides which gpu_compiler and toolchain are imported, and the
fingerprint, asked of the same command in the same environment, covers exactly that.
HOME does not pass either: through it Python adds the user's site-packages
(~/.local/lib/pythonX.Y/site-packages) to the compiler's imports and numba-cuda or a kernel
module could read the user's files, none of which the key covers. The compiler gets HOME=
/nonexistent (as Debian gives users with no home), PYTHONNOUSERSITE=1, and PEX_ROOT as the app
would have used it (``$PEX_ROOT``, else ``~/.pex`` resolved here), so a toolchain PEX still
finds its venv.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from gpu_runtime.errors import GpuRuntimeError
from gpu_spec.safe_read import MAX_INDEX_BYTES, FileReadError, read_regular_file

ENV_TOOLCHAIN = "GPU_RUNTIME_TOOLCHAIN"

# What the compiler process sees of the app's environment: where programs and temporary files
# are. Neither changes the bytes a compile writes. (PEX_ROOT and HOME: compiler_environment.)
COMPILER_ENV = ("PATH", "TMPDIR")
NO_HOME = "/nonexistent"  # the compiler's HOME: no user site-packages, no user files

# How long one JIT compile may take before it stops, naming the kernel file it was in (a module
# that blocks at import): $GPU_RUNTIME_COMPILE_TIMEOUT seconds, handed to gpu_compiler as its
# $GPU_COMPILER_TIMEOUT (an environment variable: a compiler older than it ignores it).
ENV_COMPILE_TIMEOUT = "GPU_RUNTIME_COMPILE_TIMEOUT"
DEFAULT_COMPILE_TIMEOUT = "600"


def compiler_environment(
    environ: Mapping[str, str], pythonpath: Optional[str] = None, **extra: str
) -> Dict[str, str]:
    """The compiler's whole environment: COMPILER_ENV from `environ`, PYTHONPATH if given and
    `extra`; everything else (every NUMBA_*, CUDA_*, NVRTC_*, PEX_* ... variable) is dropped."""
    env = {k: environ[k] for k in COMPILER_ENV if k in environ}
    home = environ.get("HOME") or os.path.expanduser("~")
    env["PEX_ROOT"] = environ.get("PEX_ROOT") or os.path.join(home, ".pex")  # pex's default
    env.update(HOME=NO_HOME, PYTHONNOUSERSITE="1")
    env["GPU_COMPILER_TIMEOUT"] = environ.get(ENV_COMPILE_TIMEOUT) or DEFAULT_COMPILE_TIMEOUT
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    env.update(extra)
    return env


class CompilerNotFoundError(GpuRuntimeError):
    """JIT mode needs a compiler and none is configured or importable."""


class JitCompileError(GpuRuntimeError):
    """The compiler rejected a kernel source: the message carries its report."""


class EarlyStartUnsupported(JitCompileError):
    """The compiler predates `--capability-from-stdin` (a toolchain PEX built before it): JIT
    mode compiles the usual way instead, and logs this message with the fix."""


@dataclass
class Compiler:
    """A command prefix that accepts `compile ...` and `fingerprint`."""

    command: Tuple[str, ...]
    env: Mapping[str, str]  # the process's whole environment (`compiler_environment`)
    description: str
    # The compiler runs this interpreter: ask gpu_compiler for the fingerprint in process (the
    # same function its CLI prints), saving a process start on every run of the app.
    in_process: bool = False
    # A toolchain PEX: its PEX-INFO names every wheel by hash and the code by `code_hash`, so
    # its sha256 identifies the compiler as well as the fingerprint does, read in a millisecond
    # instead of starting the 370 MB PEX on every run of the app.
    pex_info: Optional[bytes] = None
    _fingerprint: Optional[Dict[str, Any]] = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fingerprint(self) -> Dict[str, Any]:
        """{"toolchain": versions, "code": sha256 of the compiler's code}, asked once."""
        with self._lock:
            if self._fingerprint is None and self.pex_info is not None:
                self._fingerprint = {"toolchain_pex": hashlib.sha256(self.pex_info).hexdigest()}
            if self._fingerprint is None and self.in_process:
                from gpu_compiler.fingerprint import fingerprint  # pants: no-infer-dep

                self._fingerprint = fingerprint()
            if self._fingerprint is None:
                out = self._run(["fingerprint"], cwd=None)
                try:
                    self._fingerprint = json.loads(out.stdout)
                except ValueError as e:
                    raise GpuRuntimeError(
                        f"JIT mode: {self.description} printed no fingerprint JSON: {e}"
                    ) from e
            return self._fingerprint

    def compile(self, argv: Sequence[str], cwd: str, what: str) -> str:
        """Runs `compile <argv>` in `cwd`; returns its stderr (warnings) or raises."""
        return self._run(["compile", *argv], cwd=cwd, what=what).stderr

    def start(self, argv: Sequence[str], cwd: str, what: str) -> "PendingCompile":
        """Starts `compile <argv> --capability-from-stdin` in `cwd`: the process loads the
        toolchain (most of a cold compile) while the caller learns the capability, then
        `PendingCompile.finish` sends it, or `cancel` ends the process."""
        args = ["compile", *argv, "--capability-from-stdin"]
        proc = self._popen(args, cwd=cwd)
        return PendingCompile(proc, what, self.description)

    def _popen(self, args: Sequence[str], cwd: Optional[str]) -> Any:
        import subprocess  # here: a device app with a bundle imports this module for nothing

        try:
            return subprocess.Popen(
                [*self.command, *args],
                cwd=cwd,
                env=dict(self.env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                universal_newlines=True,
            )
        except OSError as e:
            raise CompilerNotFoundError(
                f"JIT mode: cannot run {self.description}: {e.strerror or e}"
            ) from e

    def _run(self, args: Sequence[str], cwd: Optional[str], what: str = "") -> Any:
        proc = self._popen(args, cwd=cwd)
        stdout, stderr = proc.communicate("")
        return _checked(proc, stdout, stderr, what or " ".join(args), self.description)


def _checked(proc: Any, stdout: str, stderr: str, what: str, description: str) -> Any:
    """The finished `proc` as a CompletedProcess, or its failure as a JitCompileError."""
    if proc.returncode != 0:
        raise JitCompileError(
            f"JIT mode: {what} failed (exit {proc.returncode}, {description}):\n{stderr.strip()}"
        )
    import subprocess

    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


class PendingCompile:
    """A compile process started before its capability was known (`Compiler.start`).

    Why: a cold JIT compile is mostly the compiler process loading numba-cuda and the CUDA
    libraries (~1.5 s on an H200's host), and the app's own start of the driver (~0.3 s) used
    to come first; started early, the two overlap. Exactly one of `finish` and `cancel` ends
    it; a process whose parent dies sees end of input and exits having written nothing.
    """

    def __init__(self, proc: Any, what: str, description: str) -> None:
        self._proc = proc
        self._what = what
        self._description = description
        self._ended = False

    def finish(self, capability: str) -> str:
        """Sends `capability`, waits; its stderr (warnings), or JitCompileError."""
        self._ended = True
        stdout, stderr = self._proc.communicate(capability + "\n")
        what = f"{self._what} for {capability}"
        # argparse of a gpu_compiler without the flag: "required: --capability" (or, had it
        # been given one, "unrecognized arguments: --capability-from-stdin")
        if self._proc.returncode == 2 and (
            "--capability-from-stdin" in stderr or "required: --capability" in stderr
        ):
            raise EarlyStartUnsupported(
                f"JIT mode: {what}: {self._description} is older than this gpu_runtime (it does "
                f"not know --capability-from-stdin): rebuild it, e.g. `pants package "
                f"src/python/gpu_compiler:toolchain-cuda13`"
            )
        return _checked(self._proc, stdout, stderr, what, self._description).stderr

    def cancel(self) -> None:
        """Ends the process (a cache hit after all, or an error) and reaps it."""
        if self._ended:
            return
        self._ended = True
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.communicate()


def _importable_here() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("gpu_compiler", "numba"))


def _pex_info(path: str) -> Optional[bytes]:
    """PEX-INFO of a PEX file or directory, or None if `path` is no PEX."""
    import zipfile  # here: only a toolchain PEX needs it

    try:
        if os.path.isdir(path):  # a regular file only: a FIFO there would hang the app
            return read_regular_file(os.path.join(path, "PEX-INFO"), MAX_INDEX_BYTES, "PEX-INFO")
        if os.path.isfile(path) and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                return z.read("PEX-INFO")
    except (OSError, KeyError, zipfile.BadZipFile, FileReadError):
        return None
    return None


def compiler_from(value: str, environ: Mapping[str, str]) -> Compiler:
    """The compiler $GPU_RUNTIME_TOOLCHAIN names: a PEX, an interpreter or a venv directory."""
    path = os.path.abspath(value)
    pex_info = _pex_info(path)
    if pex_info is not None:
        env = compiler_environment(environ, PEX_MODULE="gpu_compiler")
        command: Tuple[str, ...] = (path,) if os.path.isfile(path) else (sys.executable, path)
        return Compiler(
            command, env, f"the toolchain PEX {path} (${ENV_TOOLCHAIN})", pex_info=pex_info
        )
    python = os.path.join(path, "bin", "python") if os.path.isdir(path) else path
    if not os.access(python, os.X_OK):
        raise CompilerNotFoundError(
            f"${ENV_TOOLCHAIN}={value} is neither a toolchain PEX nor a Python interpreter or "
            f"venv; build one with `pants package src/python/gpu_compiler:toolchain-cuda13`"
        )
    env = compiler_environment(environ, environ.get("PYTHONPATH"))
    return Compiler((python, "-m", "gpu_compiler"), env, f"{python} (${ENV_TOOLCHAIN})")


def find_compiler(environ: Optional[Mapping[str, str]] = None) -> Optional[Compiler]:
    """The configured or importable compiler, or None (cheap: nothing is run or imported)."""
    env = os.environ if environ is None else environ
    if env.get(ENV_TOOLCHAIN):
        return compiler_from(env[ENV_TOOLCHAIN], env)
    if _importable_here():
        child = compiler_environment(
            env, os.pathsep.join(os.path.abspath(p) for p in sys.path if p)
        )
        return Compiler(
            (sys.executable, "-m", "gpu_compiler"), child, sys.executable, in_process=True
        )
    return None


def no_compiler_message(target: str, toolchain: str) -> str:
    return (
        f"JIT mode needs a compiler for {target} and none was found: gpu_compiler and "
        f"numba-cuda are not importable here and ${ENV_TOOLCHAIN} is not set. Either\n"
        f"  - build the toolchain PEX and name it: `pants package "
        f"src/python/gpu_compiler:toolchain-{toolchain}`, then "
        f"{ENV_TOOLCHAIN}=$PWD/dist/src.python.gpu_compiler/toolchain-{toolchain}.pex; or\n"
        f"  - run with the toolchain venv: `pants export --resolve={toolchain}` and its "
        f"bin/python with PYTHONPATH=src/python:src/spec; or\n"
        f"  - use a device bundle (`pants package`), which needs no compiler."
    )
