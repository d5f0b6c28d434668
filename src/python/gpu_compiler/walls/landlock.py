"""Linux Landlock through ctypes: a process gives up file access outside the paths it names.

Why the kernel and not our own checks: a check that reads the kernel source as text (the
``#include`` scan) or watches one kind of event (the ``open`` audit hook) misses what it does
not parse or see: a comment between ``#`` and ``include``, a backslash-newline inside the
directive, ``os.listdir``, libc's ``open`` through ctypes, a child process. Landlock is
enforced by the kernel on every path-based access of this process and of every process it
starts, whatever code asks; a ruleset, once in force, cannot be lifted.

Only the three system calls are used (``landlock_create_ruleset`` = 444,
``landlock_add_rule`` = 445, ``landlock_restrict_self`` = 446: the same numbers on x86_64 and
aarch64, the generic table), after ``prctl(PR_SET_NO_NEW_PRIVS)``, which Landlock requires of
an unprivileged process. The access rights handled are those the running kernel's ABI knows
(1 to 7 are handled here; a newer kernel is treated as 7): a right the ABI lacks is not
asked for, so the ruleset is as strict as the kernel allows. From ABI 4, TCP bind and connect
are handled too, with no rule allowing them: a compile has no business with the network.

Not restricted by Landlock (any ABI): ``stat``, ``readlink`` and the existence of a path, so a
file's metadata stays visible; what is read (contents, directory listings) is what is held.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from typing import Dict, Iterable, List, Optional, Tuple

# The generic syscall table's numbers, shared by x86_64 and aarch64 (and every architecture
# that gained these calls after the tables were unified).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_PR_SET_NO_NEW_PRIVS = 38
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1  # ABI 4

# What each ABI can handle (its rights accumulate).
_FS_BY_ABI: Dict[int, int] = {1: (1 << 13) - 1}
_FS_BY_ABI[2] = _FS_BY_ABI[1] | REFER
_FS_BY_ABI[3] = _FS_BY_ABI[2] | TRUNCATE
_FS_BY_ABI[4] = _FS_BY_ABI[3]
_FS_BY_ABI[5] = _FS_BY_ABI[4] | IOCTL_DEV
_FS_BY_ABI[6] = _FS_BY_ABI[5]
_FS_BY_ABI[7] = _FS_BY_ABI[6]
MAX_ABI = 7

# Rights a rule on a file (not a directory) may carry; the others are refused with EINVAL.
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = READ_FILE | READ_DIR
READ_EXECUTE = READ | EXECUTE
WRITE = (
    WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SYM
    | MAKE_SOCK
    | MAKE_FIFO
    | TRUNCATE
)
READ_WRITE = READ | WRITE


class LandlockUnavailable(Exception):
    """This kernel or platform cannot enforce a ruleset (the reason is the message)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is __attribute__((packed)): 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc: Optional[ctypes.CDLL] = None


def _syscall(*args: int) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = ctypes.c_long
    return int(_libc.syscall(*[ctypes.c_long(a) for a in args]))


def _raise_errno(what: str) -> None:
    e = ctypes.get_errno()
    raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def abi_version() -> int:
    """The kernel's Landlock ABI; LandlockUnavailable saying why if it has none."""
    if platform.system() != "Linux":
        raise LandlockUnavailable("Landlock is Linux-only (this is %s)" % platform.system())
    if platform.machine() not in ("x86_64", "aarch64", "arm64"):
        raise LandlockUnavailable("no known Landlock syscall numbers for %s" % platform.machine())
    v = _syscall(_SYS_CREATE_RULESET, 0, 0, _CREATE_RULESET_VERSION)
    if v < 0:
        e = ctypes.get_errno()
        why = {
            errno.ENOSYS: "the kernel has no Landlock (Linux 5.13+ built with it)",
            errno.EOPNOTSUPP: "Landlock is disabled at boot (lsm= does not list it)",
        }.get(e, os.strerror(e))
        raise LandlockUnavailable(why)
    return v


class Ruleset:
    """Rules being gathered; ``enforce()`` puts them in force for this thread and its children.

    A path that does not exist is skipped (nothing there to read). A rule on a file keeps only
    the rights a file can carry.
    """

    def __init__(self, abi: Optional[int] = None):
        self.abi = min(abi if abi is not None else abi_version(), MAX_ABI)
        self.handled = _FS_BY_ABI[self.abi]
        attr = _RulesetAttr(self.handled, _NET_BIND_TCP | _NET_CONNECT_TCP)
        size = ctypes.sizeof(_RulesetAttr) if self.abi >= 4 else 8  # net field from ABI 4
        fd = _syscall(_SYS_CREATE_RULESET, ctypes.addressof(attr), size, 0)
        if fd < 0:
            _raise_errno("landlock_create_ruleset")
        self._fd = fd
        self.rules: List[Tuple[str, int]] = []

    def allow(self, path: str, access: int) -> bool:
        """Allow ``access`` beneath ``path``; False if there is no such path."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                access &= FILE_RIGHTS
            access &= self.handled
            attr = _PathBeneathAttr(access, fd)
            if _syscall(_SYS_ADD_RULE, self._fd, _RULE_PATH_BENEATH, ctypes.addressof(attr), 0):
                _raise_errno("landlock_add_rule(%s)" % path)
        finally:
            os.close(fd)
        self.rules.append((path, access))
        return True

    def allow_all(self, paths: Iterable[str], access: int) -> None:
        for p in paths:
            self.allow(p, access)

    def enforce(self) -> None:
        """No new privileges, then the ruleset: irreversible for this thread and its children."""
        try:
            if _prctl_nnp():
                _raise_errno("prctl(PR_SET_NO_NEW_PRIVS)")
            if _syscall(_SYS_RESTRICT_SELF, self._fd, 0):
                _raise_errno("landlock_restrict_self")
        finally:
            os.close(self._fd)


def _prctl_nnp() -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return int(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
