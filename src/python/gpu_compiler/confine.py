"""The compile process holds itself to its inputs, outputs and toolchain: two walls.

Why: the compile's cache key is made of its input files. ``gpu_compiler.sandbox``'s checks
refuse what they recognise (an ``#include`` they can parse, a file Python opens), but a kernel
can reach the host in ways no check of ours sees: a spelling of ``#include`` the preprocessor
accepts and the scan does not, ``os.listdir``, ``os.stat``, libc through ctypes, a child
process, a UDP socket. So before the kernel source is read:

1. The process moves where the host does not exist (``gpu_compiler.walls.namespace``): a new root
   holding only the inputs, the toolchain and the interpreter (read-only), a staging directory
   for the outputs (read-write), a private ``/tmp``, no network, uid 1000, hostname
   ``gpu-compile``, pid 1, one CPU. Existence, ``stat`` and ``readlink`` of anything else fail
   as "no such file", so no host fact can reach an output. The outputs are published (one
   rename) by the process outside, once the compile has succeeded.
2. A Landlock ruleset (``gpu_compiler.walls.landlock``) holds every read and write to the same
   paths, and TCP: the second wall, and the only one where the kernel allows no unprivileged
   user namespace (said once on stderr). Landlock does not hold metadata (stat, existence).

What the compile may read (read and execute unless said):
- the inputs: the paths given (``--input``, each read-only), by default the working directory;
  a remote executor's sandbox is rooted at ``/``, so there the rule names each input;
- the outputs: a staging directory made for this process beside the output directory
  (read-write);
- the toolchain: the environment's prefix where it is a virtual environment (a base
  interpreter's prefix, such as ``/usr``, holds a host CUDA and is not allowed), the standard
  library (not a base interpreter's ``site-packages`` under it, unless it is on sys.path: the
  packages there are the host's, not the lockfile's), the site-packages directories (the NVIDIA
  wheels' libraries among them), gpu_compiler's and gpu_spec's own code, the interpreter, and
  each file mapped into the process (shared libraries already loaded, libc among them);
- what the interpreter and the CUDA libraries were measured to need: ``/dev/null``,
  ``/dev/urandom``, ``/dev/random``, ``/dev/zero``, and a private empty temporary directory
  (``/tmp`` inside the namespaces; beside the output directory under Landlock alone).

The toolchain is loaded first (``prepare_toolchain``): numba's modules, NVRTC, NVVM and
nvJitLink, so that no library has to be found on the host later and numba's bytecode caches
are written where they were before.
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import shutil
import site
import socket
import sys
import sysconfig
import tempfile
import threading
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from gpu_compiler.errors import exception_chain as _chain
from gpu_compiler.sandbox import Sandbox
from gpu_compiler.walls import landlock, namespace
from gpu_spec.metadata import LANG_NUMBA

# Said once on stderr when a wall cannot be put up.
NO_NAMESPACES = (
    "gpu_compiler: warning: the OS sandbox's namespaces are not available: %s; Landlock alone "
    "holds this compile to its inputs (it does not hide the metadata of host paths)"
)
UNAVAILABLE = (
    "gpu_compiler: warning: the OS sandbox (Landlock) is not available: %s; only the textual "
    "#include and import checks hold this compile to its inputs"
)
_DEVICES_READ = ("/dev/urandom", "/dev/random", "/dev/zero")
_DEVICES_READ_WRITE = ("/dev/null",)
# The environment every compile sees, whatever its caller's: no clock, timezone, hash seed or
# temporary directory name of this run reaches an output.
FIXED_ENV = {"PYTHONHASHSEED": "0", "TZ": "UTC", "SOURCE_DATE_EPOCH": "315532800"}

# The walls in force in this process, if any (they cannot be lifted, only reported).
_active: Optional["Confinement"] = None


class Confinement:
    """What was allowed, for messages and tests."""

    def __init__(
        self,
        inputs: Sequence[str],
        tmpdir: str,
        staging: Dict[str, str],
        rules: List[Tuple[str, int]],
        isolated: bool,
        visible: Sequence[str] = (),
        hidden: Sequence[str] = (),
    ):
        self.inputs = [Sandbox(os.path.abspath(p)) for p in inputs]
        self.tmpdir = tmpdir
        self.staging = staging  # the output directory (absolute) -> its staging directory
        self.rules = rules
        self.isolated = isolated  # in the namespaces (the parent publishes the outputs)
        self.visible = [os.path.abspath(p) for p in visible]
        self.hidden = [os.path.abspath(p) for p in hidden]

    def is_input(self, path: str) -> bool:
        """Readable as an input: inside an input, by name and after symlinks."""
        return any(box.inside(path) for box in self.inputs)

    def unseen(self, path: str) -> bool:
        """A path the compile cannot see, so "no such file" for it is the sandbox's answer: in
        the namespaces, outside everything bound into them; or under a hidden directory."""
        where = os.path.abspath(path)
        if any(_under(where, h) for h in self.hidden):
            return True
        return self.isolated and not any(_under(where, v) for v in self.visible)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def active() -> Optional[Confinement]:
    return _active


def staging_dir(out_dir: str) -> Optional[str]:
    """The staging directory made writable for ``out_dir`` before the walls went up, if they
    are up; ``gpu_compiler.outputs`` writes there (no other directory beside ``out_dir`` can be
    made writable any more)."""
    if _active is None:
        return None
    return _active.staging.get(os.path.abspath(out_dir))


def published_outside() -> bool:
    """In the namespaces the staging directory is a mount point: the process outside renames
    it to the output directory once the compile exits 0; this one only writes into it."""
    return _active is not None and _active.isolated


def _toolchain_dirs() -> List[str]:
    """The toolchain's directories: the environment, its stdlib and site-packages, our code."""
    import gpu_spec

    paths = sysconfig.get_paths()
    in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
    # A venv's prefix is the toolchain; a base interpreter's (/usr, /usr/local) is the host.
    dirs = [sys.prefix, sys.exec_prefix] if in_venv else []
    dirs += [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # pragma: no cover - old virtualenv's site module
        pass
    dirs += [os.path.dirname(os.path.abspath(__file__))]  # gpu_compiler
    dirs += [os.path.dirname(os.path.abspath(gpu_spec.__file__))]
    dirs += _numba_toolkit_dirs()
    return _both_forms(dirs)


def _numba_toolkit_dirs() -> List[str]:
    """The CUDA toolkit directories numba-cuda reads while compiling (libdevice, NVVM), where
    they are not in site-packages: JIT mode's compiler on a machine whose numba-cuda uses a
    system CUDA (e.g. /usr/local/cuda/nvvm/libdevice). They are the toolchain, not inputs. (The
    pinned toolchains take them from NVIDIA's wheels, already allowed as site-packages.) Not
    the toolkit's include directory: a linked `.cu` file's headers are inputs."""
    if "numba.cuda" not in sys.modules:  # not a numba compile: nothing of numba's to read
        return []
    try:
        from numba.cuda.cuda_paths import get_cuda_paths

        found = get_cuda_paths()
    except Exception:  # pragma: no cover - numba-cuda without it: the wheels' layout only
        return []
    dirs: List[str] = []
    for key in ("libdevice", "nvvm"):
        try:
            path = found[key][1]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(path, str) and path and os.path.exists(path):
            dirs.append(path if os.path.isdir(path) else os.path.dirname(path))
    return dirs


def _both_forms(paths: Iterable[str]) -> List[str]:
    out: List[str] = []
    for p in paths:
        for form in (os.path.abspath(p), os.path.realpath(p)):
            if form not in out:
                out.append(form)
    return out


def _mapped_files() -> List[str]:
    """Every file mapped into this process: the interpreter and the shared libraries loaded."""
    found: List[str] = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    path = parts[5].rstrip("\n")
                    if not path.endswith(" (deleted)") and path not in found:
                        found.append(path)
    except OSError:  # pragma: no cover - not Linux
        pass
    return found


def prepare_toolchain(language: str) -> None:
    """Load what the compile will need from the toolchain, before the ruleset is in force.

    Why: libraries loaded later would be looked up through the host's loader cache and system
    directories, which the ruleset does not open; numba's modules loaded later would not get
    their bytecode cache written into the toolchain (the ruleset makes it read-only).

    The CUDA libraries load in a thread while numba-cuda is imported here (dlopen and
    nvJitLink's first handle release the GIL): on a GPU machine the handle alone takes ~0.19 s
    (nvJitLink loads the driver), which then overlaps the ~1 s of numba's import.
    """
    # The driver's and nvJitLink's compute cache (~/.nv/ComputeCache) is outside the ruleset: a
    # link would try it and print "WARNING 999: cache access failed" on every compile; a cache
    # never changes the bytes written.
    os.environ["CUDA_CACHE_DISABLE"] = "1"
    libraries = threading.Thread(
        target=_load_cuda_libraries,
        args=(language,),
        name="gpu_compiler: CUDA libraries",
    )
    libraries.start()
    try:
        if language == LANG_NUMBA:
            from gpu_compiler.numba.backend import require_numba

            _hide_unpinned_modules()
            require_numba()
    finally:
        libraries.join()


# Importable into an interpreter (JIT mode's, a developer's venv) but in no pinned toolchain:
# numba-cuda imports scipy only to note whether a host BLAS exists (`np.linalg` has no CUDA
# lowering), which costs ~0.2 s per compile process and lets a package outside the lockfile
# decide how a kernel is typed. Hidden, the compile sees what the build's toolchain has.
UNPINNED_MODULES = ("scipy",)


def _hide_unpinned_modules() -> None:
    for name in UNPINNED_MODULES:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]  # `import` raises ImportError


