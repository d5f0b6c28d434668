"""CLI tests in subprocesses: the contract the Pants rule relies on.

Each run happens in a fresh temporary "sandbox" directory holding copies of
the compiler, gpu_spec and kernel sources, with relative paths only, and with any system
CUDA hidden (PATH without CUDA dirs, no CUDA_HOME / CUDA_PATH /
LD_LIBRARY_PATH): the NVIDIA wheels must be what gets loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

try:
    import cuda.bindings.nvrtc  # noqa: F401
    import numba.cuda  # noqa: F401

    _SKIP_REASON = None
except Exception as e:  # pragma: no cover - depends on the environment
    _SKIP_REASON = "numba-cuda / CUDA Python wheels not importable: %s" % (e,)

pytestmark = pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or "")

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../src/python
SPEC_ROOT = os.path.join(os.path.dirname(SRC_ROOT), "spec")  # .../src/spec


def _hidden_cuda_env() -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "LD_LIBRARY_PATH", "PYTHONPATH")
    }

    def keep(d: str) -> bool:
        return "cuda" not in d.lower() and not os.path.exists(os.path.join(d, "nvcc"))

    env["PATH"] = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and keep(d)
    )
    env["PYTHONPATH"] = os.pathsep.join(["src/python", "src/spec"])  # relative to the sandbox cwd
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _make_sandbox(root: str) -> str:
    """Lay out src/python/{gpu_compiler,imaging/kernels} and src/spec/gpu_spec under ``root``."""
    dst = os.path.join(root, "src", "python")
    shutil.copytree(
        os.path.join(SRC_ROOT, "gpu_compiler"),
        os.path.join(dst, "gpu_compiler"),
        ignore=shutil.ignore_patterns("__pycache__", "*_test.py"),
    )
    shutil.copytree(
        os.path.join(SPEC_ROOT, "gpu_spec"),
        os.path.join(root, "src", "spec", "gpu_spec"),
        ignore=shutil.ignore_patterns("__pycache__", "*_test.py", "conftest.py"),
    )
    for package in ("imaging", "numba_docs"):
        shutil.copytree(
            os.path.join(SRC_ROOT, package, "kernels"),
            os.path.join(dst, package, "kernels"),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return root


def _run(cwd: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpu_compiler"] + list(args),
        cwd=cwd,
        env=_hidden_cuda_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )


def _read_tree(d: str) -> dict:
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


# fmt: off
COMPILES = [
    [
        "--source", "src/python/imaging/kernels/blur.py", "--capability", "sm_87",
        "--sys-path", "src/python", "--lineinfo",
    ],
    [
        "--source", "src/python/imaging/kernels/matmul.cu", "--capability", "sm_90",
        "--name-expression", "matmul<float, 16>", "--name-expression", "matmul<double, 16>",
        "--lineinfo", "--ptx-version", "8.5",
    ],
]
# fmt: on


def test_cli_outputs_are_byte_identical_across_sandboxes(tmp_path):
    a = _make_sandbox(str(tmp_path / "a"))
    b = _make_sandbox(str(tmp_path / "sandbox-with-a-longer-name" / "b"))
    for args in COMPILES:
        capability = args[args.index("--capability") + 1]
        trees = []
        for sandbox in (a, b):
            p = _run(sandbox, "compile", "--out-dir", "out", *args)
            assert p.returncode == 0, p.stderr
            assert os.listdir(os.path.join(sandbox, "out")) == [capability]
            trees.append(_read_tree(os.path.join(sandbox, "out", capability)))
            shutil.rmtree(os.path.join(sandbox, "out"))
        assert trees[0] == trees[1]
        meta = json.loads(trees[0]["metadata.json"])
        assert meta["capability"] == capability
        assert set(trees[0]) == {"metadata.json"} | {m["ptx"] for m in meta["modules"]} | {
            m["cubin"] for m in meta["modules"]
        }
        for blob in trees[0].values():
            assert str(tmp_path).encode() not in blob
            assert b"/tmp/" not in blob


ALL_CAPABILITIES = ("sm_75", "sm_80", "sm_87", "sm_90")
# The example kernels as the BUILD file compiles them (blur, histogram, saxpy, sobel, matmul) are
# checked batched against unbatched, byte for byte, by the gpu_build plugin's
# package_integration_test (`--gpu-toolchains-batch-capabilities=false`); here, what that run does
# not reach: --lineinfo, and numba's linked libraries.
# fmt: off
BATCHED = [
    ["--source", "src/python/imaging/kernels/saxpy.py", "--sys-path", "src/python", "--lineinfo"],
    # numba.cuda.random's device functions (several linked libraries), grid sync, linked C++
    ["--source", "src/python/numba_docs/kernels/montecarlo.py", "--sys-path", "src/python"],
    ["--source", "src/python/numba_docs/kernels/cg.py", "--sys-path", "src/python"],
    ["--source", "src/python/numba_docs/kernels/ffi.py", "--sys-path", "src/python"],
]
# fmt: on


class Batches:
    """One process compiling a source for all ALL_CAPABILITIES (given as `sm_75,sm_80`, `sm_87`,
    `sm_90`: a list and repeated flags), with a given PYTHONHASHSEED, made once per module in one
    sandbox: the batched test's process of cg.py and montecarlo.py (their arguments are the
    hash-seed test's) is also the hash-seed test's process for seed 0, one compile of all four
    capabilities fewer each."""

    def __init__(self, sandbox: str) -> None:
        self.sandbox = sandbox
        self._outs: dict = {}

    def __call__(self, args: list, seed: str) -> dict:
        """{capability: output tree} of the batch process for args, under PYTHONHASHSEED=seed."""
        key = (tuple(args), seed)
        if key not in self._outs:
            out = "batch-%d" % len(self._outs)
            p = subprocess.run(
                [sys.executable, "-m", "gpu_compiler", "compile", "--out-dir", out, *args,
                 "--capability", "sm_75,sm_80", "--capability", "sm_87", "--capability", "sm_90"],
                cwd=self.sandbox, env=dict(_hidden_cuda_env(), PYTHONHASHSEED=seed),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
            )  # fmt: skip
            assert p.returncode == 0, p.stderr
            assert sorted(os.listdir(os.path.join(self.sandbox, out))) == list(ALL_CAPABILITIES)
            self._outs[key] = {
                c: _read_tree(os.path.join(self.sandbox, out, c)) for c in ALL_CAPABILITIES
            }
        return self._outs[key]


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> Batches:
    return Batches(_make_sandbox(str(tmp_path_factory.mktemp("batches") / "s")))


@pytest.mark.parametrize("args", BATCHED, ids=lambda a: os.path.basename(a[1]))
def test_one_process_for_all_capabilities_gives_the_bytes_of_one_process_each(
    tmp_path, batches, args
):
    """The 2nd..4th capability of a process come out as they would from a fresh process:
    numba's per-process naming counters are reset per compile, a numba kernel is lowered once
    for all (gpu_compiler.numba.shared_lowering) and its linked libraries reach NVVM in a
    stable order (gpu_compiler.numba.link_order)."""
    sandbox = _make_sandbox(str(tmp_path / "s"))
    batched_trees = batches(args, seed="0")
    for capability in ALL_CAPABILITIES:
        alone = os.path.join("one", capability)
        q = _run(sandbox, "compile", "--out-dir", alone, *args, "--capability", capability)
        assert q.returncode == 0, q.stderr
        batched = batched_trees[capability]
        assert batched == _read_tree(os.path.join(sandbox, alone, capability)), capability
        assert json.loads(batched["metadata.json"])["capability"] == capability


# The sources whose PTX once depended on the process (the order of `.extern .func`
# declarations: numba's linked libraries reach NVVM in a set's order), and a plain one.
HASH_SEED_SOURCES = ["cg.py", "laplace.py", "montecarlo.py", "vecadd.py"]


@pytest.mark.parametrize("name", HASH_SEED_SOURCES)
def test_the_same_bytes_whatever_the_interpreter_s_hash_seed(tmp_path, batches, name):
    """Every output byte-identical across processes with different PYTHONHASHSEEDs (a set or
    dict ordered by hash would show here), for every capability in one process. Seed 0 is the
    batch process (`batches`), shared with the batched test where it compiles the same source
    with the same arguments; seeds 1 and 4242 give the capabilities as one list."""
    args = ["--source", f"src/python/numba_docs/kernels/{name}", "--sys-path", "src/python"]
    sandbox = _make_sandbox(str(tmp_path / "s"))
    trees = [batches(args, seed="0")]
    for seed in ("1", "4242"):
        out = f"out-{seed}"
        p = subprocess.run(
            [sys.executable, "-m", "gpu_compiler", "compile", "--out-dir", out, *args,
             "--capability", ",".join(ALL_CAPABILITIES)],
            cwd=sandbox, env=dict(_hidden_cuda_env(), PYTHONHASHSEED=seed),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        trees.append({c: _read_tree(os.path.join(sandbox, out, c)) for c in ALL_CAPABILITIES})
    assert trees[0] == trees[1] == trees[2]


# fmt: off
def test_cli_compile_error_exits_1_and_writes_nothing(tmp_path):
    sandbox = _make_sandbox(str(tmp_path / "s"))
    p = _run(
        sandbox, "compile", "--source", "src/python/gpu_compiler/testdata/typing_error.py",
        "--capability", "sm_80,sm_90", "--sys-path", "src/python", "--out-dir", "out/kernel",
    )
    assert p.returncode == 1
    # The same error for both capabilities: reported once, naming both.
    expected = "sm_80, sm_90: src/python/gpu_compiler/testdata/typing_error.py:10: error:"
    assert p.stderr.startswith(expected), p.stderr
    assert p.stderr.count("typing_error.py:10: error:") == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert str(tmp_path) not in p.stderr
    assert not os.path.exists(os.path.join(sandbox, "out", "kernel"))
    out = os.path.join(sandbox, "out")
    leftovers = os.listdir(out) if os.path.isdir(out) else []
    assert leftovers == []

    p = _run(
        sandbox, "compile", "--source", "src/python/gpu_compiler/testdata/syntax_error.cu",
        "--capability", "sm_80", "--out-dir", "out2",
    )
    assert p.returncode == 1
    assert p.stderr.startswith("sm_80: src/python/gpu_compiler/testdata/syntax_error.cu"), p.stderr
    assert "src/python/gpu_compiler/testdata/syntax_error.cu(5): error" in p.stderr
    assert not os.path.exists(os.path.join(sandbox, "out2"))

    p = _run(
        sandbox, "compile", "--source", "src/python/imaging/kernels/saxpy.py",
        "--capability", "sm_90", "--ptx-version", "9.9", "--out-dir", "out3",
    )
    assert p.returncode == 1 and "newer than the toolchain" in p.stderr
    assert not os.path.exists(os.path.join(sandbox, "out3"))
# fmt: on


def test_one_failing_capability_is_named_and_nothing_is_written(tmp_path):
    # PTX ISA 7.4 is enough for sm_87, too old for sm_90 (7.8): sm_87 compiles, sm_90 does not.
    sandbox = _make_sandbox(str(tmp_path / "s"))
    p = _run(
        sandbox, "compile", "--source", "src/python/imaging/kernels/saxpy.py",
        "--sys-path", "src/python", "--capability", "sm_87,sm_90", "--ptx-version", "7.4",
        "--out-dir", "out",
    )  # fmt: skip
    assert p.returncode == 1
    assert p.stderr.startswith("sm_90: "), p.stderr
    assert "sm_87" not in p.stderr.split(":", 1)[0]
    assert "too old for sm_90" in p.stderr
    assert not os.path.exists(os.path.join(sandbox, "out"))


def _run_with_input(cwd: str, text: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpu_compiler"] + list(args),
        cwd=cwd,
        env=_hidden_cuda_env(),
        input=text,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )


def test_capability_from_stdin_gives_the_same_bytes_and_eof_writes_nothing(tmp_path):
    """JIT mode's early start: the capability arrives on stdin once the toolchain is loaded;
    the bytes are those of `--capability`; end of input (the caller found the kernel cached,
    or died) exits 0 having written nothing. Neither leaves the compile's private temporary
    directory behind (it is made beside the output, where the OS sandbox lets it be removed)."""
    sandbox = _make_sandbox(str(tmp_path / "s"))
    args = ["--source", "src/python/imaging/kernels/saxpy.py", "--sys-path", "src/python"]
    given = _run(sandbox, "compile", "--out-dir", "given", *args, "--capability", "sm_90")
    assert given.returncode == 0, given.stderr
    read = _run_with_input(
        sandbox, "sm_90\n", "compile", "--out-dir", "read", *args, "--capability-from-stdin"
    )
    assert read.returncode == 0, read.stderr
    assert _read_tree(os.path.join(sandbox, "read", "sm_90")) == _read_tree(
        os.path.join(sandbox, "given", "sm_90")
    )
    cancelled = _run_with_input(
        sandbox, "", "compile", "--out-dir", "cancelled", *args, "--capability-from-stdin"
    )
    assert cancelled.returncode == 0, cancelled.stderr
    assert not os.path.exists(os.path.join(sandbox, "cancelled"))
    assert [n for n in os.listdir(sandbox) if n.startswith(".gpu_compiler-tmp")] == []
    bad = _run_with_input(
        sandbox, "sm_9x\n", "compile", "--out-dir", "bad", *args, "--capability-from-stdin"
    )
    assert bad.returncode != 0 and "sm_9x" in bad.stderr
    assert not os.path.exists(os.path.join(sandbox, "bad"))
    both = _run(sandbox, "compile", "--out-dir", "o", *args, "--capability", "sm_90",
                "--capability-from-stdin")  # fmt: skip
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_a_scipy_in_the_interpreter_is_not_imported_by_the_compile(tmp_path):
    """numba-cuda imports scipy when it can (to note a host BLAS): in an interpreter that has one
    (JIT mode's), the compile process hides it, as the pinned toolchain has none."""
    sandbox = _make_sandbox(str(tmp_path / "s"))
    fake = tmp_path / "site" / "scipy"
    (fake / "linalg").mkdir(parents=True)
    marker = tmp_path / "scipy-imported"
    (fake / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n__version__ = '1.16.0'\n"
    )
    (fake / "linalg" / "__init__.py").write_text("")
    (fake / "linalg" / "cython_blas.py").write_text("")
    env = dict(_hidden_cuda_env())
    env["PYTHONPATH"] += os.pathsep + str(tmp_path / "site")
    check = subprocess.run(
        [sys.executable, "-c", "import scipy"], cwd=sandbox, env=env, stderr=subprocess.PIPE
    )
    assert check.returncode == 0 and marker.exists()  # importable there: the test can fail
    marker.unlink()
    p = subprocess.run(
        [sys.executable, "-m", "gpu_compiler", "compile", "--out-dir", "out",
         "--source", "src/python/imaging/kernels/saxpy.py", "--sys-path", "src/python",
         "--capability", "sm_90"],
        cwd=sandbox, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        universal_newlines=True,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert os.path.isdir(os.path.join(sandbox, "out", "sm_90"))
    assert not marker.exists()


def test_cli_usage_error_exits_2(tmp_path):
    sandbox = _make_sandbox(str(tmp_path / "s"))
    p = _run(sandbox, "compile", "--source", "x.py", "--out-dir", "o")
    assert p.returncode == 2 and "--capability" in p.stderr
    p = _run(
        sandbox, "compile", "--source", "x.py", "--out-dir", "o",
        "--capability", "sm_90", "--capability", "sm_87,sm_90",
    )  # fmt: skip
    assert p.returncode == 2 and "--capability sm_90 given twice" in p.stderr
    p = _run(sandbox, "compile", "--source", "x.py", "--out-dir", "o", "--capability", "sm_90,")
    assert p.returncode == 2 and "empty capability" in p.stderr
    p = _run(sandbox, "compile", "--source", "x.py", "--out-dir", "o", "--capability", "sm_9\\Q")
    assert p.returncode == 2 and "invalid GPU capability 'sm_9\\\\Q'" in p.stderr


def test_capabilities_are_checked_before_any_regex_sees_them():
    """A capability from stdin went into `re.sub` as a template: `sm_90\\Q` was a re.error."""
    from gpu_compiler.cli import capabilities_of, grouped_failures

    for bad in ("sm_90\\Q", "sm_\\1", "sm_9x"):
        with pytest.raises(Exception, match="invalid GPU capability") as e:
            capabilities_of(["sm_90," + bad], "the capability read from stdin")
        assert "\n" not in str(e.value)
    # and the grouping takes a name literally even so
    assert grouped_failures([("sm_\\1", "sm_\\1: boom")])[0].count("sm_\\1") >= 1


def test_versions_and_wheel_libraries_only(tmp_path):
    sandbox = _make_sandbox(str(tmp_path / "s"))
    p = _run(sandbox, "versions")
    assert p.returncode == 0, p.stderr
    tc = json.loads(p.stdout)["toolchain"]
    assert set(tc) == {
        "cuda",
        "numba-cuda",
        "numba",
        "llvmlite",
        "nvvm",
        "nvrtc",
        "nvjitlink",
        "cuda-core",
        "cuda-bindings",
        "cuda-runtime",
        "cuda-crt",
        "cccl",
    }
    assert tc["cuda"] == "13.0"
    assert tc["cccl"] == "13.0.85" and tc["cuda-crt"] == "13.0.88"  # the lockfile's pins

    # After real compiles (numba -> NVVM, NVRTC, nvJitLink), every CUDA library
    # mapped into the process comes from the wheels, not a system CUDA.
    code = (
        "import json\n"
        "from gpu_compiler.compile import compile_source, CompileOptions\n"
        "from gpu_compiler import toolchain\n"
        "compile_source('src/python/imaging/kernels/saxpy.py', 'sm_90',\n"
        "               CompileOptions(sys_path=['src/python']))\n"
        "compile_source('src/python/imaging/kernels/sobel.cu', 'sm_90')\n"
        "print(json.dumps({'mapped': list(toolchain.mapped_cuda_libraries()),\n"
        "                  'libs': toolchain.library_paths()}))\n"
    )
    q = subprocess.run(
        [sys.executable, "-c", code],
        cwd=sandbox,
        env=_hidden_cuda_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )
    assert q.returncode == 0, q.stderr
    info = json.loads(q.stdout)
    names = " ".join(os.path.basename(m) for m in info["mapped"])
    for lib in ("libnvvm", "libnvrtc", "libnvJitLink"):
        assert lib in names, info["mapped"]
    for path in info["mapped"]:
        assert "site-packages" in path and not path.startswith("/usr/local/cuda"), path
    for lib, where in info["libs"].items():
        assert where["found_via"] == "site-packages", (lib, where)
