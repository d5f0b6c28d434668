"""The compile runs where the host does not exist: Linux namespaces, unprivileged.

Why: Landlock (``gpu_compiler.walls.landlock``) holds what a compile *reads*, but not what it can
*see*: ``stat``, ``readlink``, ``os.path.exists`` or ``statvfs`` of a host path still answer,
and a kernel module that bakes such an answer into its PTX at import gets a cached result
that outlives the host's change (the cache key holds only the inputs). Host facts (hostname,
uid, pid, CPU count, load) and the network (Landlock holds TCP, not UDP) leak the same way.
So, as bubblewrap does it (a few system calls of our own here, no setuid helper, nothing to
install), the compile moves into new user, mount, network, UTS, IPC and PID namespaces:

- the root is an empty tmpfs holding only the given paths, bound at their own paths
  (read-only: the inputs, the toolchain, the interpreter, the libraries loaded; read-write:
  the staging directory the outputs are written to), a private empty ``/tmp``, the
  ``/dev`` nodes the CUDA libraries need, and an ``/etc`` of three files (the compile's
  user, group and hostname); no ``/proc``, no ``/sys``, no ``/home``; anything else is
  "no such file or directory", to every system call;
- uid and gid 1000 (``gpu-compile``), hostname ``gpu-compile``, pid 1, one CPU;
- a network namespace with nothing in it (not even a loopback that is up): every send fails.

``isolate`` forks: the child, pid 1 of the new PID namespace, makes the new root and returns
to compile there; the parent (which never reads the kernel) waits, stays the process the
caller sees, forwards a stop to the child, and on success publishes the staged outputs with
one rename, where the child cannot (the staging directory is a mount point inside).

Where the kernel refuses unprivileged user namespaces (a container without them, a sysctl,
an AppArmor policy), ``isolate`` raises ``Unavailable`` with the reason and the caller says
so once; Landlock is then the only wall.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import sys
import time
from typing import Callable, List, NoReturn, Optional, Sequence

HOSTNAME = "gpu-compile"
UID = GID = 1000
ETC_FILES = {
    "passwd": "%s:x:%d:%d:%s:/tmp:/sbin/nologin\n" % (HOSTNAME, UID, GID, HOSTNAME),
    "group": "%s:x:%d:\n" % (HOSTNAME, GID),
    "hostname": HOSTNAME + "\n",
}
# Device nodes the interpreter and the CUDA libraries were measured to need.
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_NOATIME, _MS_NODIRATIME = 32, 1024, 2048
_MS_BIND, _MS_REC, _MS_PRIVATE, _MS_RELATIME = 4096, 16384, 1 << 18, 1 << 21
_MNT_DETACH = 2
_PR_SET_PDEATHSIG = 1
# statvfs f_flag bits -> the mount flags a remount in a user namespace must keep (the kernel
# locks them on a mount that came from a more privileged namespace)
_LOCKED = {
    os.ST_NOSUID: _MS_NOSUID,
    os.ST_NODEV: _MS_NODEV,
    os.ST_NOEXEC: _MS_NOEXEC,
    os.ST_NOATIME: _MS_NOATIME,
    os.ST_NODIRATIME: _MS_NODIRATIME,
    os.ST_RELATIME: _MS_RELATIME,
}
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


class Unavailable(Exception):
    """The kernel refused the namespaces (the reason is the message)."""


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def _mount(source: Optional[str], target: str, fstype: Optional[str], flags: int, data=None):
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    _check(
        _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        "mount %s" % (target,),
    )


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # pragma: no cover - not Linux
        return 1


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _require_one_thread() -> None:
    threads = _thread_count()
    for _ in range(100):  # a thread just joined may take a moment to leave the kernel's list
        if threads == 1:
            break
        time.sleep(0.002)
        threads = _thread_count()
    if threads > 1:  # unshare(CLONE_NEWUSER) is refused to a multithreaded process
        raise Unavailable("the compile process runs %d threads (it must run one)" % threads)


def _enter_user_namespace() -> None:
    """New user, mount, network, UTS, IPC and PID namespaces for this process (its next child
    becomes pid 1), mapped to uid and gid 1000. Unavailable if the kernel refuses."""
    _require_one_thread()
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWUTS | _CLONE_NEWIPC
    if _libc.unshare(flags | _CLONE_NEWPID) != 0:
        e = ctypes.get_errno()
        raise Unavailable("unshare(CLONE_NEWUSER) failed: %s" % os.strerror(e))
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", "%d %d 1\n" % (UID, uid))
        _write("/proc/self/gid_map", "%d %d 1\n" % (GID, gid))
    except OSError as e:
        raise Unavailable("mapping the compile's uid failed: %s" % (e,)) from None


def _probe_user_namespace() -> None:
    """Raise Unavailable, leaving this process as it was, if ``_enter_user_namespace`` would
    fail here: tried in a throwaway child first. A failure half-way (the namespaces made, the
    uid map refused, as inside a root bubblewrap sandbox of a remote executor) cannot be undone
    in the process that made it: ``unshare(CLONE_NEWPID)`` is not undone, and a Python whose
    children go to a new PID namespace can start no thread (numba starts some)."""
    _require_one_thread()  # a fork has one thread whatever its parent runs
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's result reaches the parent through the pipe
        os.close(read_end)
        try:
            _enter_user_namespace()
            code = 0
        except BaseException as e:  # noqa: B036 - any failure is the probe's answer
            os.write(write_end, str(e).encode("utf-8", "replace")[:4000])
            code = 1
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        reason = f.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        raise Unavailable(reason or "the namespace probe ended with status %d" % status)


def _mount_flags_of(path: str) -> int:
    got = os.statvfs(path).f_flag
    return sum(ms for st, ms in _LOCKED.items() if got & st)


class _Root:
    """The new root, built in a tmpfs at ``base`` before ``pivot_root``."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.bound: List[str] = []  # real paths bound so far

    def at(self, path: str) -> str:
        return self.base + path

    def covered(self, real: str) -> bool:
        return any(real == b or real.startswith(b.rstrip("/") + "/") for b in self.bound)

    def mirror_symlinks(self, path: str) -> None:
        """Recreate each symlink on the way to ``path`` (its targets are bound by real path)."""
        pending, seen = os.path.abspath(path), 0
        while seen < 40:
            parts = pending.strip("/").split("/")
            for i in range(1, len(parts) + 1):
                prefix = "/" + "/".join(parts[:i])
                if os.path.islink(prefix):
                    target = os.readlink(prefix)
                    place = self.at(prefix)
                    if not os.path.lexists(place) and not self.covered(os.path.dirname(prefix)):
                        os.makedirs(os.path.dirname(place), exist_ok=True)
                        os.symlink(target, place)
                    resolved = os.path.join(os.path.dirname(prefix), target)
                    pending = os.path.normpath(os.path.join(resolved, *parts[i:]))
                    seen += 1
                    break
            else:
                return

    def bind(self, path: str, writable: bool) -> None:
        if not os.path.lexists(path):
            return
        real = os.path.realpath(path)
        self.mirror_symlinks(path)
        if not os.path.exists(real) or (self.covered(real) and not writable):
            return
        place = self.at(real)
        if os.path.isdir(real):
            os.makedirs(place, exist_ok=True)
        elif not os.path.exists(place):
            os.makedirs(os.path.dirname(place), exist_ok=True)
            open(place, "w").close()
        _mount(real, place, None, _MS_BIND | _MS_REC)
        if not writable:
            flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _mount_flags_of(real)
            _mount(None, place, None, flags)
        self.bound.append(real)


