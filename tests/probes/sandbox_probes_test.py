"""Probes of the compile sandbox: a hostile kernel tries to read the build machine.

Each probe lays out a sandbox (``repo/``, the working directory, as in a Pants process) and a
directory beside it (``outside/``) standing in for the host: a header defining ``VAL`` as
``MARK``, a file holding ``MARK``, a module setting ``V = MARK``. The kernel then tries one way
to get ``MARK`` into its outputs, compiled as the Pants rule runs it (``python -m gpu_compiler
compile`` in a subprocess, cwd = the sandbox). It must be refused with one clear line, or
compile with ``MARK`` nowhere in its outputs (held).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable, Sequence, Tuple

from probe_table import findings, held, run_probes
from sandbox_lab import KERNEL_CU, MARK, Lab

KERNEL_PY = """
from numba import cuda


@cuda.jit("void(float32[::1])")
def k(a):
    a[0] = V
"""
EXAMPLES = ("src/python/imaging/kernels", "src/python/numba_docs/kernels")
DEADLINE = "20"  # the compile's own limit in the blocking probes (`--timeout`)
# The example kernels that need flags, as their BUILD files give them.
EXAMPLE_FLAGS = {
    "matmul.cu": ["--include-dir", "src/python/imaging/kernels"]
    + ["--name-expression", "matmul<float, 16>"],
}


def _probe(build: Callable[[Lab], Tuple[str, Sequence[str]]], expect: str) -> Callable[[], str]:
    """The probe of the source `build` writes: held, or refused saying `expect`."""

    def run() -> str:
        top = tempfile.mkdtemp(prefix="sandbox-probe-")
        try:
            lab = Lab(top)
            source, flags = build(lab)
            return lab.verdict(source, flags, expect)
        finally:
            shutil.rmtree(top, ignore_errors=True)

    return run


def _cu(directive: Callable[[Lab], str], expect: str) -> Callable[[], str]:
    return _probe(lambda lab: (lab.source("k/k.cu", directive(lab) + KERNEL_CU), []), expect)


def _py(head: Callable[[Lab], str], expect: str) -> Callable[[], str]:
    build = lambda lab: (lab.source("k/k.py", head(lab) + KERNEL_PY), ["--sys-path", "."])  # noqa
    return _probe(build, expect)


# What each kind of refusal says.
OUTSIDE = "outside the compile's inputs"
ABSOLUTE = "an absolute include names a file of the build machine"
COMPUTED = "computed include #include H: the header it names cannot be checked"
NOT_FOUND = 'cannot find header "vendor/host.cuh": it is neither an input of the compile'
STOPPED = "the compile did not finish within %s s: it was still running line" % DEADLINE


def _symlinked(lab: Lab) -> Tuple[str, Sequence[str]]:
    os.makedirs(os.path.join(lab.repo, "k"))
    os.symlink(lab.outside, os.path.join(lab.repo, "k", "vendor"))
    return lab.source("k/k.cu", '#include "vendor/host.cuh"\n' + KERNEL_CU), []


def _blocking(head: str, before: Callable[[Lab], None] = lambda lab: None) -> Callable[[], str]:
    """A numba module that never finishes its import: the compile stops at its --timeout and
    names the kernel file and line it was in."""

    def build(lab: Lab) -> Tuple[str, Sequence[str]]:
        before(lab)
        return lab.source("k/k.py", head + "V = 1.0\n" + KERNEL_PY), [
            "--sys-path",
            ".",
            "--timeout",
            DEADLINE,
        ]

    probe = _probe(build, STOPPED)

    def run() -> str:
        result = probe()
        if result.startswith("refused: k/k.py:") or result.startswith("FINDING"):
            return result
        return "FINDING: expected k/k.py:<line>: error: %s..., got %s" % (STOPPED, result)

    return run


def _exits() -> Callable[[], str]:
    """A numba module that calls sys.exit(0) at import: refused at that line, not a compile
    that exits 0 having written nothing."""
    want = "sm_90: k/k.py:3: error: the kernel module called sys.exit(0) while"
    probe = _py(lambda lab: "import sys\n\nsys.exit(0)\n", want)

    def run() -> str:
        result = probe()
        if result.startswith("refused: " + want) or result.startswith("FINDING"):
            return result
        return "FINDING: expected %r, got %s" % (want, result)

    return run


def _fifo_beside_the_kernel(lab: Lab) -> None:
    os.makedirs(os.path.join(lab.repo, "k"), exist_ok=True)
    os.mkfifo(os.path.join(lab.repo, "k", "fifo"))


def _examples() -> str:
    """Every example kernel compiles under the sandbox, from a sandbox holding only them."""
    top = tempfile.mkdtemp(prefix="sandbox-probe-")
    try:
        lab = Lab(top)
        sources = []
        for d in EXAMPLES:
            shutil.copytree(d, os.path.join(lab.repo, d))
            sources += sorted(
                os.path.join(d, n) for n in os.listdir(d) if n.endswith((".py", ".cu"))
            )
        sources = [s for s in sources if not os.path.basename(s).startswith("_")]
        for s in sources:
            p = lab.compile(
                s, "--sys-path", "src/python", *EXAMPLE_FLAGS.get(os.path.basename(s), [])
            )
            if p.returncode != 0 or p.stderr.strip().startswith("gpu_compiler: warning"):
                return "FINDING: %s did not compile: %s" % (s, p.stderr.strip()[-300:])
            shutil.rmtree(os.path.join(lab.repo, "out"))
        return held("all %d example kernels compiled for sm_90 under the OS sandbox" % len(sources))
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _writes_inputs(action: str) -> Callable[[], str]:
    """A numba module that, at import, tries to change the sandbox's inputs (the output
    directory's parent is the sandbox root in Pants): every input must be as it was after the
    compile, whatever the compile's exit."""

    def run() -> str:
        top = tempfile.mkdtemp(prefix="sandbox-probe-")
        try:
            lab = Lab(top)
            lab.source("k/data.txt", MARK + "\n")
            head = (
                "import os\n\nHERE = os.path.dirname(os.path.abspath(__file__))\n"
                "ROOT = os.path.dirname(HERE)\ntry:\n    %s\nexcept OSError:\n    pass\n" % action
            )
            source = lab.source("k/k.py", head + "V = 1.0\n" + KERNEL_PY)
            before = _tree(lab.repo)
            p = lab.compile(source, "--sys-path", ".")
            after = _tree(lab.repo)
            after.pop("out", None)
            changed = sorted(set(before.items()) ^ set(after.items()))
            if changed:
                return "FINDING: the kernel changed its inputs: %s" % (changed[:3],)
            if p.returncode != 0:
                return "FINDING: exit %d: %s" % (p.returncode, p.stderr.strip()[-300:])
            return held("compiled; every input is as it was")
        finally:
            shutil.rmtree(top, ignore_errors=True)

    return run