def _load_cuda_libraries(language: str) -> None:
    from cuda.bindings import nvjitlink
    from cuda.pathfinder import load_nvidia_dynamic_lib

    for lib in ("nvrtc", "nvJitLink") + (("nvvm",) if language == LANG_NUMBA else ()):
        try:
            load_nvidia_dynamic_lib(lib)
        except Exception:  # the compile reports a missing library in its own words
            pass
    try:  # nvJitLink looks for the driver (libcuda) on its first link: found now, if there
        nvjitlink.destroy(nvjitlink.create(1, ["-arch=sm_75"]))
    except Exception:  # pragma: no cover - reported by the link itself
        pass


def hidden_dirs() -> List[str]:
    """A base interpreter's ``site-packages`` under its stdlib, unless it is on sys.path.

    Why: a venv's stdlib is the base interpreter's ``lib/python3.X``, and its ``site-packages``
    holds whatever was installed on the build machine, not the lockfile's packages: a module
    read from there is a host file. Where it is on sys.path (an interpreter with no venv, as JIT
    mode may use), it is the toolchain."""
    on_path = {os.path.realpath(p) for p in sys.path if p}
    paths = sysconfig.get_paths()
    found: List[str] = []
    for lib in sorted({paths[k] for k in ("stdlib", "platstdlib") if k in paths}):
        for name in ("site-packages", "dist-packages"):
            d = os.path.join(lib, name)
            if os.path.isdir(d) and os.path.realpath(d) not in on_path:
                found.append(d)
    return _both_forms(found)


