"""Whole `./pants package` runs of the example device bundles, in a copy of the checkout.

- The H200 bundle's PEX holds no compiler and no numba (no numba, llvmlite, NVVM, NVRTC,
  nvJitLink wheels or libraries), only cuda-core, cuda-bindings, numpy for cp312 x86_64.
- The Jetson bundle's PEX carries aarch64 / cp310 wheels, and its kernels are sm_87, built by the
  CUDA 12.6 toolchain, PTX ISA <= 8.5.
- Two packages from empty local stores give byte-identical bundles (directory and .tar.gz), and
  a second package leaves no stale file behind.
- A CUDA 13 build for a CUDA 12.6 driver is refused, naming the bundle, the kernel and the fix.
- Each bundle compiles each kernel source in one process per toolchain, for the kernel target's
  whole capability list (the processes `pants package` on the kernels runs), though it ships one.
- The H200 bundle's launcher (`app`) records pex's venv of its PEX on the first run, starts the
  app from it after, and refuses a PEX that is not the one it was built with (CPython 3.12 of
  this machine, no GPU).

The refused bundle is in the BUILD file from the start (the two packages name their targets, so
it changes nothing of theirs), so that the repo does not change between the second package and
the refused one: those two share one pantsd (its first run, from the empty store, builds
everything; the refused one then needs no Pants start-up of its own).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from gpu_build.util_rules.bundle_launcher import TAMPERED_EXIT
from gpu_build_testutil.pants_harness import (
    PantsRun,
    base_env,
    copy_checkout,
    find_cpython,
    repo_root,
    run_pants,
    stop_pantsd,
    tree_digests,
)

APP = "src/python/imaging"
KERNEL_SOURCES = ("saxpy.py", "blur.py", "histogram.py", "sobel.cu", "matmul.cu")
KERNEL_CAPABILITIES = ("sm_75", "sm_80", "sm_87", "sm_90")  # src/python/imaging/kernels/BUILD
# A CUDA 13 build for a CUDA 12.6 driver: refused (see its test).
REFUSED_BUNDLE = """
deploy_bundle(
    name="orin_with_cuda13",
    binary=":app",
    kernels=["src/python/imaging/kernels:saxpy"],
    capabilities=["sm_87"],
    toolchain="cuda13",
    driver_version="12.6",
)
"""


def pex_wheels(pex: Path) -> list[str]:
    with zipfile.ZipFile(pex) as zf:
        return sorted(
            {
                name.split("/")[1]
                for name in zf.namelist()
                if name.startswith(".deps/") and name.split("/")[1]
            }
        )


@dataclass(frozen=True)
class Bundles:
    repo: Path
    first: dict[str, dict[str, str]]
    second: dict[str, dict[str, str]]
    run: PantsRun
    store: Path


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bundles]:
    tmp = tmp_path_factory.mktemp("gpu_build_bundles")
    repo = tmp / "repo"
    try:
        copy_checkout(repo_root(), repo)
        with open(repo / APP / "BUILD", "a") as build:
            build.write(REFUSED_BUNDLE)
        specs = (f"{APP}:imaging_h200", f"{APP}:imaging_orin")
        run = run_pants(repo, ["package", *specs], local_store=tmp / "store1").check()
        print(f"first package: {run.summary()}")
        dist = repo / "dist"
        first = {name: tree_digests(dist / name) for name in ("imaging_h200", "imaging_orin")}
        first["archives"] = {
            a: hashlib.sha256((dist / a).read_bytes()).hexdigest()
            for a in ("imaging_h200.tar.gz", "imaging_orin.tar.gz")
        }
        # A stale file from "an earlier package" must not survive the next one.
        (dist / "imaging_h200" / "cache" / "stale.cubin").write_bytes(b"old")
        # dist/ is not watched by Pants: the stale file does not stop the second run sharing its
        # pantsd with the refused one.
        again = run_pants(repo, ["package", *specs], local_store=tmp / "store2", pantsd=True)
        print(f"second package: {again.check().summary()}")
        second = {name: tree_digests(dist / name) for name in ("imaging_h200", "imaging_orin")}
        second["archives"] = {
            a: hashlib.sha256((dist / a).read_bytes()).hexdigest()
            for a in ("imaging_h200.tar.gz", "imaging_orin.tar.gz")
        }
        yield Bundles(repo, first, second, run, tmp / "store2")
    finally:
        stop_pantsd(repo)
        # Each local store holds a copy of the toolchain PEXes (hundreds of MiB).
        shutil.rmtree(tmp, ignore_errors=True)


def test_bundles_are_reproducible_and_clean(bundles: Bundles) -> None:
    assert bundles.first == bundles.second
    assert "cache/stale.cubin" not in bundles.second["imaging_h200"]


def test_one_process_per_source_and_toolchain(bundles: Bundles) -> None:
    processes = sorted(
        (c.source, c.capabilities, c.toolchain) for c in bundles.run.logged_compiles()
    )
    assert processes == sorted(
        (f"{APP}/kernels/{source}", KERNEL_CAPABILITIES, toolchain)
        for source in KERNEL_SOURCES
        for toolchain in ("cuda12", "cuda13")
    ), bundles.run.stderr[-4000:]


def test_h200_bundle_has_no_compiler(bundles: Bundles) -> None:
    bundle = bundles.repo / "dist" / "imaging_h200"
    wheels = pex_wheels(bundle / "app.pex")
    # The runtime talks to the driver through cuda.bindings alone: no cuda.core in the app.
    projects = [w.split("-")[0] for w in wheels]
    # cryptography (+ cffi, pycparser): the signature check, imported only with a key pinned.
    assert projects == [
        "cffi",
        "cryptography",
        "cuda_bindings",
        "cuda_pathfinder",
        "numpy",
        "pycparser",
    ], wheels
    assert all(
        (("cp312" in w or "-abi3-" in w) and "x86_64" in w) or w.endswith("py3-none-any.whl")
        for w in wheels
    ), wheels
    with zipfile.ZipFile(bundle / "app.pex") as zf:
        names = zf.namelist()
    top_level = {n.split("/")[2] for n in names if n.startswith(".deps/") and n.count("/") >= 3}
    assert not top_level & {"numba", "numba_cuda", "llvmlite", "nvidia"}, sorted(top_level)
    assert not [n for n in names if re.search(r"lib(nvrtc|nvvm|nvJitLink)", n)]
    # No compiler code rides along; the shared rules do.
    assert not [n for n in names if n.startswith("gpu_compiler/")]
    # [gpu-bundle].strip_wheel_files (default): no Cython sources or generated C/C++ in wheels,
    # the wheels' own code kept (the launcher test below runs this PEX)
    assert not [n for n in names if n.startswith(".deps/") and n.endswith((".pyx", ".pxd", ".cpp"))]
    assert [
        n for n in names if n.startswith(".deps/cuda_bindings") and "bindings/driver.cpython" in n
    ]
    assert "gpu_spec/compatibility.py" in names
    manifest = json.loads((bundle / "cache" / "manifest.json").read_text())
    assert manifest["capabilities"] == ["sm_90"] and manifest["driver"] == "13.0"
    assert {lib["name"] for lib in manifest["libraries"]} == {
        "saxpy",
        "blur",
        "histogram",
        "sobel",
        "matmul",
    }
    for rel, sha in manifest["files"].items():
        assert hashlib.sha256((bundle / "cache" / rel).read_bytes()).hexdigest() == sha
    app_sha = hashlib.sha256((bundle / "app.pex").read_bytes()).hexdigest()
    launcher_sha = hashlib.sha256((bundle / "app").read_bytes()).hexdigest()
    assert manifest["bundle_files"] == {"app.pex": app_sha, "app": launcher_sha}


def test_h200_launcher_runs_the_app_from_a_venv_made_once(bundles: Bundles, tmp_path: Path) -> None:
    python = find_cpython("3.12")
    if python is None:
        pytest.skip("no CPython 3.12 here to run the H200 bundle's cp312 PEX with")
    bundle = tmp_path / "imaging_h200"
    shutil.copytree(bundles.repo / "dist" / "imaging_h200", bundle, symlinks=True)
    venvs = tmp_path / "venvs"
    env = dict(base_env(), GPU_BUNDLE_PYTHON=python, GPU_BUNDLE_VENVS=str(venvs))
    env["PEX_ROOT"] = str(tmp_path / "pex_root")
    probe = "import os, sys; print(sys.prefix); print(os.environ['PEX'])"

    def launch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(bundle / "app"), *args],
            env=dict(env, PEX_INTERPRETER="1"),
            capture_output=True,
            text=True,
        )

    app_sha = hashlib.sha256((bundle / "app.pex").read_bytes()).hexdigest()
    for _ in range(2):  # recorded by the first run, used as it is by the second
        run = launch("-c", probe)
        assert run.returncode == 0, run.stderr
        link = venvs / app_sha
        assert link.is_symlink() and str(link.resolve()).startswith(str(tmp_path / "pex_root"))
        assert run.stdout.split() == [str(link), str(bundle / "app.pex")]  # started through it
    assert sorted(p.name for p in venvs.iterdir()) == [app_sha]  # no temporary link left
    usage = subprocess.run([str(bundle / "app"), "--help"], env=env, capture_output=True, text=True)
    assert usage.returncode == 0 and "--self-test" in usage.stdout, usage.stderr

    shutil.rmtree(venvs)
    with open(bundle / "app.pex", "ab") as f:
        f.write(b"\0")  # not the PEX this launcher was built with
    run = launch("-c", probe)
    assert run.returncode == TAMPERED_EXIT and "damaged or was altered" in run.stderr, run.stderr
    assert not venvs.exists() or not any(venvs.iterdir())


def test_jetson_bundle_targets_aarch64_cp310_and_cuda_12_6(bundles: Bundles) -> None:
    bundle = bundles.repo / "dist" / "imaging_orin"
    wheels = pex_wheels(bundle / "app.pex")
    platform_wheels = [w for w in wheels if not w.endswith("-none-any.whl")]
    assert platform_wheels and all(
        ("cp310" in w or "-abi3-" in w) and "aarch64" in w for w in platform_wheels
    ), wheels
    manifest = json.loads((bundle / "cache" / "manifest.json").read_text())
    assert manifest["capabilities"] == ["sm_87"] and manifest["driver"] == "12.6"
    assert manifest["toolchains"]["cuda12"]["cuda"] == "12.6"
    assert manifest["toolchains"]["cuda12"]["nvrtc"].startswith("12.6")
    for ptx in (bundle / "cache").rglob("*.ptx"):
        version = re.search(r"^\.version (\d+)\.(\d+)", ptx.read_text(), re.MULTILINE)
        assert version and (int(version.group(1)), int(version.group(2))) <= (8, 5), ptx
        assert ".target sm_87" in ptx.read_text()


def test_cuda13_build_for_a_cuda_12_6_driver_is_refused(bundles: Bundles) -> None:
    run = run_pants(
        bundles.repo, ["package", f"{APP}:orin_with_cuda13"], local_store=bundles.store, pantsd=True
    )
    assert run.returncode != 0
    message = " ".join(run.stderr.split())
    assert f"The deploy_bundle {APP}:orin_with_cuda13 targets a CUDA 12.6 driver" in message
    # The first of the bundle's kernels in address order: the binary depends on all five
    # (for JIT mode), and a bundle ships the kernels its binary depends on too.
    assert "src/python/imaging/kernels:blur" in message
    assert (
        "cubins built by CUDA 13.0" in message
        and "PTX ISA 9.0, which needs a CUDA 13.0 driver" in message
    )
    assert "Fix: set the bundle's `toolchain`" in message
    assert not (bundles.repo / "dist" / "orin_with_cuda13").exists()
