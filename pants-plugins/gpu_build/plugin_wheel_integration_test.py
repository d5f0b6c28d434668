"""The two wheels from a repo that is not this one: a new Pants 2.17.1 repo in a temporary
directory installs the gpu-build plugin from its wheel and depends on the gpu-runtime wheel.

- The wheels are the ones `./pants package` builds from this checkout (in a copy of it: as a
  `runtime_package_dependencies` of this CPython 3.9 test, the 3.10-3.12 runtime wheel would fail
  Pants' interpreter-constraint check); the test copies them into a find-links directory, as a
  team would put them on an index.
- The new repo holds only what the test writes: pants.toml (`[GLOBAL].plugins`,
  `[python-repos].find_links`, its own resolves and `[gpu-toolchains]`), its requirements, a
  numba saxpy kernel, an app and their BUILD files; nothing of this checkout is copied, and
  `[gpu-toolchains].compiler` is unset, so the toolchain PEX runs the compiler the plugin wheel
  carries. The repo generates its own lockfiles (`pants generate-lockfiles`), as a user would.
- `pants package` of its `deploy_bundle` compiles the kernel (one process, both capabilities)
  from an empty local store; the manifest lists it with the right sha256s, the PTX and cubin
  are for sm_90 (PTX ISA <= 9.0), the app PEX carries gpu-runtime and no compiler, and the
  app run with `--verify` (no GPU needed) on each CPython 3.10-3.12 found opens the bundle and
  checks every file.
- The wheels are byte-reproducible: built again in a copy of this checkout with the process
  cache off, they have the same sha256.

Pants itself is the one `./pants` bootstraps here (its launcher runs in the new repo); the pip
and pex caches are the machine's. About 2 minutes with warm caches.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent
from typing import Iterator

import pytest

from gpu_build_testutil.pants_harness import (
    PantsRun,
    base_env,
    copy_checkout,
    find_cpython,
    repo_root,
    run_pants,
)

PLUGIN_WHEEL = "gpu_build-0.1.0-py3-none-any.whl"
RUNTIME_WHEEL = "gpu_runtime-0.1.0-py3-none-any.whl"
APP = "src/python/saxpy_app"
KERNEL = f"{APP}/kernels/saxpy.py"
EM_CUDA = 190

PANTS_TOML = """\
[GLOBAL]
pants_version = "2.17.1"
plugins = ["gpu-build==0.1.0"]
backend_packages = ["pants.backend.python", "gpu_build"]
# This machine runs Pants through the other checkout's launcher (a venv, not the scie).
ignore_warnings = ["DEPRECATED: Running Pants in an external Python interpreter"]

[python-repos]
find_links = ["file://{find_links}"]

[python]
interpreter_constraints = ["CPython>=3.10,<3.13"]
enable_resolves = true
pip_version = "latest"

[python.resolves]
python-default = "3rdparty/python/default.lock"
cuda13 = "3rdparty/python/cuda13.lock"

[python.resolves_to_interpreter_constraints]
cuda13 = ["CPython>=3.11,<3.13"]

[python-infer]
use_rust_parser = true

[python-bootstrap]
search_path = ["<PYENV>", "<PATH>"]

[subprocess-environment]
env_vars = ["PIP_CONFIG_FILE=/dev/null"]