def _without(dirs: Sequence[str], hidden: Sequence[str]) -> Tuple[List[str], List[str]]:
    """``dirs`` with each hidden directory cut out: a directory holding one is replaced by its
    entries but that one (Landlock's rules only add: a subdirectory cannot be taken back), and
    is itself only listed (Python's import lists each sys.path directory: one it cannot list
    holds no module for it). Returns (readable, listed only)."""
    readable: List[str] = []
    listed: List[str] = []
    for d in dirs:
        inner = [h for h in hidden if _under(h, d) and h != d]
        if any(_under(d, h) for h in hidden):
            continue
        if not inner:
            readable.append(d)
            continue
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        listed.append(d)
        more, more_listed = _without([os.path.join(d, n) for n in names], inner)
        readable += more
        listed += more_listed
    return readable, listed


def _default_inputs() -> List[str]:
    return ["."]


# Set in the child of `isolate` until `confine` builds its root: (base, staging).
_isolated: Optional[Tuple[str, str]] = None


def isolate(out_dir: str) -> bool:
    """Move into the namespaces (``gpu_compiler.walls.namespace``) before the toolchain loads: from
    then on this returns True in a child, and the calling process only waits, then publishes
    the outputs and exits with the child's status. False, after saying why once on stderr, if
    the kernel allows no unprivileged user namespace (``confine`` then puts up Landlock alone).
    """
    global _isolated
    from gpu_compiler.outputs import publish_staged

    out = os.path.abspath(out_dir)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".%s.tmp-" % os.path.basename(out), dir=parent)
    base = tempfile.mkdtemp(prefix="gpu_compiler-root-")

    def cleanup() -> None:
        shutil.rmtree(staging, ignore_errors=True)
        try:
            os.rmdir(base)
        except OSError:
            pass

    def on_success() -> None:
        try:
            if os.listdir(staging):  # else nothing was asked (JIT mode's end of input)
                publish_staged(staging, out)
        finally:
            cleanup()

    try:
        namespace.isolate(on_success, cleanup)
    except namespace.Unavailable as e:
        cleanup()
        sys.stderr.write(NO_NAMESPACES % (e,) + "\n")
        return False
    _isolated = (base, staging)
    return True


