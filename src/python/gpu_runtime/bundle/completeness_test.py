"""A bundle with files missing in bulk is called incomplete, never given capability advice."""

from __future__ import annotations

import glob
import os

import pytest

import gpu_runtime
from gpu_runtime.conftest import FakeBackend
from gpu_runtime.errors import IncompleteBundleError


def kernel_files(cache: str) -> list:
    return sorted(
        p
        for p in glob.glob(os.path.join(cache, "**", "*.*"), recursive=True)
        if p.endswith((".ptx", ".cubin"))
    )


def test_a_bundle_with_no_kernel_files_is_incomplete_when_opened(bundle):
    files = kernel_files(bundle)
    for path in files:
        os.remove(path)
    with pytest.raises(IncompleteBundleError) as e:
        gpu_runtime.open_cache(bundle, backend=FakeBackend())
    message = str(e.value)
    assert f"{len(files)} of {len(files)} files missing: re-run `pants package`" in message
    assert "'imaging_h200'" in message and "capabilit" not in message


def test_a_module_without_any_of_its_files_is_incomplete(bundle):
    for path in glob.glob(os.path.join(bundle, "sobel", "cuda13", "sm_80", "*")):
        os.remove(path)
    with pytest.raises(IncompleteBundleError, match="2 of 24 files missing"):
        gpu_runtime.open_cache(bundle, backend=FakeBackend())


def test_when_nothing_fits_and_files_are_missing_no_capability_advice(bundle):
    # The sm_90 cubin gone, its PTX kept: every module keeps a file, so the bundle opens; with
    # cubins only, nothing runs on sm_90: the missing file, not a capability, is the problem.
    os.remove(os.path.join(bundle, "saxpy", "cuda13", "sm_90", "saxpy__0.cubin"))
    cache = gpu_runtime.open_cache(bundle, backend=FakeBackend(capability=(9, 0)), prefer="cubin")
    with pytest.raises(IncompleteBundleError) as e:
        cache.kernel("saxpy").load()
    assert "1 of 24 files missing: re-run `pants package`" in str(e.value)
    assert "capabilit" not in str(e.value)


def test_a_removed_cubin_with_its_ptx_left_still_runs(bundle):
    os.remove(os.path.join(bundle, "saxpy", "cuda13", "sm_90", "saxpy__0.cubin"))
    b = FakeBackend(capability=(9, 0))
    gpu_runtime.open_cache(bundle, backend=b).kernel("saxpy").load()
    assert [kind for kind, _, _ in b.loads] == ["ptx"]


def test_a_real_capability_problem_keeps_its_advice_with_files_missing(bundle):
    from gpu_runtime.errors import NoCompatibleVariantError

    os.remove(os.path.join(bundle, "saxpy", "cuda13", "sm_90", "saxpy__0.ptx"))
    cache = gpu_runtime.open_cache(bundle, backend=FakeBackend(capability=(10, 0)), prefer="cubin")
    with pytest.raises(NoCompatibleVariantError, match='add "sm_100"'):
        cache.kernel("saxpy").load()  # sm_100: no cubin of the bundle could run, missing or not


def test_a_listed_capability_without_its_code_is_incomplete_not_add_it(tmp_path):
    """The manifest lists sm_90, but the sm_90 variants were cut out of it (edited, truncated):
    telling the user to add sm_90 would be wrong. (cubin only: sm_80's PTX would run here.)"""
    import json

    from gpu_runtime.conftest import library_specs, write_bundle

    root = write_bundle(str(tmp_path), library_specs(["saxpy"]))
    path = os.path.join(root, "manifest.json")
    with open(path) as f:
        data = json.load(f)
    assert "sm_90" in data["capabilities"]
    for lib in data["libraries"]:
        lib["variants"] = [v for v in lib["variants"] if v["capability"] != "sm_90"]
    data["files"] = {k: v for k, v in data["files"].items() if "/sm_90/" not in k}
    with open(path, "w") as f:
        json.dump(data, f)
    cache = gpu_runtime.open_cache(root, backend=FakeBackend(capability=(9, 0)), prefer="cubin")
    with pytest.raises(IncompleteBundleError, match="lists sm_90 among its capabilities") as e:
        cache.kernel("saxpy").load()
    assert "add" not in str(e.value)
