"""Probes of what a compile can learn of its host beyond file contents (issue 31).

A kernel module runs arbitrary Python at import, and what it computes there is baked into the
PTX; the cache key holds only the inputs, so a host fact that reaches an output is served
stale from the cache after the host changes, and spread by a remote cache. Each probe is a
kernel that tries one way: the metadata of a host path (existence, size, stat, a link's target,
access, a directory's kind, the file system's size, extended attributes), a base interpreter's
site-packages, the machine's identity (hostname, uid, user name, pid, CPU count, load), the
network (UDP, TCP, a name lookup), a library of the host, the preprocessor's clock.

Each must be refused with one clear line, or compile with the host's value nowhere in its
outputs: for the metadata, the outputs are compared across a change of the host (the file
removed), and must be identical; for the identity, the outputs must hold the sandbox's fixed
value, never the host's. Compiled as the Pants rule runs it (sandbox_lab.Lab).
"""

from __future__ import annotations

import os
import shutil
import socket
import sysconfig
import tempfile
import zlib
from typing import Callable, Dict, Optional

from probe_table import findings, held, refused, run_probes
from sandbox_lab import KERNEL_CU, Lab

BASE = 7000000000  # an int64 literal the PTX writes in decimal: BASE + the value the kernel saw
KERNEL_INT = """
from numba import cuda


@cuda.jit("void(int64[::1])")
def k(a):
    a[0] = V
"""


def _outputs(lab: Lab) -> Dict[str, bytes]:
    found = {}
    out = os.path.join(lab.repo, "out")
    for dirpath, _, names in os.walk(out):
        for n in names:
            with open(os.path.join(dirpath, n), "rb") as f:
                found[os.path.relpath(os.path.join(dirpath, n), out)] = f.read()
    return found


def _in_lab(run: Callable[[Lab], str]) -> Callable[[], str]:
    def probe() -> str:
        top = tempfile.mkdtemp(prefix="host-probe-")
        try:
            return run(Lab(top))
        finally:
            shutil.rmtree(top, ignore_errors=True)

    return probe


# Every refusal of these probes is the sandbox's: `<file>:<line>: error: refused ...`.
REFUSAL = ": error: refused "


def _compiled(
    lab: Lab, head: str, expect: str = REFUSAL
) -> "tuple[str, Optional[Dict[str, bytes]]]":
    """("refused: ..." | "", outputs): one compile of ``head`` + an int64 kernel; a refusal
    must say ``expect``."""
    source = lab.source("k/k.py", head + KERNEL_INT)
    shutil.rmtree(os.path.join(lab.repo, "out"), ignore_errors=True)
    p = lab.compile(source, "--sys-path", ".")
    if p.returncode == 1:
        if os.path.exists(os.path.join(lab.repo, "out")):
            return "FINDING: refused, yet wrote outputs", None
        return refused(p.stderr, expect), None
    if p.returncode != 0:
        return "FINDING: exit %d: %s" % (p.returncode, p.stderr.strip()[-300:]), None
    return "", _outputs(lab)


def _metadata(expr: str) -> Callable[[], str]:
    """``V = BASE + int(<expr of P, a host file, and D, its directory>)``, compiled before and
    after the host file (and a link to it) is removed: refused both times alike, or the same
    bytes both times (the build never saw the value)."""

    def run(lab: Lab) -> str:
        os.symlink(lab.host("secret.txt"), lab.host("link"))
        head = "import os\n\nP, D, L = %r, %r, %r\nV = %d + int(%s)\n" % (
            lab.host("secret.txt"),
            lab.outside,
            lab.host("link"),
            BASE,
            expr,
        )
        first, before = _compiled(lab, head)
        os.remove(lab.host("secret.txt"))
        os.remove(lab.host("link"))
        second, after = _compiled(lab, head)
        if first != second:
            return "FINDING: the host change changed the verdict: %r, then %r" % (first, second)
        if first:
            return first
        if before != after:
            return "FINDING: the outputs changed with the host (a cached build would be stale)"
        return held("the same bytes before and after the host changed")

    return _in_lab(run)


