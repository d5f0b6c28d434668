"""The compile process confines its own file access to its inputs, outputs and toolchain.

Why: the compile's cache key is made of its input files (the Pants sandbox, its working
directory). ``gpu_compiler.sandbox``'s checks refuse what they recognise (an ``#include`` they
can parse, a file Python opens), but a kernel can read the host in ways no check of ours sees:
a spelling of ``#include`` the preprocessor accepts and the scan does not, ``os.listdir``,
libc through ctypes, a child process. So before the kernel source is read, the process puts a
Landlock ruleset (``gpu_compiler.landlock``) in force, and from then on the kernel refuses
every other read, for NVRTC, numba, C extensions and child processes alike.

What stays readable (read and execute unless said):
- the inputs: the sandbox directory (read only);
- the outputs: a staging directory made for this process beside the output directory
  (read-write), into which ``gpu_compiler.outputs`` writes and which it renames to the output
  directory; the output directory as it was, if one was there (read-write, so that the old one
  can be removed once replaced); the output directory's parent gets only the rights to make and
  remove directories, which that rename needs. In Pants the parent is the sandbox root: every
  input file stays read-only (a kernel could at most make or remove an empty directory there);
  before, the parent was read-write, so a kernel could rewrite its own inputs;
- the toolchain: the environment's prefix where it is a virtual environment (the toolchain
  venv; a base interpreter's prefix, such as ``/usr``, holds a host CUDA and is not allowed),
  the standard library, the site-packages directories (the NVIDIA wheels' libraries among
  them), gpu_compiler's and gpu_spec's own code, the interpreter, and each file mapped into
  the process (shared libraries already loaded, libc among them);
- what the interpreter and the CUDA libraries were measured to need: ``/dev/null``
  (read-write), ``/dev/urandom``, ``/dev/random``, ``/dev/zero``; a private empty temporary
  directory beside the output directory, made for this process and given to it as TMPDIR
  (read-write), removed at exit.

The toolchain is loaded first (``prepare_toolchain``): numba's modules, NVRTC, NVVM and
nvJitLink, so that no library has to be found on the host later and numba's bytecode caches
are written where they were before.

Where the kernel cannot enforce a ruleset (no Landlock, disabled, not Linux) this is said once
on stderr and the compile goes on with the textual checks alone.
"""

from __future__ import annotations

import atexit
import errno
import os
import shutil
import site
import sys
import sysconfig
import tempfile
import threading
from typing import Dict, Iterable, List, Optional, Tuple

from gpu_compiler import landlock
from gpu_compiler.sandbox import Sandbox

# Said once on stderr when the ruleset cannot be enforced.
UNAVAILABLE = (
    "gpu_compiler: warning: the OS sandbox (Landlock) is not available: %s; only the textual "
    "#include and import checks hold this compile to its inputs"
)
_DEVICES_READ = ("/dev/urandom", "/dev/random", "/dev/zero")
_DEVICES_READ_WRITE = ("/dev/null",)

# The ruleset in force in this process, if any (it cannot be lifted, only reported).
_active: Optional["Confinement"] = None


class Confinement:
    """What was allowed, for messages and tests."""

    def __init__(
        self, root: str, tmpdir: str, staging: Dict[str, str], rules: List[Tuple[str, int]]
    ):
        self.sandbox = Sandbox(root)
        self.tmpdir = tmpdir
        self.staging = staging  # the output directory (absolute) -> its staging directory
        self.rules = rules

    def is_input(self, path: str) -> bool:
        """Readable as an input: inside the sandbox, by name and after symlinks."""
        return self.sandbox.inside(path)


def active() -> Optional[Confinement]:
    return _active


def staging_dir(out_dir: str) -> Optional[str]:
    """The staging directory made writable for ``out_dir`` before the ruleset was put in force,
    if it is in force; ``gpu_compiler.outputs`` writes there (no other directory beside
    ``out_dir`` can be made writable any more)."""
    if _active is None:
        return None
    return _active.staging.get(os.path.abspath(out_dir))


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


def prepare_toolchain(language_suffix: str) -> None:
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
        args=(language_suffix,),
        name="gpu_compiler: CUDA libraries",
    )
    libraries.start()
    try:
        if language_suffix == ".py":
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


