"""The compile reads nothing outside its sandbox: real NVRTC and numba-cuda, no GPU.

Each test lays out a sandbox (``repo/``, the working directory, as in a Pants
process) and a directory beside it (``outside/``) standing in for a
build-machine path such as ``/opt/vendor``. Paths given to the compiler are
relative to the sandbox, as the plugin gives them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

import pytest

from gpu_compiler.errors import CompileError

try:
    import cuda.bindings.nvrtc  # noqa: F401
    import numba.cuda  # noqa: F401

    _SKIP_REASON = None
except Exception as e:  # pragma: no cover - depends on the environment
    _SKIP_REASON = "numba-cuda / CUDA Python wheels not importable: %s" % (e,)

pytestmark = pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or "")

FIX = "put the header inside the repo and add the target that owns it to `dependencies`"
MODULE_FIX = "put the module inside the repo under a source root"
KERNEL = 'extern "C" __global__ void k(int* o) { *o = f(*o) + VAL; }\n'
HEADER = "#pragma once\n#define VAL 7\n__device__ __noinline__ int f(int x) {\n  return x * 5;\n}\n"


def _write(path, text: str) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "w") as f:
        f.write(text)
    return str(path)


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """``repo/`` as the cwd, ``outside/x.cuh`` and ``outside/vendmod.py`` next to it.

    ``vendmod`` is dropped from sys.modules around each test: a module the process already
    holds is not read again, so one test's unconfined import must not serve the next.
    """
    monkeypatch.delitem(sys.modules, "vendmod", raising=False)
    repo = tmp_path / "repo"
    repo.mkdir()
    _write(tmp_path / "outside" / "x.cuh", HEADER)
    _write(tmp_path / "outside" / "vendmod.py", "V = 2.0\n")
    monkeypatch.chdir(repo)
    return tmp_path


def _compile(source: str, capability: str = "sm_90", **options):
    from gpu_compiler.compile import CompileOptions, compile_source

    return compile_source(source, capability, CompileOptions(**options))


def _refused(source: str, **options) -> CompileError:
    with pytest.raises(CompileError) as info:
        _compile(source, **options)
    return info.value


# --- CUDA C++: includes -------------------------------------------------------------------


def test_absolute_include_is_refused_and_would_otherwise_be_read(sandbox):
    outside = str(sandbox / "outside" / "x.cuh")
    src = _write("k/abs.cu", '// vendor header\n#include "%s"\n%s' % (outside, KERNEL))
    # Without the sandbox NVRTC reads the host file: the hole this closes.
    assert _compile(src, sandbox_root=None).modules
    err = _refused(src)
    assert (err.source, err.line) == ("k/abs.cu", 2)
    text = str(err)
    assert text.startswith('k/abs.cu:2: error: refused #include "%s"' % outside), text
    assert "absolute include" in text and FIX in text
    assert "absolute or out-of-repo includes are not inputs of the hermetic compile" in text


def test_absolute_angle_include_is_refused_even_when_missing(sandbox):
    src = _write("k/abs_angle.cu", "#include </no/such/vendor.cuh>\n" + KERNEL)
    err = _refused(src)
    assert (err.source, err.line) == ("k/abs_angle.cu", 1)
    assert "refused #include </no/such/vendor.cuh>" in str(err)


def test_dotdot_include_out_of_the_sandbox_is_refused(sandbox):
    src = _write("k/dotdot.cu", '\n\n#include "../../outside/x.cuh"\n' + KERNEL)
    err = _refused(src)
    assert (err.source, err.line) == ("k/dotdot.cu", 3)
    assert 'refused #include "../../outside/x.cuh"' in str(err)
    assert str(sandbox / "outside" / "x.cuh") in str(err), str(err)
    assert FIX in str(err)


def test_include_through_a_symlink_pointing_outside_is_refused(sandbox):
    os.makedirs("k")
    os.symlink(str(sandbox / "outside"), "k/vendor")
    src = _write("k/sym.cu", '#include "vendor/x.cuh"\n' + KERNEL)
    err = _refused(src)
    assert (err.source, err.line) == ("k/sym.cu", 1)
    assert "through a symlink at k/vendor/x.cuh" in str(err), str(err)
    assert str(sandbox / "outside" / "x.cuh") in str(err)


def test_escaping_include_in_a_nested_header_names_that_header(sandbox):
    _write("k/sub/val.cuh", '#pragma once\n\n#include "../../../outside/x.cuh"\n')
    src = _write("k/nested.cu", '#include "sub/val.cuh"\n' + KERNEL)
    err = _refused(src)
    assert (err.source, err.line) == ("k/sub/val.cuh", 3)


def test_header_in_a_subdirectory_is_given_to_nvrtc_from_the_sandbox(sandbox):
    _write("k/sub/val.cuh", HEADER)
    _write("k/sub/twice.cuh", '#pragma once\n#include "val.cuh"\n')  # the same file, 2nd name
    src = _write("k/ok.cu", '#include "sub/val.cuh"\n#include "sub/twice.cuh"\n' + KERNEL)
    result = _compile(src, lineinfo=True)
    ptx = result.modules[0].ptx
    assert '.file\t1 "k/sub/val.cuh"' in ptx, ptx[-200:]
    # Identical to NVRTC reading the same files from disk itself.
    assert _compile(src, lineinfo=True, sandbox_root=None).modules[0].ptx == ptx


def test_nvrtc_errors_in_a_header_point_at_the_header(sandbox):
    _write("k/sub/bad.cuh", "// broken\n__device__ int f(int x) { return x +; }\n")
    src = _write("k/bad.cu", '#include "sub/bad.cuh"\n#define VAL 1\n' + KERNEL)
    err = _refused(src)
    assert (err.source, err.line) == ("k/sub/bad.cuh", 2), str(err)


def test_include_dirs_quoted_and_angle(sandbox):
    _write("inc/lib/val.cuh", HEADER)
    src = _write("k/inc.cu", '#include "lib/val.cuh"\n#include <lib/val.cuh>\n' + KERNEL)
    assert _compile(src, include_dirs=["inc"]).modules
    err = _refused(src)  # not found without the -I dir: NVRTC's own error, nothing read
    assert 'cannot find header "lib/val.cuh"' in str(err)


def test_include_dir_outside_the_sandbox_is_refused(sandbox):
    src = _write("k/k.cu", '#include "x.cuh"\n' + KERNEL)
    err = _refused(src, include_dirs=["../outside"])
    assert "include directory '../outside' resolves to %s" % (sandbox / "outside") in str(err)
    assert FIX in str(err)


def test_angle_includes_not_in_the_sandbox_are_left_to_nvrtc(sandbox):
    # Found nowhere in the sandbox, <cuda_fp16.h> is NVRTC's to find: in the toolchain's CUDA
    # headers (gpu_compiler.cuda_cpp.toolchain_headers), the same with and without the sandbox.
    src = _write("k/fp16.cu", "#include <cuda_fp16.h>\n#define VAL 1\n" + HEADER[12:] + KERNEL)
    hermetic, loose = _compile(src), _compile(src, sandbox_root=None)
    assert hermetic.modules[0].ptx == loose.modules[0].ptx


def test_has_include_is_resolved_like_an_include(sandbox):
    _write("k/sub/val.cuh", HEADER)
    src = _write(
        "k/has.cu",
        '#if __has_include("sub/val.cuh")\n#include "sub/val.cuh"\n#endif\n' + KERNEL,
    )
    assert _compile(src).modules
    outside = str(sandbox / "outside" / "x.cuh")
    bad = _write("k/has_bad.cu", '#if __has_include("%s")\n#endif\n' % outside + KERNEL)
    assert _refused(bad).line == 1


def test_computed_include_and_include_next_are_refused(sandbox):
    src = _write("k/macro.cu", '#define H "x.cuh"\n#include H\n' + KERNEL)
    err = _refused(src)
    assert (err.source, err.line) == ("k/macro.cu", 2)
    assert "computed include #include H" in str(err)
    src = _write("k/next.cu", "#include_next <x.cuh>\n" + KERNEL)
    err = _refused(src)
    assert err.line == 1 and "#include_next is not supported" in str(err)


def test_kernel_source_outside_the_sandbox_is_refused(sandbox):
    src = _write(str(sandbox / "outside" / "k.cu"), "#define VAL 1\n" + HEADER[12:] + KERNEL)
    err = _refused(os.path.relpath(src))
    assert "the kernel source resolves to %s" % src in str(err)


# --- numba: imports -----------------------------------------------------------------------

NUMBA_KERNEL = """\
from numba import cuda


