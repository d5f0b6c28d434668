from __future__ import annotations

import os

import pytest

import gpu_runtime
from gpu_runtime.bundle.locate import find_cache
from gpu_runtime.conftest import FakeBackend
from gpu_runtime.errors import CacheNotFoundError


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("GPU_RUNTIME_CACHE", "PEX", "GPU_RUNTIME_STRICT", "GPU_RUNTIME_PREFER"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_no_cache_found_returns_none(tmp_path, clean_env):
    assert find_cache(environ={}, argv0=str(tmp_path / "app.py")) is None


def test_open_cache_without_cache_is_a_clear_error(tmp_path, clean_env):
    clean_env.setattr("sys.argv", [str(tmp_path / "app.pex")])
    clean_env.setenv("PEX", str(tmp_path / "app.pex"))
    with pytest.raises(CacheNotFoundError) as e:
        gpu_runtime.open_cache(backend=FakeBackend())
    msg = str(e.value)
    assert "No GPU kernel cache found" in msg
    assert str(tmp_path / "cache") in msg and "($PEX)" in msg
    assert "$GPU_RUNTIME_CACHE" in msg and "depend on its gpu_kernel targets" in msg
    assert "export-codegen" in msg


def test_strict_without_a_bundle_says_jit_is_off(tmp_path, clean_env):
    clean_env.setattr("sys.argv", [str(tmp_path / "app.pex")])
    with pytest.raises(CacheNotFoundError, match="strict mode"):
        gpu_runtime.open_cache(backend=FakeBackend(), strict=True)


def test_found_beside_the_pex(bundle, clean_env):
    dist = os.path.dirname(bundle)
    env = {"PEX": os.path.join(dist, "app.pex")}
    assert find_cache(environ=env, argv0="/somewhere/else.py") == bundle


def test_found_beside_argv0(bundle, clean_env):
    dist = os.path.dirname(bundle)
    assert find_cache(environ={}, argv0=os.path.join(dist, "app.pex")) == bundle
    assert find_cache(environ={}, argv0="-c") is None


def test_pex_takes_precedence_over_argv0(tmp_path, bundle):
    from gpu_runtime.conftest import library_specs, write_bundle

    other = write_bundle(str(tmp_path / "other"), library_specs(["saxpy"]))
    env = {"PEX": os.path.join(os.path.dirname(bundle), "app.pex")}
    assert find_cache(environ=env, argv0=os.path.join(os.path.dirname(other), "x.py")) == bundle


def test_env_var_points_elsewhere(bundle, tmp_path):
    env = {"GPU_RUNTIME_CACHE": bundle, "PEX": str(tmp_path / "nothing" / "app.pex")}
    assert find_cache(environ=env, argv0="") == bundle
    env = {"GPU_RUNTIME_CACHE": os.path.join(bundle, "manifest.json")}
    assert find_cache(environ=env) == bundle


def test_env_var_without_manifest_is_an_error_not_a_fallback(bundle, tmp_path):
    env = {
        "GPU_RUNTIME_CACHE": str(tmp_path / "empty"),
        "PEX": os.path.join(os.path.dirname(bundle), "app.pex"),
    }
    with pytest.raises(
        CacheNotFoundError,
        match=r"no manifest.json in .*empty \(given as the \$GPU_RUNTIME_CACHE\)",
    ):
        find_cache(environ=env)


def test_path_argument_wins(bundle, clean_env, tmp_path):
    clean_env.setenv("GPU_RUNTIME_CACHE", str(tmp_path / "nope"))
    cache = gpu_runtime.open_cache(bundle, backend=FakeBackend())
    assert cache.root == bundle
    with pytest.raises(CacheNotFoundError, match="path argument"):
        gpu_runtime.open_cache(str(tmp_path), backend=FakeBackend())


def test_open_cache_reads_env(bundle, clean_env):
    clean_env.setenv("GPU_RUNTIME_CACHE", bundle)
    cache = gpu_runtime.open_cache(backend=FakeBackend())
    assert cache.manifest.bundle == "imaging_h200"
    assert "saxpy.saxpy" in cache.kernel_names()
