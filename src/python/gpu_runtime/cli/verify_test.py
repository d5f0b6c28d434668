"""``python -m gpu_runtime verify``: every file (app.pex included) and the signature."""

from __future__ import annotations

import json
import os

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gpu_runtime.bundle.integrity import sha256_bytes
from gpu_runtime.cli.commands import main
from gpu_runtime.cli.verify import NOT_VERIFIED
from gpu_runtime_testutil.signing import public_hex, rehash_tampered_cubin, sign
from gpu_spec.manifest.model import MANIFEST_NAME
from gpu_spec.signature import PINNED_KEYS_ENV, TRUSTED_KEYS_ENV

APP = b"PK fake app.pex bytes\n"


@pytest.fixture
def bundle_dir(bundle, monkeypatch) -> str:
    """The `bundle` fixture's cache/ plus an app.pex beside it, listed in "bundle_files"."""
    monkeypatch.delenv(PINNED_KEYS_ENV, raising=False)
    monkeypatch.delenv(TRUSTED_KEYS_ENV, raising=False)
    root = os.path.dirname(bundle)
    with open(os.path.join(root, "app.pex"), "wb") as f:
        f.write(APP)
    path = os.path.join(bundle, MANIFEST_NAME)
    with open(path) as f:
        manifest = json.load(f)
    manifest["bundle_files"] = {"app.pex": sha256_bytes(APP)}
    with open(path, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    return root


def test_a_whole_bundle_verifies(bundle_dir, capsys):
    assert main(["verify", bundle_dir]) == 0
    out = capsys.readouterr().out
    assert "OK: bundle 'imaging_h200'" in out and "25 files match" in out and "unsigned" in out


def test_the_cache_dir_may_be_given_instead(bundle_dir):
    assert main(["verify", os.path.join(bundle_dir, "cache")]) == 0


def test_a_changed_app_pex_is_refused(bundle_dir, capsys):
    with open(os.path.join(bundle_dir, "app.pex"), "ab") as f:
        f.write(b"injected code")
    assert main(["verify", bundle_dir]) == 1
    out = capsys.readouterr().out
    assert "changed: app.pex" in out and "REFUSED" in out and "1 of 25 files" in out


def test_a_bundle_missing_files_is_incomplete(bundle_dir, capsys):
    os.remove(os.path.join(bundle_dir, "app.pex"))
    os.remove(os.path.join(bundle_dir, "cache", "saxpy", "cuda13", "sm_90", "saxpy__0.ptx"))
    assert main(["verify", bundle_dir]) == 1
    assert "2 of 25 files missing: re-run `pants package`" in capsys.readouterr().out


def test_signature_checked_with_a_key_given(bundle_dir, capsys):
    key = Ed25519PrivateKey.generate()
    sign(os.path.join(bundle_dir, "cache"), key)
    assert main(["verify", bundle_dir, "--key", public_hex(key)]) == 0
    assert "signed by trusted key" in capsys.readouterr().out
    rehash_tampered_cubin(os.path.join(bundle_dir, "cache"))
    capsys.readouterr()
    assert main(["verify", bundle_dir]) == NOT_VERIFIED  # no key trusted: signature unchecked
    out = capsys.readouterr().out
    assert "OK" not in out and out.startswith("NOT VERIFIED: bundle 'imaging_h200'")
    assert "no key is trusted here" in out and "pass --key" in out
    assert main(["verify", bundle_dir, "--key", public_hex(key)]) == 1
    assert "does not match its manifest" in capsys.readouterr().out


def test_a_signed_bundle_is_not_verified_without_a_key_even_when_intact(bundle_dir, capsys):
    sign(os.path.join(bundle_dir, "cache"), Ed25519PrivateKey.generate())
    assert main(["verify", bundle_dir]) == NOT_VERIFIED
    assert "NOT VERIFIED" in capsys.readouterr().out


def test_a_file_symlinked_out_of_the_bundle_is_refused(bundle_dir, tmp_path, capsys):
    outside = tmp_path / "outside.pex"
    outside.write_bytes(APP)  # the very bytes the manifest lists
    os.remove(os.path.join(bundle_dir, "app.pex"))
    os.symlink(outside, os.path.join(bundle_dir, "app.pex"))
    assert main(["verify", bundle_dir]) == 1
    out = capsys.readouterr().out
    assert f"refused: app.pex in bundle {bundle_dir} is a symlink to {outside}" in out
    assert "outside the bundle directory" in out and "changed: " not in out


def test_a_packed_app_with_a_file_added_is_refused(bundle_dir, capsys):
    """A packed app.pex/ holds only its listed files (and the bytecode Python writes for them)."""
    app = os.path.join(bundle_dir, "app.pex")
    os.remove(app)
    os.makedirs(os.path.join(app, "__pycache__"))
    with open(os.path.join(app, "__main__.py"), "wb") as f:
        f.write(APP)
    with open(os.path.join(app, "__pycache__", "__main__.cpython-312.pyc"), "wb") as f:
        f.write(b"bytecode")
    path = os.path.join(bundle_dir, "cache", MANIFEST_NAME)
    with open(path) as f:
        manifest = json.load(f)
    manifest["bundle_files"] = {"app.pex/__main__.py": sha256_bytes(APP)}
    with open(path, "w") as f:
        json.dump(manifest, f)
    assert main(["verify", bundle_dir]) == 0
    capsys.readouterr()
    with open(os.path.join(app, "zzz.pth"), "w") as f:
        f.write("import os\n")
    assert main(["verify", bundle_dir]) == 1
    out = capsys.readouterr().out
    assert "refused: app.pex/zzz.pth in bundle" in out and "is not one of the app's files" in out
    assert "remove app.pex/zzz.pth" in out and out.splitlines()[-1].startswith("REFUSED")


def test_an_ok_bundle_lists_each_kernel_variants_resources_after_the_ok_line(bundle_dir, capsys):
    assert main(["verify", bundle_dir]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("OK: bundle 'imaging_h200'")
    kernels = lines[1:]
    assert kernels and all(line.startswith("kernel ") for line in kernels)
    assert (
        "kernel saxpy.saxpy sm_90 (cuda13): registers 12, spills 0/0 B (stores/loads), shared "
        "0 B, local 0 B, const 0 B; occupancy 100% at 64 threads per block (32 blocks, limited "
        "by warps)"
    ) in kernels
