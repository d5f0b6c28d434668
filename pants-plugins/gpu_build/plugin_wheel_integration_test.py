"""The two wheels from a repo that is not this one, built as docs/getting-started.md says.

- The wheels are the ones the page's `commands: gpu_build` build, run in a copy of this
  checkout (as a `runtime_package_dependencies` of this CPython 3.9 test, the 3.10-3.12 runtime
  wheel would fail Pants' interpreter-constraint check).
- The new repo, in a temporary directory, is the page: every `<!-- file: PATH -->` block of it
  written as it is, then its `commands: your repo` run in page order (copying the launcher and
  the wheels, the Orin's platform file, `generate-lockfiles`, `package` of both bundles, `run`
  of the app, the bundle's `--verify`, `test`, `package` of JIT mode's toolchain PEX, and a
  deploy to a throwaway sshd that the page's `local-device.sh` starts), with `$GPU_BUILD` set to
  that copy of the checkout. Nothing else of this checkout is copied, and
  `[gpu-toolchains].compiler` is unset, so the toolchain PEXes run the compiler the plugin
  wheel carries. The test fails if a file or command it needs is not in the page.
  The only departures: `./pants` runs get their own empty local store, `python3` (the
  bundle's `--verify`) is each CPython 3.10-3.12 found, `python3.X` in other commands is the
  CPython 3.X found (pyenv's shims are not on the sandbox's PATH), and `package` of the
  `gpu_toolchain` is `peek`ed instead: building that 280 MiB zipapp and normalising it took
  145 s here, more than the rest of the page's commands (CI's `package ::` builds this repo's
  own `gpu_toolchain`, the same rule).
- `pants package` of its two `deploy_bundle`s compiles the kernel (one process per toolchain,
  all capabilities) from that empty local store; the manifests list it with the right sha256s,
  the PTX and cubin are for sm_90 (PTX ISA <= 9.0, cuda13) and sm_87 (ISA <= 8.5, cuda12), the
  app PEXes carry gpu-runtime and no compiler (the Orin's: aarch64 CPython 3.10 wheels only), and
  `--verify` (no GPU needed) opens the bundle and checks every file. The lockfiles name the
  wheels through the page's `path_mappings`, not this machine's path. `pants run` of the app
  reaches JIT mode; `pants test` runs the page's pytest test; the deploy makes a release on
  the local "device" whose launcher verifies it. No `./pants` command prints a `[WARN]` line.
- The wheels are byte-reproducible: built again in the copy with the process cache off, they
  have the same sha256.

Pants itself is the one `./pants` bootstraps here (the page copies the launcher); the pip and pex
caches are the machine's. The new repo's `./pants` runs after the lockfiles share one pantsd.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import struct
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from gpu_build_testutil import doc_snippets
from gpu_build_testutil.pants_harness import (
    PantsRun,
    base_env,
    copy_checkout,
    find_cpython,
    has_cuda_driver,
    repo_root,
    run_pants,
    stop_pantsd,
)

PAGE = "docs/getting-started.md"
PLUGIN_WHEEL = "gpu_build-0.1.0-py3-none-any.whl"
RUNTIME_WHEEL = "gpu_runtime-0.1.0-py3-none-any.whl"
APP = "src/python/saxpy_app"
KERNEL = f"{APP}/kernels/saxpy.py"
EM_CUDA = 190

# What the test needs from the page: it fails naming any that is missing.
NEEDED_FILES = (
    "pants.toml",
    "3rdparty/python/BUILD",
    "3rdparty/python/cuda13-requirements.txt",
    "3rdparty/python/cuda12-requirements.txt",
    "3rdparty/platforms/BUILD",
    KERNEL,
    f"{APP}/kernels/BUILD",
    f"{APP}/BUILD",
    f"{APP}/app.py",
    f"{APP}/app_test.py",
    "local-device.sh",
)
WHEELS_COMMAND = "./pants package //:gpu_build-wheel //:gpu_runtime-wheel"
ORIN_PLATFORM = "3rdparty/platforms/jetson_orin_cp310.json"
PLATFORM = (
    "PYTHONPATH=wheels/gpu_runtime-0.1.0-py3-none-any.whl python3.10 -m gpu_runtime platform "
    f"--machine aarch64 --glibc 2.35 -o {ORIN_PLATFORM}"
)
LOCKFILES = "./pants generate-lockfiles"
PACKAGE = f"./pants package {APP}:bundle {APP}:bundle_orin"
RUN = f"./pants run {APP}:app"
VERIFY = "python3 dist/bundle/app.pex --verify"
TEST = f"./pants test {APP}:tests"
TOOLCHAIN_TARGET = "3rdparty/python:toolchain-cuda13"
TOOLCHAIN = f"./pants package {TOOLCHAIN_TARGET}"
TOOLCHAIN_PEX = "dist/3rdparty.python/toolchain-cuda13.pex"
# What the test runs instead of TOOLCHAIN (see the module's docstring).
TOOLCHAIN_PEEK = f"./pants peek {TOOLCHAIN_TARGET}"
DEVICE_START = "bash local-device.sh start"
DEPLOY = (
    "./pants --pants-config-files=.local-device/deploy.toml experimental-deploy " f"{APP}:bundle"
)
DEVICE_VERIFY = ".local-device/device/current/app --verify"
DEVICE_STOP = "bash local-device.sh stop"
NEEDED_COMMANDS = (  # in this order
    PLATFORM,
    LOCKFILES,
    PACKAGE,
    RUN,
    VERIFY,
    TEST,
    TOOLCHAIN,
    DEVICE_START,
    DEPLOY,
    DEVICE_VERIFY,
    DEVICE_STOP,
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def normal(command: str) -> str:
    """A command line without its comment and extra spaces."""
    return shlex.join(shlex.split(command, comments=True))


@dataclass(frozen=True)
class Page:
    files: dict[str, str]
    here: list[str]  # `commands: gpu_build`
    there: list[str]  # `commands: your repo`, as written (bash runs those not ./pants, python3)


def read_page(checkout: Path) -> Page:
    text = (checkout / PAGE).read_text(encoding="utf-8")
    page = Page(
        files=doc_snippets.files(text, PAGE),
        here=[normal(c) for c in doc_snippets.commands(text, "gpu_build", PAGE)],
        there=doc_snippets.commands(text, "your repo", PAGE),
    )
    missing = [f for f in NEEDED_FILES if f not in page.files]
    assert not missing, f"{PAGE} gives no `<!-- file: ... -->` block for {missing}"
    assert page.here == [WHEELS_COMMAND], f"{PAGE}'s `commands: gpu_build`: {page.here}"
    in_order = [c for c in map(normal, page.there) if c in NEEDED_COMMANDS]
    assert in_order == list(NEEDED_COMMANDS), (
        f"{PAGE}'s `commands: your repo` should run {list(NEEDED_COMMANDS)} in this order, once "
        f"each: {page.there}"
    )
    return page


def built_wheels(checkout: Path, *options: str) -> dict[str, Path]:
    """The page's wheel command in `checkout`: {wheel name: path under its dist/}."""
    args = shlex.split(WHEELS_COMMAND)[1:]
    run = run_pants(checkout, [*options, *args], local_store=None).check()
    print(f"{' '.join([*options, *args])}: {run.summary()}")
    wheels = {p.name: p for p in (checkout / "dist").glob("*.whl")}
    missing = {PLUGIN_WHEEL, RUNTIME_WHEEL} - set(wheels)
    assert not missing, f"not built: {missing} (found {sorted(wheels)})"
    return {name: wheels[name] for name in (PLUGIN_WHEEL, RUNTIME_WHEEL)}


