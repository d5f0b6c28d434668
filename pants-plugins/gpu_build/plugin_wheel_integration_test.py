"""The two wheels from a repo that is not this one, built as docs/getting-started.md says.

- The wheels are the ones the page's `commands: gpu_build` build, run in a copy of this
  checkout (as a `runtime_package_dependencies` of this CPython 3.9 test, the 3.10-3.12 runtime
  wheel would fail Pants' interpreter-constraint check).
- The new repo, in a temporary directory, is the page: every `<!-- file: PATH -->` block of it
  written as it is, then its `commands: your repo` run in page order (copying the launcher and
  the wheels, `generate-lockfiles`, `package` of the bundle, `run` of the app, the bundle's
  `--verify`), with `$GPU_BUILD` set to that copy of the checkout. Nothing else of this checkout
  is copied, and `[gpu-toolchains].compiler` is unset, so the toolchain PEX runs the compiler the
  plugin wheel carries. The test fails if a file or command it needs is not in the page.
  The only departures: `./pants` runs get their own empty local store, and `python3` (the
  bundle's `--verify`) is each CPython 3.10-3.12 found.
- `pants package` of its `deploy_bundle` compiles the kernel (one process, both capabilities)
  from that empty local store; the manifest lists it with the right sha256s, the PTX and cubin
  are for sm_90 (PTX ISA <= 9.0), the app PEX carries gpu-runtime and no compiler, and `--verify`
  (no GPU needed) opens the bundle and checks every file. The lockfiles name the wheels through
  the page's `path_mappings`, not this machine's path. `pants run` of the app reaches JIT mode.
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
    KERNEL,
    f"{APP}/kernels/BUILD",
    f"{APP}/BUILD",
    f"{APP}/app.py",
)
WHEELS_COMMAND = "./pants package //:gpu_build-wheel //:gpu_runtime-wheel"
LOCKFILES = "./pants generate-lockfiles"
PACKAGE = f"./pants package {APP}:bundle"
RUN = f"./pants run {APP}:app"
VERIFY = "python3 dist/bundle/app.pex --verify"
NEEDED_COMMANDS = (LOCKFILES, PACKAGE, RUN, VERIFY)  # in this order


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
    rebuilt: dict[str, str]  # wheel name -> sha256 of the second build


def run_page_commands(
    repo: Path, commands: list[str], env: dict[str, str], store: Path
) -> tuple[dict[str, PantsRun], dict[str, subprocess.CompletedProcess]]:
    runs: dict[str, PantsRun] = {}
    verified: dict[str, subprocess.CompletedProcess] = {}
    for line in commands:
        command = normal(line)
        argv = shlex.split(command)
        if argv[0] == "./pants":
            # generate-lockfiles writes into the repo, which a pantsd would have to notice: it
            # runs on its own; the later runs (package, run) change nothing Pants reads, and
            # share one pantsd, as a user's would.
            daemon = command != LOCKFILES
            run = run_pants(repo, argv[1:], local_store=store, pantsd=daemon, launcher="./pants")
            print(f"{command}: {run.summary()}")
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
            subprocess.run(["bash", "-euc", line], cwd=repo, env=env, check=True)
    return runs, verified


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
        runs, verified = run_page_commands(repo, page.there, env, tmp / "store")
        stop_pantsd(repo)
        wheels = {name: repo / "wheels" / name for name in (PLUGIN_WHEEL, RUNTIME_WHEEL)}
        assert all(p.is_file() for p in wheels.values()), sorted((repo / "wheels").iterdir())
        assert {n: sha256(p) for n, p in wheels.items()} == {
            n: sha256(checkout / "dist" / n) for n in wheels
        }
        rebuilt = {
            name: sha256(path) for name, path in built_wheels(checkout, "--no-local-cache").items()
        }
        yield FreshRepo(repo, wheels, runs, verified, rebuilt)
    finally:
        stop_pantsd(repo)
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
    processes = [(c.source, c.capabilities, c.toolchain) for c in package.logged_compiles()]
    assert processes == [(KERNEL, ("sm_80", "sm_90"), "cuda13")], package.stderr[-4000:]


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
    `./pants` command of the page (generate-lockfiles, package, run) prints no `[WARN]` line."""
    warned = {
        command: [line for line in run.stderr.splitlines() if "[WARN]" in line]
        for command, run in fresh.runs.items()
    }
    assert {LOCKFILES, PACKAGE, RUN} <= set(warned), sorted(warned)  # none went unchecked
    assert not any(warned.values()), warned


def ptx_isa(ptx: str) -> tuple[int, int]:
    match = re.search(r"^\.version (\d+)\.(\d+)\s*$", ptx, re.MULTILINE)
    assert match, ptx[:300]
    return int(match.group(1)), int(match.group(2))


def test_manifest_and_kernels_check_out(fresh: FreshRepo) -> None:
    cache = fresh.repo / "dist" / "bundle" / "cache"
    manifest = json.loads((cache / "manifest.json").read_text())
    assert manifest["bundle"] == "bundle"
    assert manifest["capabilities"] == ["sm_90"] and manifest["driver"] == "13.0"
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
            assert ptx_isa(data.decode()) <= (9, 0)
            assert re.search(r"^\.target sm_90\b", data.decode(), re.MULTILINE)
        else:
            assert data[:4] == b"\x7fELF" and struct.unpack_from("<H", data, 18)[0] == EM_CUDA
            (e_flags,) = struct.unpack_from("<I", data, 48)
            assert (e_flags >> 8) & 0xFF == 90, hex(e_flags)


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