def _fact(expr: str, fixed: int, host: Callable[[], int], setup: str = "") -> Callable[[], str]:
    """``V = BASE + <expr>`` must compile to the sandbox's fixed value, not the host's."""

    def run(lab: Lab) -> str:
        verdict, outputs = _compiled(lab, "%s\nV = %d + int(%s)\n" % (setup, BASE, expr))
        if verdict:
            return verdict
        text = b"".join((outputs or {}).values())
        host_value, fixed_value = host(), fixed
        if host_value != fixed_value and str(BASE + host_value).encode() in text:
            return "FINDING: the host's value (%d) reached the outputs" % host_value
        if str(BASE + fixed_value).encode() not in text:
            return "FINDING: the outputs hold neither the fixed value %d nor the host's" % fixed
        return held("the outputs hold the sandbox's value (%d), not the host's" % fixed_value)

    return _in_lab(run)


def _crc(text: str) -> int:
    return zlib.crc32(text.encode()) % 1000000


def _same_twice(head: str) -> Callable[[], str]:
    """Two compiles of the same inputs give the same bytes."""

    def run(lab: Lab) -> str:
        first, a = _compiled(lab, head)
        second, b = _compiled(lab, head)
        if first or second:
            return first if first == second else "FINDING: %r, then %r" % (first, second)
        if a != b:
            return "FINDING: two compiles of the same inputs differ"
        return held("two compiles of the same inputs give the same bytes")

    return _in_lab(run)


def _network(head: str, kind: int) -> Callable[[], str]:
    """The kernel sends MARK to a socket of the host's loopback: refused, and nothing came."""

    def run(lab: Lab) -> str:
        server = socket.socket(socket.AF_INET, kind)
        server.bind(("127.0.0.1", 0))
        if kind == socket.SOCK_STREAM:
            server.listen(1)
        server.settimeout(0.5)
        try:
            port = server.getsockname()[1]
            verdict, _ = _compiled(
                lab, head % {"port": port, "base": BASE}, ": error: refused to reach the network"
            )
            try:
                got = server.recv(64) if kind == socket.SOCK_DGRAM else server.accept()[0]
            except (socket.timeout, OSError):
                got = None
            if got:
                return "FINDING: the compile reached the host's network"
            return verdict or held("compiled; nothing reached the host")
        finally:
            server.close()

    return _in_lab(run)


def _base_site_packages() -> str:
    """The base interpreter's site-packages under its stdlib (where a venv's stdlib is)."""
    return os.path.join(sysconfig.get_paths()["stdlib"], "site-packages")


def _site_packages_listing() -> Callable[[], str]:
    """A listing of the base site-packages: refused, or empty (never the host's entries)."""
    d = _base_site_packages()
    if not os.path.isdir(d):
        return lambda: held("this interpreter has no site-packages under its stdlib")
    return _fact("len(os.listdir(%r))" % d, 0, lambda: len(os.listdir(d)), "import os")


def _site_packages_import(lab: Lab) -> str:
    d = _base_site_packages()
    names = sorted(n[:-3] for n in os.listdir(d) if n.endswith(".py")) if os.path.isdir(d) else []
    if not names:
        return held("no module in this interpreter's base site-packages")
    lab.source("k/__init__.py", "")
    head = "import sys\n\nsys.path.append(%r)\nimport %s  # noqa\nV = %d\n" % (d, names[0], BASE)
    verdict, _ = _compiled(lab, head)
    return verdict or "FINDING: the compile imported %s from %s" % (names[0], d)


def _sqlite3(lab: Lab) -> str:
    """A module whose library is the host's: refused in one line where it was not loaded before
    the walls went up; where the toolchain had loaded it already, it is part of the toolchain
    (its library mapped into the process, so readable) and the import just finds it."""
    verdict, _ = _compiled(
        lab, "import sqlite3  # noqa\n\nV = %d\n" % BASE, ": error: refused to load the library"
    )
    return verdict or held("compiled: the toolchain had loaded sqlite3 and its library already")


def _clock(directive: str) -> Callable[[], str]:
    def run(lab: Lab) -> str:
        source = lab.source("k/k.cu", directive + KERNEL_CU)
        p = lab.compile(source)
        if p.returncode == 1:
            return refused(p.stderr, ": error: refused __")
        return "FINDING: exit %d: %s" % (p.returncode, p.stderr.strip()[-300:])

    return _in_lab(run)