def _build_root(
    base: str, readable: Sequence[str], writable: Sequence[str], hidden: Sequence[str]
) -> None:
    """Mount the new root at ``base`` and switch to it (this process and its children)."""
    cwd = os.getcwd()
    # pivot_root in a mount namespace of the child's own: the parent's root stays the host's
    _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("tmpfs", base, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    root = _Root(base)
    # /tmp first: a path bound under it (a Pants sandbox in /tmp) lands in the private one
    os.makedirs(root.at("/tmp"))
    _mount("tmpfs", root.at("/tmp"), "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    for path in sorted(set(os.path.realpath(p) for p in readable), key=len):
        root.bind(path, writable=False)
    for path in list(readable):
        root.mirror_symlinks(path)
    for path in list(writable) + list(DEVICES):
        root.bind(path, writable=True)
    for path in sorted(set(os.path.realpath(p) for p in hidden)):
        if os.path.isdir(root.at(path)):  # an empty, read-only directory in its place
            _mount("tmpfs", root.at(path), "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_RDONLY)
    os.makedirs(root.at("/etc"), exist_ok=True)
    for name, text in ETC_FILES.items():
        _write(root.at("/etc/" + name), text)
    if not os.path.isdir(root.at(cwd)):
        try:
            os.makedirs(root.at(cwd), exist_ok=True)
        except OSError:  # inside a read-only input: the cwd is an input, bound already
            pass
    os.chdir(base)
    pivot = _SYS_PIVOT_ROOT.get(platform.machine())
    if pivot is None:
        raise OSError(errno.ENOSYS, "pivot_root: unknown architecture %s" % platform.machine())
    _check(_libc.syscall(pivot, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", _MNT_DETACH), "umount the host's root")
    _mount(None, "/", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.chdir(cwd)


# seccomp: sysinfo(2) answers the host's load, uptime and memory to any process, namespaces or
# not (glibc's getloadavg reads it): refused with EPERM. BPF: load arch; other arch -> allow;
# load nr; sysinfo -> EPERM; else allow.
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 99), "aarch64": (0xC00000B7, 179)}
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_SET_NO_NEW_PRIVS = 22, 2, 38


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _refuse_sysinfo() -> None:
    arch = _SECCOMP_ARCH.get(platform.machine())
    if arch is None:  # pragma: no cover - another architecture: the load stays visible
        return
    audit_arch, nr = arch
    allow, eperm = 0x7FFF0000, 0x00050000 | errno.EPERM
    program = [
        (0x20, 0, 0, 4),  # ld [arch]
        (0x15, 0, 2, audit_arch),  # jeq arch ? next : allow
        (0x20, 0, 0, 0),  # ld [nr]
        (0x15, 1, 0, nr),  # jeq sysinfo ? eperm : allow
        (0x06, 0, 0, allow),
        (0x06, 0, 0, eperm),
    ]
    filters = (_SockFilter * len(program))(*[_SockFilter(*f) for f in program])
    prog = _SockFprog(len(program), filters)
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(
        _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )


def _identity() -> None:
    _refuse_sysinfo()
    name = HOSTNAME.encode()
    _check(_libc.sethostname(name, len(name)), "sethostname")
    try:  # one CPU: cpu_count() and the libraries' thread pools see the same machine everywhere
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        pass
    os.environ.update({"HOME": "/tmp", "USER": HOSTNAME, "LOGNAME": HOSTNAME, "TMPDIR": "/tmp"})


def isolate(on_success: Callable[[], None], on_failure: Callable[[], None]) -> None:
    """Return in a child in the new namespaces (its root still the host's until
    ``build_root``); the calling process never returns: it exits with the child's status,
    after ``on_success`` (status 0) or ``on_failure`` (any other).

    Called before the toolchain loads: the process forked is then small (the child of a
    process holding numba paid ~75 ms of copy-on-write faults), and has one thread, as
    ``unshare(CLONE_NEWUSER)`` requires. Raises Unavailable, in the calling process and before
    anything changed, where the kernel allows no unprivileged user namespace."""
    _probe_user_namespace()
    remaining = signal.setitimer(signal.ITIMER_REAL, 0)  # the deadline moves to the child
    try:
        _enter_user_namespace()
    except Unavailable as e:  # the probe passed: this process is now half-moved, so stop
        sys.stderr.write("gpu_compiler: error: setting up the compile's sandbox: %s\n" % e)
        sys.stderr.flush()
        os._exit(70)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if remaining[0]:
            signal.setitimer(signal.ITIMER_REAL, *remaining)
        return
    _wait_and_exit(pid, on_success, on_failure)


def build_root(
    base: str, readable: Sequence[str], writable: Sequence[str], hidden: Sequence[str]
) -> None:
    """In the child of ``isolate``: switch to a root (made at ``base``, an empty directory)
    that holds only ``readable`` (read-only) and ``writable``, ``hidden`` directories shown
    empty; then the fixed identity. Exits 70, saying why, if the kernel refuses a step."""
    try:
        _build_root(base, readable, writable, hidden)
        _identity()
    except BaseException as e:  # noqa: B036 - the child must not go on half-isolated
        sys.stderr.write("gpu_compiler: error: setting up the compile's sandbox: %s\n" % e)
        sys.stderr.flush()
        os._exit(70)


def _wait_and_exit(
    pid: int, on_success: Callable[[], None], on_failure: Callable[[], None]
) -> NoReturn:
    def stop(signum, _frame):  # the compile stops with its caller
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
        signal.signal(signum, stop)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:  # pragma: no cover
            status = 1 << 8
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for old Pythons
            continue
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    if code < 0:
        sys.stderr.write("gpu_compiler: error: the compile was killed by signal %d\n" % -code)
        code = 128 - code
    try:
        (on_success if code == 0 else on_failure)()
    except Exception as e:  # publishing failed: nothing was published
        sys.stderr.write("gpu_compiler: error: publishing the outputs failed: %s\n" % (e,))
        code = code or 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
