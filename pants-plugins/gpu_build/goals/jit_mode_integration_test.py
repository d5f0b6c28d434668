"""Whole `./pants run` runs in a copy of the checkout, on a machine with no GPU:

- `pants run` of the example app's `pex_binary` (no bundle) reaches JIT mode, with no setting:
  the kernels it depends on are in its PEX, and it stops at a clear "no CUDA driver" error, not
  at "no cache found";
- `pants run` of a `deploy_bundle` runs the app from the packaged bundle (its PEX beside its
  `cache/`), strict, by an interpreter Pants resolves, and stops at the same driver error: the
  example H200 bundle (CPython 3.12 from the search path, whatever `python3.12` is on PATH) and
  a bundle for this machine's interpreters;
- `pants run` of the Orin bundle (aarch64, CPython 3.10) is refused in one line, before anything
  is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from gpu_build_testutil.pants_harness import (
    PantsRun,
    copy_checkout,
    has_cuda_driver,
    repo_root,
    run_pants,
    stop_pantsd,
)

APP = "src/python/imaging"
# A bundle for this machine's own interpreter (the example ones are for other platforms). Its
# PEX is pinned to the build machine's CPython 3.11, which the harness runs Pants with too:
# left to choose among 3.10-3.12, a PEX may pick a pyenv shim that cannot run.
LOCAL_BUNDLE = """

pex_binary(
    name="app_local",
    entry_point="app.py:main",
    execution_mode="venv",
    interpreter_constraints=["CPython==3.11.*"],
)

deploy_bundle(
    name="imaging_local",
    binary=":app_local",
    kernels=KERNELS,
    capabilities=["sm_90"],
    toolchain="cuda13",
    driver_version="13.0",
)
"""


pytestmark = pytest.mark.skipif(
    has_cuda_driver(), reason="this machine has a CUDA driver: the app would really run here"
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    repo = tmp_path_factory.mktemp("gpu_build_jit") / "repo"
    copy_checkout(repo_root(), repo)
    with open(repo / APP / "BUILD", "a") as build:
        build.write(LOCAL_BUNDLE)
    try:
        yield repo
    finally:
        stop_pantsd(repo)


def pants_run(repo: Path, target: str) -> PantsRun:
    """`pants run` of target. The module's runs share one pantsd (the repo does not change
    between them): one Pants start-up, not four."""
    run = run_pants(repo, ["run", target], local_store=None, pantsd=True)
    print(f"run {target}: {run.summary()}")
    return run


def test_pants_run_of_the_app_reaches_jit_mode(repo: Path) -> None:
    run = pants_run(repo, f"{APP}:app")
    assert run.returncode == 2, run.summary()
    assert "<KernelCache of JIT mode (8 kernel targets" in run.stdout
    assert "error: no CUDA driver: libcuda.so.1 cannot be loaded" in run.stderr
    assert "No GPU kernel cache found" not in run.stderr


def test_pants_run_of_a_bundle_runs_it_from_the_package(repo: Path) -> None:
    run = pants_run(repo, f"{APP}:imaging_local")
    assert run.returncode == 2, run.summary()
    assert "<KernelCache of bundle 'imaging_local'" in run.stdout
    assert "/imaging_local/cache" in run.stdout
    assert "JIT fallback" not in run.stdout  # strict: nothing the bundle lacks is compiled
    assert "error: no CUDA driver" in run.stderr


def test_pants_run_of_the_example_h200_bundle_resolves_its_cpython(repo: Path) -> None:
    run = pants_run(repo, f"{APP}:imaging_h200")
    assert run.returncode == 2, run.summary()
    assert "<KernelCache of bundle 'imaging_h200'" in run.stdout
    assert "error: no CUDA driver" in run.stderr


def test_pants_run_of_a_bundle_for_another_machine_is_refused(repo: Path) -> None:
    run = pants_run(repo, f"{APP}:imaging_orin")
    assert run.returncode != 0, run.summary()
    assert "built for aarch64 / CPython 3.10 (3rdparty/platforms/jetson_orin_cp310.json)" in (
        run.stderr
    ), run.summary()
    assert "Compile " not in run.stderr  # refused before anything was built