def app_pythons() -> dict[str, str]:
    """A CPython for each of 3.10, 3.11 and 3.12 found (the app's interpreter constraints)."""
    found = {minor: python for minor in ("3.10", "3.11", "3.12") if (python := find_cpython(minor))}
    assert found, "no CPython 3.10-3.12 on PATH or under PYENV_ROOT"
    return found


@dataclass(frozen=True)
class FreshRepo:
    repo: Path
    wheels: dict[str, Path]  # as the page's commands put them into the repo
    runs: dict[str, PantsRun]  # by the page's `./pants` command
    verified: dict[str, subprocess.CompletedProcess]  # by CPython minor
    shell: dict[str, subprocess.CompletedProcess]  # the page's other commands
    rebuilt: dict[str, str]  # wheel name -> sha256 of the second build


def pythons_on_path(bin_dir: Path) -> str:
    """A directory of `python3.X` links to each CPython 3.10-3.12 found, for the page's shell
    commands (the sandbox's PATH has no pyenv shims)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for minor, python in app_pythons().items():
        (bin_dir / f"python{minor}").symlink_to(python)
    return str(bin_dir)


def run_page_commands(
    repo: Path, commands: list[str], env: dict[str, str], store: Path
) -> tuple[
    dict[str, PantsRun],
    dict[str, subprocess.CompletedProcess],
    dict[str, subprocess.CompletedProcess],
]:
    runs: dict[str, PantsRun] = {}
    verified: dict[str, subprocess.CompletedProcess] = {}
    shell: dict[str, subprocess.CompletedProcess] = {}
    shell_env = dict(env, PATH=f"{pythons_on_path(store.parent / 'bin')}:{env['PATH']}")
    for line in commands:
        command = normal(line)
        argv = shlex.split(command)
        if argv[0] == "./pants":
            # generate-lockfiles writes into the repo, which a pantsd would have to notice: it
            # runs on its own; the later runs (package, run) change nothing Pants reads, and
            # share one pantsd, as a user's would.
            daemon = command != LOCKFILES
            if command == TOOLCHAIN:
                argv = shlex.split(TOOLCHAIN_PEEK)
            run = run_pants(repo, argv[1:], local_store=store, pantsd=daemon, launcher="./pants")
            print(f"{shlex.join(argv)}: {run.summary()}")
            if command != RUN:  # no GPU here: JIT mode stops at the driver (see its test)
                run.check()
            runs[command] = run
        elif argv[0] == "python3":
            for minor, python in app_pythons().items():
                verified[minor] = subprocess.run(
                    [python, *argv[1:]],
                    cwd=repo,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    universal_newlines=True,
                )
        else:
            started = time.monotonic()
            done = subprocess.run(
                ["bash", "-euc", line],
                cwd=repo,
                env=shell_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                universal_newlines=True,
            )
            print(f"{command}: exit {done.returncode} in {time.monotonic() - started:.1f} s")
            assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-4000:])
            shell[command] = done
    return runs, verified, shell


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FreshRepo]:
    tmp = tmp_path_factory.mktemp("gpu_build_plugin_wheel")
    repo = tmp / "repo"
    try:
        checkout = Path(copy_checkout(repo_root(), tmp / "checkout"))
        page = read_page(checkout)
        built_wheels(checkout)
        for rel, text in page.files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        env = dict(base_env(), GPU_BUILD=str(checkout))
        runs, verified, shell = run_page_commands(repo, page.there, env, tmp / "store")
        stop_pantsd(repo)
        wheels = {name: repo / "wheels" / name for name in (PLUGIN_WHEEL, RUNTIME_WHEEL)}
        assert all(p.is_file() for p in wheels.values()), sorted((repo / "wheels").iterdir())
        assert {n: sha256(p) for n, p in wheels.items()} == {
            n: sha256(checkout / "dist" / n) for n in wheels
        }
        rebuilt = {
            name: sha256(path) for name, path in built_wheels(checkout, "--no-local-cache").items()
        }
        yield FreshRepo(repo, wheels, runs, verified, shell, rebuilt)
    finally:
        stop_pantsd(repo)
        if (repo / ".local-device" / "sshd.pid").is_file():  # a command after the start failed
            subprocess.run(["bash", "local-device.sh", "stop"], cwd=repo)
        # The local store holds a copy of the 280 MiB toolchain PEX.
        shutil.rmtree(tmp, ignore_errors=True)


def test_wheels_are_byte_reproducible(fresh: FreshRepo) -> None:
    assert fresh.rebuilt == {name: sha256(path) for name, path in fresh.wheels.items()}


def test_plugin_wheel_carries_the_backend_and_the_compiler_but_no_lockfile(
    fresh: FreshRepo,
) -> None:
    with zipfile.ZipFile(fresh.wheels[PLUGIN_WHEEL]) as zf:
        names = zf.namelist()
        metadata = zf.read("gpu_build-0.1.0.dist-info/METADATA").decode()
    assert {
        "gpu_build/register.py",
        "gpu_build/goals/package_bundle.py",
        "gpu_build/util_rules/compile_process.py",
        "gpu_spec/manifest/model.py",
    } <= set(names)
    assert {
        "gpu_build/_embedded/gpu_compiler/__main__.py",
        "gpu_build/_embedded/gpu_compiler/numba/backend.py",
        "gpu_build/_embedded/gpu_spec/ptx_isa.py",
        "gpu_build/_embedded/gpu_spec/manifest/model.py",
    } <= set(names)
    assert not [n for n in names if n.endswith((".lock", "_test.py")) or "testutil" in n]
    assert "Requires-Python: ==3.9.*" in metadata
    assert "Requires-Dist: pantsbuild.pants (<2.18,>=2.17.0a0)" in metadata


def test_runtime_wheel_has_nothing_of_the_compiler(fresh: FreshRepo) -> None:
    with zipfile.ZipFile(fresh.wheels[RUNTIME_WHEEL]) as zf:
        names = zf.namelist()
        metadata = zf.read("gpu_runtime-0.1.0.dist-info/METADATA").decode()
    assert {
        "gpu_runtime/__init__.py",
        "gpu_runtime/launch/plan.py",
        "gpu_spec/manifest/parse.py",
    } <= set(names)
    assert {n.split("/")[0] for n in names} == {
        "gpu_runtime",
        "gpu_spec",
        "gpu_runtime-0.1.0.dist-info",
    }, names
    assert not [n for n in names if n.endswith("_test.py") or "conftest" in n]
    assert "Requires-Python: <3.13,>=3.10" in metadata
    requires = sorted(re.findall(r"^Requires-Dist: (\S+)", metadata, re.MULTILINE))
    # cryptography: the signature check of trusted bundles (imported only when a key is trusted)
    assert requires == ["cryptography", "cuda-bindings", "numpy"], metadata


def test_the_new_repo_resolved_the_plugin_and_locked_the_runtime_wheel(fresh: FreshRepo) -> None:
    assert "Resolving plugins: gpu-build==0.1.0" in fresh.runs[LOCKFILES].stderr
    default_lock = (fresh.repo / "3rdparty/python/default.lock").read_text()
    # Through the page's `[python-repos].path_mappings`: no path of this machine in the lockfile.
    assert f"${{GPU_BUILD_WHEELS}}/{RUNTIME_WHEEL}" in default_lock
    assert str(fresh.repo) not in default_lock
    assert (
        '"project_name": "numba-cuda"' in (fresh.repo / "3rdparty/python/cuda13.lock").read_text()
    )


def test_the_bundle_compiled_its_kernel_with_the_embedded_compiler(fresh: FreshRepo) -> None:
    # No gpu_compiler in the new repo and no `[gpu-toolchains].compiler`: the plugin's own.
    assert not list(fresh.repo.rglob("gpu_compiler"))
    package = fresh.runs[PACKAGE]
    processes = sorted((c.source, c.capabilities, c.toolchain) for c in package.logged_compiles())
    every = ("sm_80", "sm_87", "sm_90")  # the page's default_capabilities
    assert processes == [(KERNEL, every, "cuda12"), (KERNEL, every, "cuda13")], package.stderr[
        -4000:
    ]


def test_pants_run_of_the_app_reaches_jit_mode(fresh: FreshRepo) -> None:
    """The page's app depends on its kernel: `pants run` finds the kernel index (JIT mode), not
    "no cache"; here, with no GPU, it stops at the driver in one line, as the page says."""
    run = fresh.runs[RUN]
    assert "No GPU kernel cache found" not in run.stderr, run.stderr[-4000:]
    assert "Traceback" not in run.stderr, run.stderr[-4000:]
    assert run.returncode == 2, run.summary() + run.stderr[-4000:]
    if not has_cuda_driver():
        assert "error: no CUDA driver: " in run.stderr, run.stderr[-4000:]


def test_no_warnings(fresh: FreshRepo) -> None:
    """The page's pants.toml silences what Pants would warn about on every command: each
    `./pants` command of the page (generate-lockfiles, package, run, test, the deploy) prints no
    `[WARN]` line (`import pytest` in the test has an owner: the page's pytest requirement)."""
    warned = {
        command: [line for line in run.stderr.splitlines() if "[WARN]" in line]
        for command, run in fresh.runs.items()
    }
    pants_commands = [c for c in NEEDED_COMMANDS if c.startswith("./pants")]
    assert sorted(warned) == sorted(pants_commands)  # none went unchecked
    assert not any(warned.values()), warned


def test_pants_test_runs_the_pages_pytest_test(fresh: FreshRepo) -> None:
    run = fresh.runs[TEST]
    assert f"{APP}/app_test.py:tests succeeded" in run.stderr, run.stderr[-4000:]


def test_the_toolchain_target_for_jit_mode(fresh: FreshRepo) -> None:
    """The page's `gpu_toolchain` target, as `peek` sees it (the test does not package it), and
    the file the page tells `$GPU_RUNTIME_TOOLCHAIN` to name: Pants' default output path."""
    page = (fresh.repo.parent / "checkout" / PAGE).read_text()
    assert f"GPU_RUNTIME_TOOLCHAIN=$PWD/{TOOLCHAIN_PEX} " in page
    (peeked,) = json.loads(fresh.runs[TOOLCHAIN].stdout)
    assert peeked["target_type"] == "gpu_toolchain" and peeked["toolchain"] == "cuda13", peeked
    assert peeked["output_path"] is None
    directory, name = TOOLCHAIN_TARGET.split(":")
    assert TOOLCHAIN_PEX == f"dist/{directory.replace('/', '.')}/{name}.pex"


def test_the_orin_platform_file_from_the_pages_command(fresh: FreshRepo) -> None:
    platform = json.loads((fresh.repo / ORIN_PLATFORM).read_text())
    markers = platform["marker_environment"]
    assert (markers["platform_machine"], markers["python_version"]) == ("aarch64", "3.10")
    tags = platform["compatible_tags"]
    assert tags[0] == "cp310-cp310-manylinux_2_35_aarch64" and "manylinux_2_36" not in str(tags)
    assert not [t for t in tags if "x86_64" in t]


def test_the_orin_app_pex_has_aarch64_cpython_310_wheels_only(fresh: FreshRepo) -> None:
    deps = sorted(p.name for p in (fresh.repo / "dist/bundle_orin/app.pex/.deps").iterdir())
    native = [d for d in deps if not d.endswith("-none-any.whl")]
    assert native and all(re.search(r"-(cp310|abi3)-.*aarch64\.whl$", d) for d in native), deps
    assert "gpu_runtime-0.1.0-py3-none-any.whl" in deps
    for bundle in ("bundle", "bundle_orin"):  # the page gives both sizes
        app = fresh.repo / "dist" / bundle / "app.pex"
        size = sum(p.stat().st_size for p in app.rglob("*") if p.is_file())
        print(f"{bundle}/app.pex: {size / 1e6:.1f} MB")


def test_a_deploy_to_the_local_device(fresh: FreshRepo) -> None:
    """The page's try of `experimental-deploy`: a release on the throwaway sshd, switched to,
    whose launcher verifies the bundle there; the server is stopped by the page's command."""
    deploy = fresh.runs[DEPLOY]
    assert re.search(r"Sent \d+ files", deploy.stderr + deploy.stdout), deploy.stderr[-4000:]
    device = fresh.repo / ".local-device" / "device"
    assert (device / "current").is_symlink()
    assert (device / "current" / "cache" / "manifest.json").read_bytes() == (
        fresh.repo / "dist/bundle/cache/manifest.json"
    ).read_bytes()
    report = json.loads(fresh.shell[DEVICE_VERIFY].stdout.strip().splitlines()[-1])
    assert report["kernels"] == ["saxpy.saxpy"], report
    assert not (fresh.repo / ".local-device" / "sshd.pid").exists()


def ptx_isa(ptx: str) -> tuple[int, int]:
    match = re.search(r"^\.version (\d+)\.(\d+)\s*$", ptx, re.MULTILINE)
    assert match, ptx[:300]
    return int(match.group(1)), int(match.group(2))


@pytest.mark.parametrize(
    "bundle, capability, driver, max_isa, arch_shift",
    # The cubin's SM is in e_flags' bits 8-15 from CUDA 13's nvJitLink, its low byte before.
    [("bundle", 90, "13.0", (9, 0), 8), ("bundle_orin", 87, "12.6", (8, 5), 0)],
)
def test_manifest_and_kernels_check_out(
    fresh: FreshRepo,
    bundle: str,
    capability: int,
    driver: str,
    max_isa: tuple[int, int],
    arch_shift: int,
) -> None:
    cache = fresh.repo / "dist" / bundle / "cache"
    manifest = json.loads((cache / "manifest.json").read_text())
    assert manifest["bundle"] == bundle
    assert manifest["capabilities"] == [f"sm_{capability}"] and manifest["driver"] == driver
    assert [(lib["name"], lib["source"]) for lib in manifest["libraries"]] == [("saxpy", KERNEL)]
    files = manifest["files"]
    assert sorted(Path(p).suffix for p in files) == [".cubin", ".ptx"]
    for rel, digest in files.items():
        assert sha256(cache / rel) == digest, rel
    on_disk = {str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()}
    assert on_disk == {*files, "manifest.json"}
    for rel in files:
        data = (cache / rel).read_bytes()
        if rel.endswith(".ptx"):
            assert ptx_isa(data.decode()) <= max_isa
            assert re.search(rf"^\.target sm_{capability}\b", data.decode(), re.MULTILINE)
        else:
            assert data[:4] == b"\x7fELF" and struct.unpack_from("<H", data, 18)[0] == EM_CUDA
            (e_flags,) = struct.unpack_from("<I", data, 48)
            assert (e_flags >> arch_shift) & 0xFF == capability, hex(e_flags)


def test_the_app_pex_carries_the_runtime_wheel_and_verifies_the_bundle(fresh: FreshRepo) -> None:
    bundle = fresh.repo / "dist" / "bundle"
    deps = {p.name for p in (bundle / "app.pex" / ".deps").iterdir()}  # packed: a zip a wheel
    projects = sorted({d.split("-")[0] for d in deps})
    assert projects == [
        "cffi",
        "cryptography",
        "cuda_bindings",
        "cuda_pathfinder",
        "gpu_runtime",
        "numpy",
        "pycparser",
        "typing_extensions",  # cryptography's, on CPython < 3.11
    ], deps
    manifest = json.loads((bundle / "cache" / "manifest.json").read_text())
    assert sorted(fresh.verified) == sorted(app_pythons())
    for minor, run in fresh.verified.items():
        assert run.returncode == 0, (minor, run.stderr[-4000:])
        report = json.loads(run.stdout.strip().splitlines()[-1])
        assert report == {"kernels": ["saxpy.saxpy"], "files": sorted(manifest["files"])}, minor
