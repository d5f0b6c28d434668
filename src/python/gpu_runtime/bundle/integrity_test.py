from __future__ import annotations

import hashlib
import json
import os

import pytest

import gpu_runtime
from gpu_runtime.bundle.integrity import read_verified, resolve_in_cache
from gpu_runtime.conftest import FakeBackend, FakeDeviceArray, manifest_json
from gpu_runtime.errors import IntegrityError, ManifestError

SAXPY_CUBIN = "saxpy/cuda13/sm_90/saxpy__0.cubin"


def _files(cache):
    return manifest_json(cache)["files"]


def test_good_file_reads(bundle):
    data = read_verified(bundle, SAXPY_CUBIN, _files(bundle))
    assert data.startswith(b"// fake cubin of saxpy/saxpy__0 for sm_90")


def test_tampered_file_is_refused(bundle):
    with open(os.path.join(bundle, SAXPY_CUBIN), "ab") as f:
        f.write(b"\x90")
    with pytest.raises(IntegrityError) as e:
        read_verified(bundle, SAXPY_CUBIN, _files(bundle))
    msg = str(e.value)
    assert (
        "does not match the manifest" in msg and SAXPY_CUBIN in msg and "Refusing to load it" in msg
    )


def test_missing_file_is_refused(bundle):
    os.remove(os.path.join(bundle, SAXPY_CUBIN))
    with pytest.raises(
        IntegrityError, match="missing cache file saxpy/cuda13/sm_90/saxpy__0.cubin"
    ):
        read_verified(bundle, SAXPY_CUBIN, _files(bundle))


def test_unlisted_file_is_refused(bundle):
    with pytest.raises(IntegrityError, match="not listed"):
        read_verified(bundle, "saxpy/cuda13/sm_90/other.cubin", _files(bundle))


@pytest.mark.parametrize(
    "path, why",
    [
        ("../x", "contains '..'"),
        ("saxpy/../../x", "contains '..'"),
        ("/etc/passwd", "is absolute"),
        ("saxpy//x", "empty"),
        ("saxpy\\x", "backslash"),
    ],
)
def test_path_escapes_are_refused(bundle, path, why):
    with pytest.raises(IntegrityError, match=why):
        resolve_in_cache(bundle, path)
    with pytest.raises(IntegrityError):
        read_verified(bundle, path, {path: "0" * 64})


def test_symlinked_file_escaping_cache_is_refused(bundle, tmp_path):
    outside = tmp_path / "outside.cubin"
    outside.write_bytes(b"evil")
    link = os.path.join(bundle, "saxpy", "cuda13", "sm_90", "evil.cubin")
    os.symlink(str(outside), link)
    with pytest.raises(IntegrityError, match="outside the cache directory .*symlink escape"):
        read_verified(
            bundle,
            "saxpy/cuda13/sm_90/evil.cubin",
            {"saxpy/cuda13/sm_90/evil.cubin": hashlib.sha256(b"evil").hexdigest()},
        )


def test_symlinked_directory_escaping_cache_is_refused(bundle, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "k.ptx").write_bytes(b"x")
    os.symlink(str(tmp_path / "elsewhere"), os.path.join(bundle, "linked"))
    with pytest.raises(IntegrityError, match="symlink escape"):
        resolve_in_cache(bundle, "linked/k.ptx")


def test_symlink_inside_cache_is_fine(bundle):
    os.symlink("saxpy__0.cubin", os.path.join(bundle, "saxpy", "cuda13", "sm_90", "alias.cubin"))
    files = dict(_files(bundle))
    files["saxpy/cuda13/sm_90/alias.cubin"] = files[SAXPY_CUBIN]
    assert read_verified(bundle, "saxpy/cuda13/sm_90/alias.cubin", files)


def test_cache_root_itself_may_be_a_symlink(bundle, tmp_path):
    link = tmp_path / "cache-link"
    os.symlink(bundle, str(link))
    assert read_verified(str(link), SAXPY_CUBIN, _files(bundle))


# --- the same failures through the public API: refused at load time, nothing loaded ------


def _launch_saxpy(cache):
    x = FakeDeviceArray((4,), "float32")
    cache.kernel("saxpy").launch(1, 32, x, 2.0, x, x)


def test_tampered_cubin_is_not_loaded(bundle):
    with open(os.path.join(bundle, SAXPY_CUBIN), "wb") as f:
        f.write(b"\x7fELF tampered")
    backend = FakeBackend()
    cache = gpu_runtime.open_cache(bundle, backend=backend)
    with pytest.raises(IntegrityError, match="does not match the manifest"):
        _launch_saxpy(cache)
    assert backend.loads == [] and backend.launches == []


def test_escaping_manifest_path_is_refused_when_opening(bundle):
    data = manifest_json(bundle)
    old = data["libraries"][2]["variants"][1]["modules"][0]["cubin"]
    data["files"]["../../escape.cubin"] = data["files"].pop(old)
    data["libraries"][2]["variants"][1]["modules"][0]["cubin"] = "../../escape.cubin"
    with open(os.path.join(bundle, "manifest.json"), "w") as f:
        json.dump(data, f)
    with pytest.raises(ManifestError, match="contains '..'"):
        gpu_runtime.open_cache(bundle, backend=FakeBackend())


def test_verify_checks_everything_without_a_gpu(bundle):
    cache = gpu_runtime.open_cache(bundle, backend=FakeBackend())
    assert len(cache.verify(all_variants=True)) == len(_files(bundle))
    os.remove(os.path.join(bundle, "sobel", "cuda13", "sm_80", "sobel.ptx"))
    with pytest.raises(IntegrityError, match="missing cache file sobel/cuda13/sm_80/sobel.ptx"):
        cache.verify(all_variants=True)
    assert len(cache.verify()) == 6  # what this (fake sm_90) device would load is intact