def confine(inputs: Sequence[str], out_dir: str) -> Optional[Confinement]:
    """Put the walls up for this process (and its threads and children from here on); None,
    after saying why once on stderr, if neither can be. After ``isolate``: the new root (only
    the inputs, the toolchain as loaded by now, the staging directory), then Landlock; else
    Landlock alone."""
    if _active is not None:
        return _active
    inputs = [os.path.abspath(p) for p in (inputs or _default_inputs())]
    out = os.path.abspath(out_dir)
    hidden = hidden_dirs()
    toolchain = _toolchain_dirs() + _both_forms([sys.executable])
    mapped = _mapped_files()
    if _isolated is not None:
        base, staging = _isolated
        namespace.build_root(base, inputs + toolchain + mapped, [staging], hidden)
        return _landlock(inputs, out, staging, "/tmp", toolchain, mapped, hidden, True)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".%s.tmp-" % os.path.basename(out), dir=parent)
    atexit.register(shutil.rmtree, staging, True)  # gone already once published
    # Beside the outputs, not in /tmp: removing a directory needs the right to remove entries
    # of its parent, which the ruleset gives for `parent` only (one in /tmp outlived each compile)
    tmpdir = tempfile.mkdtemp(prefix=".gpu_compiler-tmp-", dir=parent)
    atexit.register(shutil.rmtree, tmpdir, True)
    return _landlock(inputs, out, staging, tmpdir, toolchain, mapped, hidden, False)