def _tree(root: str) -> dict:
    """Each path under ``root`` (top-level ``out`` and the compiler's own dot-directories left
    out) with its contents."""
    found = {}
    for dirpath, dirs, names in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "out"]
        for n in names:
            with open(os.path.join(dirpath, n), "rb") as f:
                found[os.path.normpath(os.path.join(rel, n))] = f.read()
        for d in dirs:
            found[os.path.normpath(os.path.join(rel, d)) + "/"] = b""
    return found


PROBES = [
    # The longest (20 compiles) first: with 2 at a time, the others run beside it.
    ("example kernels still compile", _examples),
    ("include: absolute", _cu(lambda lab: '#include "%s"\n' % lab.host("host.cuh"), ABSOLUTE)),
    (
        "numba: import blocks on a FIFO read",
        _blocking(
            "import os\n\nopen(os.path.join(os.path.dirname(__file__), 'fifo')).read()\n",
            _fifo_beside_the_kernel,
        ),
    ),
    ("numba: import loops forever", _blocking("while True:\n    pass\n")),
    ("numba: sys.exit(0) at import", _exits()),
    (
        "include: comment between # and include",
        _cu(lambda lab: '#/* c */include "%s"\n' % lab.host("host.cuh"), OUTSIDE),
    ),
    (
        "include: backslash-newline in the directive",
        _cu(lambda lab: '#inc\\\nlude "%s"\n' % lab.host("host.cuh"), OUTSIDE),
    ),
    (
        "include: digraph %:include",
        _cu(lambda lab: '%%:include "%s"\n' % lab.host("host.cuh"), OUTSIDE),
    ),
    (
        "include: a macro",
        _cu(lambda lab: '#define H "%s"\n#include H\n' % lab.host("host.cuh"), COMPUTED),
    ),
    (
        "include: a macro behind a comment",
        _cu(lambda lab: '#define H "%s"\n# /**/ include H\n' % lab.host("host.cuh"), OUTSIDE),
    ),
    (
        "__has_include of a host header",
        _cu(
            lambda lab: '#if __has_include("%s")\n#include "%s"\n#else\n#define VAL 1\n#endif\n'
            % (lab.host("host.cuh"), lab.host("host.cuh")),
            ABSOLUTE,
        ),
    ),
    (
        "__has_include behind a backslash-newline",
        _cu(
            lambda lab: '#if __has_inc\\\nlude("%s")\n#define VAL %s\n#else\n#define VAL 1\n'
            "#endif\n" % (lab.host("host.cuh"), MARK),
            OUTSIDE,
        ),
    ),
    ("include: symlink in the sandbox pointing out", _probe(_symlinked, NOT_FOUND)),
    (
        "include: ../ out of the sandbox",
        _cu(lambda lab: '#include "../../outside/host.cuh"\n', OUTSIDE),
    ),
    (
        "include: ../ behind a comment",
        _cu(lambda lab: '#/**/include "../../outside/host.cuh"\n', OUTSIDE),
    ),
    (
        "numba: appends to its own input",
        _writes_inputs("open(os.path.join(HERE, 'data.txt'), 'a').write('x')"),
    ),
    (
        "numba: makes a file in the sandbox root",
        _writes_inputs("open(os.path.join(ROOT, 'planted.py'), 'w').write('x')"),
    ),
    ("numba: removes an input", _writes_inputs("os.remove(os.path.join(HERE, 'data.txt'))")),
    (
        "numba: renames an input",
        _writes_inputs("os.rename(os.path.join(HERE, 'data.txt'), os.path.join(ROOT, 'd'))"),
    ),
    (
        "numba: os.listdir of a host dir",
        _py(
            lambda lab: "import os\n\nV = float(len(os.listdir(%r)) + %s)\n" % (lab.outside, MARK),
            OUTSIDE,
        ),
    ),
    (
        "numba: open a host file",
        _py(lambda lab: "V = float(open(%r).read())\n" % lab.host("secret.txt"), OUTSIDE),
    ),
    (
        "numba: ctypes libc open",
        _py(
            lambda lab: "import ctypes\nimport os\n\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "fd = libc.open(%r.encode(), 0)\nif fd < 0:\n    e = ctypes.get_errno()\n"
            "    raise OSError(e, os.strerror(e), %r)\nbuf = ctypes.create_string_buffer(64)\n"
            "libc.read(fd, buf, 64)\nV = float(buf.value)\n"
            % (lab.host("secret.txt"), lab.host("secret.txt")),
            OUTSIDE,
        ),
    ),
    (
        "numba: ctypes libc open, failure swallowed",
        _py(
            lambda lab: "import ctypes\n\nlibc = ctypes.CDLL(None)\n"
            "buf = ctypes.create_string_buffer(64)\n"
            "libc.read(libc.open(%r.encode(), 0), buf, 64)\nV = float(buf.value or b'1')\n"
            % lab.host("secret.txt"),
            OUTSIDE,
        ),
    ),
    (
        "numba: child process cat",
        _py(
            lambda lab: "import subprocess\n\nV = float(subprocess.check_output(['cat', %r]))\n"
            % lab.host("secret.txt"),
            OUTSIDE,
        ),
    ),
    (
        "numba: child process, failure swallowed",
        _py(
            lambda lab: "import subprocess\n\ntry:\n"
            "    V = float(subprocess.check_output(['/bin/sh', '-c', 'cat %s']))\n"
            "except Exception:\n    V = 1.0\n" % lab.host("secret.txt"),
            OUTSIDE,
        ),
    ),
    (
        "numba: importlib of a host file",
        _py(
            lambda lab: "import importlib.util\n\n"
            "spec = importlib.util.spec_from_file_location('vendmod', %r)\n"
            "m = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(m)\nV = m.V\n"
            % lab.host("vendmod.py"),
            OUTSIDE,
        ),
    ),
    (
        "numba: sys.path entry on the host",
        _py(
            lambda lab: "import sys\n\nsys.path.insert(0, %r)\nfrom vendmod import V  # noqa\n"
            % lab.outside,
            OUTSIDE,
        ),
    ),
]


def test_sandbox_probes() -> None:
    # Each probe has its own directories and compile process: two at a time (CI's 2 cores; the
    # compiles are single-threaded).
    rows = run_probes("sandbox", PROBES, workers=2)
    assert findings(rows) == []
