"""Signing a bundle the way the deploy tool does, pinning keys the way the plugin does, and
tampering with a signed bundle the way an attacker can: for the trust tests and probes."""

from __future__ import annotations

import json
import os
import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gpu_runtime.bundle.integrity import sha256_bytes
from gpu_spec.bundle_files import SIGNATURE_NAME
from gpu_spec.manifest.model import MANIFEST_NAME
from gpu_spec.signature import (
    PINNED_KEYS_FILE,
    PINNED_KEYS_MODULE,
    Signature,
    key_id,
    pinned_keys_module_source,
)


def public_hex(key: Ed25519PrivateKey) -> str:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def sign(cache: str, key: Ed25519PrivateKey) -> None:
    with open(os.path.join(cache, MANIFEST_NAME), "rb") as f:
        raw = f.read()
    kid = key_id(bytes.fromhex(public_hex(key)))
    with open(os.path.join(cache, SIGNATURE_NAME), "wb") as f:
        f.write(Signature(kid, key.sign(raw)).dumps())


def pin_keys(monkeypatch, where, *keys: str) -> None:
    """Make `keys` the app's pinned keys: the module the plugin generates, on `sys.path`."""
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, PINNED_KEYS_FILE), "w") as f:
        f.write(pinned_keys_module_source(keys))
    monkeypatch.syspath_prepend(str(where))
    forget_pinned_module(monkeypatch)


def forget_pinned_module(monkeypatch) -> None:
    """Have the pinned-keys module imported afresh in this test, and forgotten after it."""
    sys.modules.pop(PINNED_KEYS_MODULE, None)
    monkeypatch.setitem(sys.modules, PINNED_KEYS_MODULE, None)  # undone by removing it
    del sys.modules[PINNED_KEYS_MODULE]


def rehash_tampered_cubin(cache: str) -> None:
    """What an attacker can do without the key: change a cubin and fix its sha256."""
    manifest_path = os.path.join(cache, MANIFEST_NAME)
    with open(manifest_path) as f:
        manifest = json.load(f)
    path = next(p for p in manifest["files"] if p.endswith(".cubin"))
    evil = b"// not the cubin that was built\n"
    with open(os.path.join(cache, *path.split("/")), "wb") as f:
        f.write(evil)
    manifest["files"][path] = sha256_bytes(evil)
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