def _landlock(
    inputs: List[str],
    out: str,
    staging: str,
    tmpdir: str,
    toolchain: List[str],
    mapped: List[str],
    hidden: List[str],
    isolated: bool,
) -> Optional[Confinement]:
    global _active
    # Not the private /tmp: it starts empty, so a path under it that is not there is a host one
    visible = inputs + [staging] + toolchain + mapped + list(namespace.DEVICES)
    if isolated:
        visible += ["/etc/" + name for name in namespace.ETC_FILES]
    try:
        ruleset = landlock.Ruleset()
    except (landlock.LandlockUnavailable, OSError) as e:
        ruleset = None
        if not isolated:
            sys.stderr.write(UNAVAILABLE % (e,) + "\n")
            return None
    if ruleset is not None:
        ruleset.allow_all(inputs, landlock.READ)
        ruleset.allow(staging, landlock.READ_WRITE | landlock.REFER)
        ruleset.allow(tmpdir, landlock.READ_WRITE | landlock.REFER)
        if not isolated:  # this process renames the staging directory to `out`: see outputs
            parent = os.path.dirname(out)
            # No file of the parent (the sandbox's inputs, in Pants) can be written or removed.
            ruleset.allow(parent, landlock.MAKE_DIR | landlock.REMOVE_DIR)
            if os.path.isdir(out) and not os.path.islink(out):
                ruleset.allow(out, landlock.READ_WRITE)  # the old outputs, removed once replaced
        else:
            ruleset.allow_all(["/etc/" + n for n in namespace.ETC_FILES], landlock.READ_FILE)
        readable, listed = _without(toolchain, hidden)
        ruleset.allow_all(readable, landlock.READ_EXECUTE)
        ruleset.allow_all(listed, landlock.READ_DIR)
        ruleset.allow_all(mapped, landlock.READ_FILE | landlock.EXECUTE)
        ruleset.allow_all(_DEVICES_READ, landlock.READ_FILE)
        ruleset.allow_all(_DEVICES_READ_WRITE, landlock.READ_FILE | landlock.WRITE_FILE)
        try:
            ruleset.enforce()
        except OSError as e:
            if not isolated:
                sys.stderr.write(UNAVAILABLE % (e,) + "\n")
                return None
    os.environ["TMPDIR"] = tmpdir
    tempfile.tempdir = tmpdir
    rules = ruleset.rules if ruleset is not None else []
    _initial_sys_path[:] = list(sys.path)
    sys.addaudithook(_note_write)
    _active = Confinement(inputs, tmpdir, {out: staging}, rules, isolated, visible, hidden)
    return _active


# sys.path as the walls went up: an entry the kernel adds later, outside what it can see, is
# where a module it then fails to import would have come from.
_initial_sys_path: List[str] = []

WHY = "a compile may read only its inputs and its toolchain; the OS sandbox denied it"
FIX_READ = (
    "put the file inside the repo and add the target that owns it to `dependencies`; a "
    "compile reads only its inputs"
)
FIX_RUN = "do the work in the kernel module's own Python, or in a build step of its own"
FIX_WRITE = "a kernel module writes nothing at import: keep results in memory"
FIX_LIBRARY = (
    "a module that needs a library of the build machine cannot be imported by a kernel "
    "module: import it in host code, outside the kernel source"
)
FIX_HOST = (
    "a kernel's bytes must not depend on the machine that builds them: compute the value on "
    "the device at run time, or pass it in `defines` of the gpu_kernel target"
)
FIX_NETWORK = "put what the kernel fetches in the repo, as an input of the gpu_kernel target"
_LIBRARY = re.compile(r"(?P<lib>[^\s:/]+\.so[.\d]*): cannot open shared object file")
_NETWORK_ERRNOS = (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EADDRNOTAVAIL)
_NETWORK_CALLS = ("connect", "connect_ex", "create_connection", "sendto", "bind", "sendmsg")


# The last paths opened for writing (Python's audit events): a denied one is said as a write.
_recent_writes: List[str] = []
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def opens_for_writing(args: Tuple) -> bool:
    """An ``open`` audit event's (path, mode, flags) asks to write: a mode of ``w``, ``a``,
    ``x`` or ``+`` (``open``), or write or create flags (``os.open``)."""
    mode = args[1] if len(args) > 1 else None
    flags = args[2] if len(args) > 2 else 0
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _note_write(event: str, args: Tuple) -> None:
    if event != "open" or not args or not isinstance(args[0], (str, bytes)):
        return
    if opens_for_writing(args):
        _recent_writes.append(os.path.abspath(os.fsdecode(args[0])))
        del _recent_writes[:-16]


