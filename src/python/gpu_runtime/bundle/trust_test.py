"""Signed bundles: refused unless signed by a trusted key; nothing loads from a refused one."""

from __future__ import annotations

import json
import os

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import gpu_runtime
from gpu_runtime.conftest import FakeBackend
from gpu_runtime.errors import UntrustedBundleError
from gpu_runtime_testutil.signing import (
    forget_pinned_module,
    pin_keys,
    public_hex,
    rehash_tampered_cubin,
    sign,
)
from gpu_spec.bundle_files import SIGNATURE_NAME
from gpu_spec.signature import PINNED_KEYS_ENV, PINNED_KEYS_FILE, TRUSTED_KEYS_ENV, key_id


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def pinned(key, monkeypatch, tmp_path) -> str:
    pin_keys(monkeypatch, tmp_path / "app_code", public_hex(key))
    monkeypatch.delenv(PINNED_KEYS_ENV, raising=False)
    monkeypatch.delenv(TRUSTED_KEYS_ENV, raising=False)
    return key_id(bytes.fromhex(public_hex(key)))


def test_signed_bundle_with_its_key_pinned_loads(bundle, key, pinned):
    sign(bundle, key)
    b = FakeBackend()
    gpu_runtime.open_cache(bundle, backend=b).kernel("saxpy").load()
    assert len(b.loads) == 1


def test_rehashed_tampering_is_refused_with_a_key_pinned(bundle, key, pinned):
    sign(bundle, key)
    rehash_tampered_cubin(bundle)
    b = FakeBackend()
    with pytest.raises(UntrustedBundleError) as e:
        gpu_runtime.open_cache(bundle, backend=b)
    assert "'imaging_h200'" in str(e.value) and pinned in str(e.value)
    assert "does not match its manifest" in str(e.value)
    assert b.loads == []


def test_unsigned_bundle_is_refused_with_a_key_pinned(bundle, pinned):
    with pytest.raises(UntrustedBundleError, match=f"is not signed.*{pinned}"):
        gpu_runtime.open_cache(bundle, backend=FakeBackend())


def test_bundle_signed_by_another_key_is_refused(bundle, pinned):
    other = Ed25519PrivateKey.generate()
    sign(bundle, other)
    other_id = key_id(bytes.fromhex(public_hex(other)))
    with pytest.raises(UntrustedBundleError) as e:
        gpu_runtime.open_cache(bundle, backend=FakeBackend())
    assert f"signed by key {other_id}, which this app does not trust" in str(e.value)
    assert pinned in str(e.value)


def test_a_forged_signature_file_is_refused(bundle, key, pinned):
    sign(bundle, key)
    with open(os.path.join(bundle, SIGNATURE_NAME), "rb") as f:
        doc = json.loads(f.read())
    doc["signature"] = "00" * 64
    with open(os.path.join(bundle, SIGNATURE_NAME), "w") as f:
        json.dump(doc, f)
    with pytest.raises(UntrustedBundleError, match="does not match its manifest"):
        gpu_runtime.open_cache(bundle, backend=FakeBackend())


def test_a_signature_path_that_is_no_file_is_refused_in_one_line(bundle, pinned):
    os.mkdir(os.path.join(bundle, SIGNATURE_NAME))
    with pytest.raises(UntrustedBundleError, match="cannot read its signature") as e:
        gpu_runtime.open_cache(bundle, backend=FakeBackend())
    assert "\n" not in str(e.value) and "is a directory, not a regular file" in str(e.value)


def test_device_trusted_keys_count_too(bundle, key, monkeypatch):
    monkeypatch.delenv(PINNED_KEYS_ENV, raising=False)
    monkeypatch.setenv(TRUSTED_KEYS_ENV, "00" * 32 + "," + public_hex(key))
    sign(bundle, key)
    gpu_runtime.open_cache(bundle, backend=FakeBackend()).kernel("saxpy").load()
    rehash_tampered_cubin(bundle)
    with pytest.raises(UntrustedBundleError):
        gpu_runtime.open_cache(bundle, backend=FakeBackend())