[gpu-toolchains]
toolchains = \"\"\"{{"cuda13": {{"resolve": "cuda13", "cuda": "13.0"}}}}\"\"\"
default_toolchain = "cuda13"
default_capabilities = ["sm_80", "sm_90"]
"""

FILES = {
    "3rdparty/python/BUILD": """\
        python_requirement(
            name="gpu-runtime",
            requirements=["gpu-runtime==0.1.0"],
            modules=["gpu_runtime", "gpu_spec"],
        )

        python_requirement(name="numpy", requirements=["numpy"])

        python_requirements(
            name="cuda13",
            source="cuda13-requirements.txt",
            resolve="cuda13",
        )
        """,
    "3rdparty/python/cuda13-requirements.txt": """\
        numba-cuda==0.30.4
        numba==0.68.1
        llvmlite==0.50.0
        numpy==2.4.6
        cuda-core==1.2.2
        cuda-bindings==13.4.4
        cuda-pathfinder==1.9.1
        nvidia-nvvm==13.0.88
        nvidia-cuda-nvrtc==13.0.88
        nvidia-nvjitlink==13.0.88
        nvidia-cuda-runtime==13.0.96
        """,
    f"{APP}/kernels/BUILD": """\
        gpu_kernel(name="saxpy", source="saxpy.py")
        """,
    KERNEL: """\
        from numba import cuda


        @cuda.jit
        def saxpy(out, a, x, y):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = a * x[i] + y[i]


        AOT_SIGNATURES = {"saxpy": ["void(float32[::1], float32, float32[::1], float32[::1])"]}
        """,
    f"{APP}/BUILD": """\
        python_sources(name="lib")

        pex_binary(name="app", entry_point="app.py:main", execution_mode="venv")

        deploy_bundle(
            name="bundle",
            binary=":app",
            kernels=["src/python/saxpy_app/kernels:saxpy"],
            capabilities=["sm_90"],
            driver_version="13.0",
        )
        """,
    f"{APP}/app.py": """\
        import json
        import sys

        import numpy as np

        import gpu_runtime
        from gpu_runtime import DeviceArray


        def main() -> int:
            cache = gpu_runtime.open_cache()
            if "--verify" in sys.argv:  # no GPU needed
                checked = cache.verify(all_variants=True)
                print(json.dumps({"kernels": cache.kernel_names(), "files": checked}))
                return 0
            n = 1 << 20
            x = np.arange(n, dtype=np.float32)
            dx, out = DeviceArray.from_numpy(x), DeviceArray.empty(n, np.float32)
            cache.kernel("saxpy")[(n + 255) // 256, 256](out, np.float32(2.0), dx, dx)
            ok = bool(np.allclose(out.to_numpy(), 3 * x))
            print("saxpy", "ok" if ok else "WRONG")
            return 0 if ok else 1
        """,
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


WHEEL_TARGETS = ["//:gpu_build-wheel", "//:gpu_runtime-wheel"]


def built_wheels(checkout: Path, *options: str) -> dict[str, Path]:
    """`./pants package` of both wheels in `checkout`: {wheel name: path under its dist/}."""
    run_pants(checkout, [*options, "package", *WHEEL_TARGETS], local_store=None).check()
    wheels = {p.name: p for p in (checkout / "dist").glob("*.whl")}
    missing = {PLUGIN_WHEEL, RUNTIME_WHEEL} - set(wheels)
    assert not missing, f"not built: {missing} (found {sorted(wheels)})"
    return {name: wheels[name] for name in (PLUGIN_WHEEL, RUNTIME_WHEEL)}


def write_repo(repo: Path, find_links: Path) -> None:
    (repo / "pants.toml").parent.mkdir(parents=True, exist_ok=True)
    (repo / "pants.toml").write_text(PANTS_TOML.format(find_links=find_links))
    for rel, text in FILES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(dedent(text))


def app_pythons() -> dict[str, str]:
    """A CPython for each of 3.10, 3.11 and 3.12 found (the app's interpreter constraints)."""
    found = {minor: python for minor in ("3.10", "3.11", "3.12") if (python := find_cpython(minor))}
    assert found, "no CPython 3.10-3.12 on PATH or under PYENV_ROOT"
    return found


@dataclass(frozen=True)
class FreshRepo:
    repo: Path
    wheels: dict[str, Path]
    lockfiles: PantsRun
    package: PantsRun
    rebuilt: dict[str, str]  # wheel name -> sha256 of the second build


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FreshRepo]:
    tmp = tmp_path_factory.mktemp("gpu_build_plugin_wheel")
    launcher = Path(repo_root()) / "pants"
    try:
        find_links = tmp / "wheels"
        find_links.mkdir()
        checkout = Path(copy_checkout(repo_root(), tmp / "checkout"))
        wheels = {}
        for name, path in built_wheels(checkout).items():
            wheels[name] = Path(shutil.copy2(path, find_links / name))
        repo = tmp / "repo"
        write_repo(repo, find_links)
        lockfiles = run_pants(
            repo, ["generate-lockfiles"], local_store=tmp / "store", launcher=launcher
        ).check()
        package = run_pants(
            repo, ["package", f"{APP}:bundle"], local_store=tmp / "store", launcher=launcher
        ).check()
        rebuilt = {
            name: sha256(path) for name, path in built_wheels(checkout, "--no-local-cache").items()
        }
        for what, run in (("lockfiles", lockfiles), ("package", package)):
            print(f"{what}: {run.summary()}")
        yield FreshRepo(repo, wheels, lockfiles, package, rebuilt)
    finally:
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
    assert "Resolving plugins: gpu-build==0.1.0" in fresh.lockfiles.stderr
    default_lock = (fresh.repo / "3rdparty/python/default.lock").read_text()
    assert f"file://{fresh.wheels[RUNTIME_WHEEL]}" in default_lock
    assert (
        '"project_name": "numba-cuda"' in (fresh.repo / "3rdparty/python/cuda13.lock").read_text()
    )


def test_the_bundle_compiled_its_kernel_with_the_embedded_compiler(fresh: FreshRepo) -> None:
    # No gpu_compiler in the new repo and no `[gpu-toolchains].compiler`: the plugin's own.
    assert not list(fresh.repo.rglob("gpu_compiler"))
    processes = [(c.source, c.capabilities, c.toolchain) for c in fresh.package.logged_compiles()]
    assert processes == [(KERNEL, ("sm_80", "sm_90"), "cuda13")], fresh.package.stderr[-4000:]


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
    for minor, python in app_pythons().items():
        run = subprocess.run(
            [python, "app.pex", "--verify"],
            cwd=bundle,
            env=base_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
            timeout=300,
        )
        assert run.returncode == 0, (minor, run.stderr[-4000:])
        report = json.loads(run.stdout.strip().splitlines()[-1])
        assert report == {"kernels": ["saxpy.saxpy"], "files": sorted(manifest["files"])}, minor