@cuda.jit
def k(a):
    a[0] = V


AOT_SIGNATURES = {"k": ["void(float32[::1])"]}
"""


def test_numba_import_from_an_absolute_sys_path_entry_is_refused(sandbox):
    outside = str(sandbox / "outside")
    head = "import sys\n\nsys.path.insert(0, %r)\nfrom vendmod import V  # noqa\n" % outside
    src = _write("k/imp.py", head + NUMBA_KERNEL)
    # Without the sandbox the import works: the hole this closes.
    assert _compile(src, sys_path=["."], sandbox_root=None).modules
    del sys.modules["vendmod"]
    err = _refused(src, sys_path=["."])
    assert (err.source, err.line) == ("k/imp.py", 4), str(err)
    text = str(err)
    assert text.startswith("k/imp.py:4: error: refused to read %s/vendmod.py" % outside), text
    assert "outside the compile's inputs (the sandbox) and the toolchain" in text
    assert MODULE_FIX in text


def test_numba_import_refused_even_if_the_kernel_catches_it(sandbox):
    outside = str(sandbox / "outside")
    head = (
        "import sys\nsys.path.insert(0, %r)\ntry:\n    from vendmod import V\n"
        "except Exception:\n    V = 0.0\n" % outside
    )
    src = _write("k/catch.py", head + NUMBA_KERNEL)
    assert _refused(src, sys_path=["."]).line == 4


def test_numba_exec_of_an_outside_file_is_refused(sandbox):
    outside = str(sandbox / "outside" / "vendmod.py")
    src = _write("k/execs.py", "exec(open(%r).read())\n" % outside + NUMBA_KERNEL)
    err = _refused(src, sys_path=["."])
    assert (err.source, err.line) == ("k/execs.py", 1)


def test_numba_extension_module_from_outside_is_refused(sandbox, monkeypatch):
    # Extension modules load with no ``open`` audit event: the check after the import finds it.
    import importlib.util

    spec = importlib.util.find_spec("xxlimited")  # CPython's example extension; finds only
    if spec is None or not spec.origin or "xxlimited" in sys.modules:
        pytest.skip("needs CPython's xxlimited extension module, not yet imported")
    copy = sandbox / "outside" / os.path.basename(spec.origin)
    shutil.copy(spec.origin, str(copy))
    monkeypatch.delitem(sys.modules, "xxlimited", raising=False)
    head = "import sys\nsys.path.insert(0, %r)\nimport xxlimited\nV = 1.0\n" % str(copy.parent)
    err = _refused(_write("k/ext.py", head + NUMBA_KERNEL), sys_path=["."])
    sys.modules.pop("xxlimited", None)
    assert "refused to read module 'xxlimited' from %s" % copy in str(err), str(err)
    assert MODULE_FIX in str(err)


def test_numba_dotdot_sys_path_root_is_refused(sandbox):
    src = _write("k/plain.py", "V = 1.0\n" + NUMBA_KERNEL)
    err = _refused(src, sys_path=[".", "../outside"])
    assert "sys.path root '../outside' resolves to %s" % (sandbox / "outside") in str(err)
    assert MODULE_FIX in str(err)


def test_numba_helper_inside_the_sandbox_still_imports(sandbox):
    _write("k/__init__.py", "")
    _write("k/helper.py", "V = 3.0\n")
    src = _write("k/uses.py", "from k.helper import V  # noqa\n" + NUMBA_KERNEL)
    assert [m.name for m in _compile(src, sys_path=["."]).modules] == ["k__0"]


def test_guard_leaves_other_threads_alone(sandbox):
    from gpu_compiler.numba.import_guard import ImportGuard
    from gpu_compiler.sandbox import Sandbox

    outside = str(sandbox / "outside" / "vendmod.py")
    seen = []
    with ImportGuard(Sandbox("."), "k.py", lambda p: False) as guard:
        worker = threading.Thread(target=lambda: seen.append(open(outside).read()))
        worker.start()
        worker.join()
        with pytest.raises(CompileError):
            open(outside)
    assert seen == ["V = 2.0\n"] and guard.refusal is not None
    open(outside).close()  # and nothing is refused once the guard is gone


# --- the CLI ------------------------------------------------------------------------------


def _cli(src: str, *flags: str) -> subprocess.CompletedProcess:
    """``python -m gpu_compiler compile`` as the Pants rule runs it: cwd = the sandbox."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../src/python
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([here, os.path.join(os.path.dirname(here), "spec")])
    return subprocess.run(
        [sys.executable, "-m", "gpu_compiler", "compile", "--source", src]
        + ["--capability", "sm_90", "--out-dir", "out", *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )


def test_cli_reports_the_refusal_and_writes_nothing(sandbox):
    src = _write("k/dotdot.cu", '#include "../../outside/x.cuh"\n' + KERNEL)
    p = _cli(src)
    assert p.returncode == 1, p.stderr
    # The CLI prefixes each report with the capabilities it is for.
    refusal = 'sm_90: k/dotdot.cu:1: error: refused #include "../../outside/x.cuh"'
    assert p.stderr.startswith(refusal), p.stderr
    assert "Traceback" not in p.stderr and not os.path.exists("out")


# --- the OS sandbox (Landlock): what the textual checks do not see ------------------------

OS_REFUSAL = (
    ": outside the compile's inputs (a compile may read only its inputs and its toolchain; the OS "
    "sandbox denied it); fix: put the file"
)


def _landlock_or_skip() -> None:
    from gpu_compiler.walls import landlock

    try:
        landlock.abi_version()
    except landlock.LandlockUnavailable as e:
        pytest.skip("no Landlock here: %s" % (e,))


def _outputs(root: str = "out") -> bytes:
    data = b""
    for dirpath, _, names in os.walk(root):
        for n in sorted(names):
            with open(os.path.join(dirpath, n), "rb") as f:
                data += f.read()
    return data


@pytest.mark.parametrize(
    "directive, line",
    [
        ('#/* vendor */include "%s"\n', 1),  # a comment between # and include
        ('#inc\\\nlude "%s"\n', 2),  # a backslash-newline inside the directive
        ('%%:include "%s"\n', 1),  # the digraph of #
    ],
)
def test_os_sandbox_refuses_an_include_the_scan_does_not_see(sandbox, directive, line):
    _landlock_or_skip()
    outside = str(sandbox / "outside" / "x.cuh")
    src = _write("k/spelled.cu", directive % outside + KERNEL)
    # The textual check alone lets NVRTC read the host header (only it defines f and VAL):
    # the hole this closes.
    assert _compile(src).modules
    p = _cli(src)
    assert p.returncode == 1, p.stderr
    want = "sm_90: k/spelled.cu:%d: error: refused to read %s%s" % (line, outside, OS_REFUSAL)
    assert p.stderr.startswith(want), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not os.path.exists("out")


def test_os_sandbox_keeps_a_host_header_value_out_of_the_ptx(sandbox):
    # NVRTC takes an unreadable header for a missing one: the compile succeeds, and what
    # reaches the PTX must come from the inputs only (VAL 3, not the host header's 7).
    _landlock_or_skip()
    outside = str(sandbox / "outside" / "x.cuh")
    head = '#if __has_inc\\\nlude("%s")\n#/**/include "%s"\n#else\n' % (outside, outside)
    head += "#define VAL 3\n__device__ __noinline__ int f(int x) { return x + 1; }\n#endif\n"
    src = _write("k/has.cu", head + KERNEL)
    # The textual check alone: the host header is found and read (x * 5 is its f).
    assert "mul.lo.s32" in _compile(src).modules[0].ptx
    p = _cli(src)
    assert p.returncode == 0, p.stderr
    with open("out/sm_90/has.ptx") as f:
        ptx = f.read()
    assert "add.s32" in ptx and "mul.lo.s32" not in ptx, ptx  # f is x + 1, not the host's x * 5


NUMBA_HOSTILE = {
    # kernel head, expected: a refusal's line, or None for "compiles, the value held out"
    "listdir": ("import os\n\nV = float(len(os.listdir(%(dir)r)))\n", 3),
    "ctypes": (
        "import ctypes\nimport os\n\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = libc.open(%(file)r.encode(), 0)\nif fd < 0:\n    e = ctypes.get_errno()\n"
        "    raise OSError(e, os.strerror(e), %(file)r)\nV = 1.0\n",
        8,
    ),
    "child": ("import subprocess\n\nV = float(subprocess.check_output(['cat', %(file)r]))\n", 3),
    "child-swallowed": (
        "import subprocess\n\ntry:\n    V = float(subprocess.check_output(['cat', %(file)r]))\n"
        "except Exception:\n    V = 1.0\n",
        None,
    ),
    "sys-path": ("import sys\n\nsys.path.insert(0, %(dir)r)\nfrom vendmod import V  # noqa\n", 4),
}


@pytest.mark.parametrize("walls", ["namespaces", "landlock"])
@pytest.mark.parametrize("case", sorted(NUMBA_HOSTILE))
def test_os_sandbox_holds_a_numba_source_reading_the_host(sandbox, case, walls):
    _landlock_or_skip()
    outside = sandbox / "outside"
    _write(outside / "secret.txt", "7123\n")
    head, line = NUMBA_HOSTILE[case]
    src = _write("k/hostile.py", head % {"dir": str(outside), "file": str(outside / "secret.txt")})
    with open(src, "a") as f:
        f.write(NUMBA_KERNEL)
    p = _cli(src, "--sys-path", ".", "--sandbox", walls)
    if line is None:
        assert p.returncode == 0, p.stderr
        assert b"7123" not in _outputs()
        return
    assert p.returncode == 1, p.stderr
    # in the namespaces `cat` is not there to run; under Landlock it is there, not runnable
    verb = "run " if case == "child" else "read "
    assert p.stderr.startswith("sm_90: k/hostile.py:%d: error: refused to %s" % (line, verb))
    assert (
        OS_REFUSAL.split("; fix")[0] in p.stderr and len(p.stderr.strip().splitlines()) == 1
    ), p.stderr


def test_without_landlock_the_compile_says_so_once_and_goes_on(sandbox, monkeypatch, capsys):
    from gpu_compiler import confine
    from gpu_compiler.walls import landlock

    def unavailable(*_a, **_k):
        raise landlock.LandlockUnavailable("the kernel has no Landlock")

    monkeypatch.setattr(landlock, "Ruleset", unavailable)
    assert confine.confine(["."], "out") is None and confine.active() is None
    err = capsys.readouterr().err
    assert err == (
        "gpu_compiler: warning: the OS sandbox (Landlock) is not available: the kernel has no "
        "Landlock; only the textual #include and import checks hold this compile to its inputs\n"
    )


def test_without_namespaces_landlock_is_the_wall_said_once(sandbox, monkeypatch, capsys):
    from gpu_compiler import confine
    from gpu_compiler.walls import landlock, namespace

    def refused(*_a, **_k):
        raise namespace.Unavailable("unshare(CLONE_NEWUSER) failed: Operation not permitted")

    def unavailable(*_a, **_k):  # not in force in the test process itself
        raise landlock.LandlockUnavailable("the kernel has no Landlock")

    monkeypatch.setattr(namespace, "isolate", refused)
    monkeypatch.setattr(landlock, "Ruleset", unavailable)
    assert confine.isolate("out") is False
    assert confine.confine(["."], "out") is None
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        "gpu_compiler: warning: the OS sandbox's namespaces are not available: "
        "unshare(CLONE_NEWUSER) failed: Operation not permitted; Landlock alone holds this "
        "compile to its inputs (it does not hide the metadata of host paths)"
    )
    assert len(lines) == 2 and "(Landlock) is not available" in lines[1]


def test_a_base_interpreters_prefix_is_not_toolchain(monkeypatch):
    """A venv's prefix is the toolchain; a base interpreter's prefix (/usr, with a host CUDA
    under it) is not, so the OS sandbox allows only its stdlib and site-packages there."""
    from gpu_compiler import confine

    monkeypatch.setattr(sys, "prefix", "/base-prefix")
    monkeypatch.setattr(sys, "exec_prefix", "/base-prefix")
    monkeypatch.setattr(sys, "base_prefix", "/base-prefix")
    assert "/base-prefix" not in confine._toolchain_dirs()
    monkeypatch.setattr(sys, "base_prefix", "/elsewhere")
    assert "/base-prefix" in confine._toolchain_dirs()