def test_without_trusted_keys_an_unsigned_bundle_runs_as_before(bundle, monkeypatch):
    monkeypatch.delenv(PINNED_KEYS_ENV, raising=False)
    monkeypatch.delenv(TRUSTED_KEYS_ENV, raising=False)
    gpu_runtime.open_cache(bundle, backend=FakeBackend()).kernel("saxpy").load()


def test_a_malformed_trusted_key_is_an_error(bundle, monkeypatch):
    monkeypatch.setenv(TRUSTED_KEYS_ENV, "not-a-key")
    with pytest.raises(UntrustedBundleError, match="not an ed25519 public key"):
        gpu_runtime.open_cache(bundle, backend=FakeBackend())


def test_cryptography_is_imported_only_to_check_a_signature(bundle, key):
    import subprocess
    import sys

    code = (
        "import sys, gpu_runtime; from gpu_runtime.conftest import FakeBackend; "
        f"gpu_runtime.open_cache({bundle!r}, backend=FakeBackend()); "
        "print('cryptography' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k not in (PINNED_KEYS_ENV, TRUSTED_KEYS_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)

    def imported(extra_env) -> str:
        return subprocess.run(
            [sys.executable, "-c", code],
            env={**env, **extra_env},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    assert imported({}) == "False"
    sign(bundle, key)
    assert imported({}) == "False"  # signed, but no key trusted: nothing to check
    assert imported({TRUSTED_KEYS_ENV: public_hex(key)}) == "True"


def test_the_environment_cannot_remove_or_replace_a_pinned_key(bundle, key, pinned, monkeypatch):
    other = Ed25519PrivateKey.generate()
    sign(bundle, other)  # signed by a key the app does not pin
    for value in ("", " ", ",", public_hex(other), public_hex(other).upper()):
        monkeypatch.setenv(PINNED_KEYS_ENV, value)
        with pytest.raises(UntrustedBundleError, match="which this app does not trust"):
            gpu_runtime.open_cache(bundle, backend=FakeBackend())
    monkeypatch.delenv(PINNED_KEYS_ENV)
    sign(bundle, key)
    rehash_tampered_cubin(bundle)
    for value in ("", public_hex(other)):
        monkeypatch.setenv(PINNED_KEYS_ENV, value)  # no spelling turns the check off
        monkeypatch.setenv(TRUSTED_KEYS_ENV, value)
        with pytest.raises(UntrustedBundleError, match="does not match its manifest"):
            gpu_runtime.open_cache(bundle, backend=FakeBackend())


def test_the_environment_adds_keys_beside_the_pinned_ones(bundle, pinned, monkeypatch):
    other = Ed25519PrivateKey.generate()
    sign(bundle, other)
    monkeypatch.setenv(TRUSTED_KEYS_ENV, public_hex(other))
    cache = gpu_runtime.open_cache(bundle, backend=FakeBackend())
    assert cache.kernel("saxpy") is not None
    from gpu_runtime.bundle.trust import trusted_keys

    assert [how for _, how in trusted_keys()] == ["pinned into the app", f"${TRUSTED_KEYS_ENV}"]


def test_a_malformed_pinned_keys_module_is_refused_in_one_line(bundle, monkeypatch, tmp_path):
    where = tmp_path / "app_code"
    where.mkdir()
    (where / PINNED_KEYS_FILE).write_text("PINNED_KEYS = ('nope',)\n")
    monkeypatch.syspath_prepend(str(where))
    forget_pinned_module(monkeypatch)
    with pytest.raises(UntrustedBundleError) as e:
        gpu_runtime.open_cache(bundle, backend=FakeBackend())
    assert "cannot read the keys pinned into this app" in str(e.value)
    assert "\n" not in str(e.value)