PROBES = [
    ("metadata: os.path.exists", _metadata("os.path.exists(P)")),
    ("metadata: os.path.getsize", _metadata("os.path.getsize(P)")),
    ("metadata: os.stat", _metadata("os.stat(P).st_size")),
    ("metadata: os.readlink", _metadata("len(os.readlink(L))")),
    ("metadata: os.access", _metadata("os.access(P, os.R_OK)")),
    ("metadata: os.path.isdir", _metadata("os.path.isdir(D)")),
    ("metadata: os.statvfs", _metadata("os.statvfs(D).f_bavail % 1000")),
    ("metadata: os.listxattr", _metadata("len(os.listxattr(P)) + 1")),
    ("base site-packages: listed", _site_packages_listing()),
    ("base site-packages: imported", _in_lab(_site_packages_import)),
    (
        "host: socket.gethostname",
        _fact(
            "zlib.crc32(socket.gethostname().encode()) % 1000000",
            _crc("gpu-compile"),
            lambda: _crc(socket.gethostname()),
            "import socket\nimport zlib",
        ),
    ),
    (
        "host: os.uname().nodename",
        _fact(
            "zlib.crc32(os.uname().nodename.encode()) % 1000000",
            _crc("gpu-compile"),
            lambda: _crc(os.uname().nodename),
            "import os\nimport zlib",
        ),
    ),
    ("host: os.getuid", _fact("os.getuid()", 1000, os.getuid, "import os")),
    (
        "host: pwd user name",
        _fact(
            "zlib.crc32(pwd.getpwuid(os.getuid()).pw_name.encode()) % 1000000",
            _crc("gpu-compile"),
            lambda: _crc(__import__("pwd").getpwuid(os.getuid()).pw_name),
            "import os\nimport pwd\nimport zlib",
        ),
    ),
    ("host: os.getpid", _fact("os.getpid()", 1, os.getpid, "import os")),
    ("host: os.cpu_count", _fact("os.cpu_count()", 1, lambda: os.cpu_count() or 1, "import os")),
    (
        "host: os.getloadavg",
        _fact("os.getloadavg()[0] * 1000", 0, lambda: -1, "import os"),
    ),
    ("same inputs: str hash", _same_twice("V = %d + hash('gpu') %% 1000000\n" % BASE)),
    (
        "same inputs: temp dir name",
        _same_twice(
            "import tempfile\nimport zlib\n\n"
            "V = %d + zlib.crc32(tempfile.gettempdir().encode()) %% 1000000\n" % BASE
        ),
    ),
    (
        "network: UDP send to the host",
        _network(
            "import socket\n\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.sendto(b'913377', ('127.0.0.1', %(port)d))\nV = %(base)d\n",
            socket.SOCK_DGRAM,
        ),
    ),
    (
        "network: TCP connect to the host",
        _network(
            "import socket\n\nsocket.create_connection(('127.0.0.1', %(port)d), 2)\nV = %(base)d\n",
            socket.SOCK_STREAM,
        ),
    ),
    (
        "network: a name lookup",
        _network(
            "import socket\n\nsocket.getaddrinfo('example.com', %(port)d)\nV = %(base)d\n",
            socket.SOCK_DGRAM,
        ),
    ),
    (
        "host library: import sqlite3",
        _in_lab(_sqlite3),
    ),
    (
        "write: a file on the host",
        _in_lab(
            lambda lab: _compiled(
                lab,
                "open(%r, 'w').write('x')\nV = %d\n" % (lab.host("planted.txt"), BASE),
                ": error: refused to write",
            )[0]
            or "FINDING: wrote a host file"
        ),
    ),
    ("clock: __DATE__ in a .cu", _clock("const char* when = __DATE__;\n#define VAL 1\n")),
    ("clock: __TIME__ in a define", _clock("#define STAMP __TIME__\n#define VAL 1\n")),
    (
        "clock: __TIMESTAMP__ pasted with ##",
        _clock("#define CAT(a, b) a##b\nconst char* w = CAT(__TIME, STAMP__);\n#define VAL 1\n"),
    ),
]


def test_host_probes() -> None:
    rows = run_probes("host", PROBES, workers=2)
    assert findings(rows) == []