def _verb(path: str, program: bool) -> str:
    if program:
        return "run"
    return "write" if os.path.abspath(path) in _recent_writes else "read"


def _innermost_call(exc: BaseException) -> str:
    tb = exc.__traceback__
    name = ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_name
        tb = tb.tb_next
    return name


def _network(exc: BaseException) -> bool:
    if isinstance(exc, socket.gaierror):  # no resolver inside: a name lookup is network too
        return True
    if not isinstance(exc, OSError) or exc.filename is not None:
        return False
    if exc.errno in _NETWORK_ERRNOS:
        return True
    # Landlock's TCP rule: a bare EACCES from connect or bind
    return exc.errno in (errno.EACCES, errno.EPERM) and _innermost_call(exc) in _NETWORK_CALLS


def denial(exc: BaseException) -> Optional[str]:
    """The one-line refusal (after ``file:line: error: ``) of what the walls denied somewhere
    in ``exc``'s chain, else None.

    A denial is what the walls answer for something that is not an input, whatever the kernel
    made of it: EACCES/EPERM (Landlock), "no such file" for a path the namespaces do not show,
    EROFS (a write to an input), a library the loader could not find, the network.
    """
    if _active is None:
        return None
    for cur in _chain(exc):
        if _network(cur):
            return network_refusal_text(str(cur))
        if isinstance(cur, OSError) and str(cur) == "Load averages are unobtainable":
            return refusal_text("the build machine's load average", "read the host fact")
        if isinstance(cur, ImportError) and not isinstance(cur, ModuleNotFoundError):
            m = _LIBRARY.search(str(cur))
            if m:
                return refusal_text(m.group("lib"), "load the library")
        if not isinstance(cur, OSError) or not isinstance(cur.filename, (str, bytes)):
            continue
        path = os.fsdecode(cur.filename)
        if not path:
            continue
        program = os.sep not in path
        if program:  # a program run by name: where the host has it
            path = shutil.which(path) or path
        if cur.errno == errno.EROFS:
            return refusal_text(path, "write")
        if cur.errno in (errno.EACCES, errno.EPERM) and not _active.is_input(path):
            return refusal_text(path, _verb(path, program))
        if cur.errno in (errno.ENOENT, errno.ENOTDIR) and (program or _active.unseen(path)):
            return refusal_text(path, _verb(path, program))
    return None


def added_unseen_sys_path() -> List[str]:
    """sys.path entries added since the walls went up that the compile cannot see."""
    if _active is None:
        return []
    return [p for p in sys.path if p and p not in _initial_sys_path and _active.unseen(p or ".")]


def refusal_text(path: str, verb: str = "read") -> str:
    """The one-line refusal of a denied access (``path`` relative to the cwd, or absolute),
    after ``file:line: error: ``."""
    shown = path if os.sep not in path else os.path.normpath(os.path.abspath(path))
    if verb == "write":
        return "refused to write %s: a compile writes only its outputs (%s); fix: %s" % (
            shown,
            WHY,
            FIX_WRITE,
        )
    if verb == "read the host fact":
        return "refused to read %s: it is no input of the compile (%s); fix: %s" % (
            path,
            WHY,
            FIX_HOST,
        )
    fix = {"run": FIX_RUN, "load the library": FIX_LIBRARY}.get(verb, FIX_READ)
    return "refused to %s %s: outside the compile's inputs (%s); fix: %s" % (verb, shown, WHY, fix)


def network_refusal_text(what: str) -> str:
    return "refused to reach the network (%s): a compile has no network (%s); fix: %s" % (
        what,
        WHY,
        FIX_NETWORK,
    )