def _load_cuda_libraries(language_suffix: str) -> None:
    from cuda.bindings import nvjitlink
    from cuda.pathfinder import load_nvidia_dynamic_lib

    for lib in ("nvrtc", "nvJitLink") + (("nvvm",) if language_suffix == ".py" else ()):
        try:
            load_nvidia_dynamic_lib(lib)
        except Exception:  # the compile reports a missing library in its own words
            pass
    try:  # nvJitLink looks for the driver (libcuda) on its first link: found now, if there
        nvjitlink.destroy(nvjitlink.create(1, ["-arch=sm_75"]))
    except Exception:  # pragma: no cover - reported by the link itself
        pass


def confine(root: str, out_dir: str) -> Optional[Confinement]:
    """Put the ruleset in force for this process (its threads started from here on, and its
    children); None, after saying why once on stderr, if the kernel cannot enforce one."""
    global _active
    if _active is not None:
        return _active
    try:
        ruleset = landlock.Ruleset()
    except (landlock.LandlockUnavailable, OSError) as e:
        sys.stderr.write(UNAVAILABLE % (e,) + "\n")
        return None
    ruleset.allow(root, landlock.READ)
    out = os.path.abspath(out_dir)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    # Renaming the staging directory to `out` (and `out` away) needs these on the parent; no
    # file of the parent (the sandbox's inputs, in Pants) can be written, made or removed.
    ruleset.allow(parent, landlock.MAKE_DIR | landlock.REMOVE_DIR)
    if os.path.isdir(out) and not os.path.islink(out):
        ruleset.allow(out, landlock.READ_WRITE)  # the old outputs, removed once replaced
    staging = tempfile.mkdtemp(prefix=".%s.tmp-" % os.path.basename(out), dir=parent)
    atexit.register(shutil.rmtree, staging, True)  # gone already once published
    ruleset.allow(staging, landlock.READ_WRITE)
    # Beside the outputs, not in /tmp: removing a directory needs the right to remove entries
    # of its parent, which the ruleset gives for `parent` only (one in /tmp outlived each compile)
    tmpdir = tempfile.mkdtemp(prefix=".gpu_compiler-tmp-", dir=parent)
    atexit.register(shutil.rmtree, tmpdir, True)
    ruleset.allow(tmpdir, landlock.READ_WRITE)
    ruleset.allow_all(_toolchain_dirs(), landlock.READ_EXECUTE)
    ruleset.allow_all(_both_forms([sys.executable]), landlock.READ_EXECUTE)
    ruleset.allow_all(_mapped_files(), landlock.READ_FILE | landlock.EXECUTE)
    ruleset.allow_all(_DEVICES_READ, landlock.READ_FILE)
    ruleset.allow_all(_DEVICES_READ_WRITE, landlock.READ_FILE | landlock.WRITE_FILE)
    try:
        ruleset.enforce()
    except OSError as e:
        sys.stderr.write(UNAVAILABLE % (e,) + "\n")
        return None
    os.environ["TMPDIR"] = tmpdir
    tempfile.tempdir = tmpdir
    _active = Confinement(root, tmpdir, {out: staging}, ruleset.rules)
    return _active


FIX_READ = (
    "put the file inside the repo and add the target that owns it to `dependencies`; a "
    "compile reads only its inputs"
)


def denied_read(exc: BaseException) -> Optional[str]:
    """The path of a read the ruleset denied somewhere in ``exc``'s chain, else None.

    A denial is an EACCES/EPERM naming a path that is not an input while the ruleset is in
    force: the kernel gives no other sign that Landlock, not the file's mode, refused it.
    """
    if _active is None:
        return None
    seen = set()
    cur: Optional[BaseException] = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in (errno.EACCES, errno.EPERM):
            name = cur.filename
            if isinstance(name, (str, bytes)) and name:
                path = os.fsdecode(name)
                if os.sep not in path:  # a program run by name: where it was found
                    path = shutil.which(path) or path
                if not _active.is_input(path):
                    return path
        cur = cur.__cause__ or cur.__context__
    return None


def refusal_text(path: str) -> str:
    """The one-line refusal of a denied read (``path`` relative to the cwd, or absolute), after
    ``file:line: error: ``."""
    return (
        "refused to read %s: outside the compile's inputs (the OS sandbox denied it); fix: %s"
        % (
            os.path.normpath(os.path.abspath(path)),
            FIX_READ,
        )
    )
