"""Is a bundle's manifest trusted? Checked on its exact bytes before anything is parsed or loaded.

The trusted keys are those pinned into the app at build time and those the device names
(`gpu_spec.signature`). With none, a bundle is used as before (its files still checked against
the manifest's sha256). With any, the manifest must carry a valid ed25519 signature by one of
them, or the bundle is refused, naming it and the key ids. `cryptography` is imported only to
check a signature, so an app with no key pinned never loads it.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Mapping, Optional, Sequence, Tuple

from gpu_runtime.errors import UntrustedBundleError
from gpu_spec.bundle_files import SIGNATURE_NAME
from gpu_spec.signature import (
    TRUSTED_KEYS_ENV,
    NotSignedError,
    SignatureFormatError,
    UntrustedKeyError,
    describe_keys,
    key_id,
    signature_policy,
    trusted_keys_from_env,
)

SIGN_FIX = (
    "sign it: set `[gpu-bundle-signing].key_file` (or PANTS_GPU_BUNDLE_SIGNING_KEY_FILE) to the "
    "private key of a trusted key and re-run `pants package`"
)


def bundle_name(raw: bytes, root: str) -> str:
    """The manifest's "bundle" (for messages only), read before the manifest is trusted."""
    try:
        name = json.loads(raw.decode("utf-8")).get("bundle")
    except (ValueError, UnicodeDecodeError, AttributeError):
        name = None
    return f"{name!r} ({root})" if isinstance(name, str) and name else repr(root)


def trusted_keys(
    environ: Optional[Mapping[str, str]] = None, extra: Iterable[Tuple[bytes, str]] = ()
) -> Tuple[Tuple[bytes, str], ...]:
    try:
        found = trusted_keys_from_env(os.environ if environ is None else environ)
    except SignatureFormatError as e:
        raise UntrustedBundleError(f"cannot read the trusted keys: {e}") from e
    keys = dict(found)
    for key, how in extra:
        keys.setdefault(key, how)
    return tuple(keys.items())


def _verify_ed25519(public_key: bytes, signature: bytes, data: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, data)
    except InvalidSignature:
        return False
    return True


def check_trust(raw: bytes, root: str, keys: Sequence[Tuple[bytes, str]]) -> str:
    """How the manifest bytes `raw` (of the cache directory `root`) are trusted, in words.

    Raises UntrustedBundleError when `keys` are trusted and no valid signature by one of them
    sits beside the manifest.
    """
    sig_path = os.path.join(root, SIGNATURE_NAME)
    try:
        with open(sig_path, "rb") as f:
            sig_raw: Optional[bytes] = f.read()
    except FileNotFoundError:
        sig_raw = None
    bundle = bundle_name(raw, root)
    trusted = [k for k, _ in keys]
    trusted_ids = f"{describe_keys(trusted)} ({'; '.join(sorted({h for _, h in keys}))})"
    try:
        sig, key = signature_policy(sig_raw, sig_path, trusted)
    except NotSignedError as e:
        raise UntrustedBundleError(
            f"bundle {bundle} is not signed ({SIGNATURE_NAME} is missing), and this app trusts "
            f"only bundles signed by key {trusted_ids}: refusing to load it; {SIGN_FIX}"
        ) from e
    except SignatureFormatError as e:
        raise UntrustedBundleError(f"bundle {bundle}: {e}; refusing to load it") from e
    except UntrustedKeyError as e:
        kid = e.signature.key_id
        raise UntrustedBundleError(
            f"bundle {bundle} is signed by key {kid}, which this app does not trust "
            f"(trusted: {trusted_ids}): refusing to load it; {SIGN_FIX}, or trust key "
            f"{kid} in ${TRUSTED_KEYS_ENV}"
        ) from e
    if sig is None:
        return f"unsigned (no trusted keys: set ${TRUSTED_KEYS_ENV} to require a signature)"
    if key is None:
        return f"signed by key {sig.key_id}, not checked (no trusted keys: ${TRUSTED_KEYS_ENV})"
    if not _verify_ed25519(key, sig.signature, raw):
        raise UntrustedBundleError(
            f"bundle {bundle}: the signature by key {key_id(key)} does not match its manifest "
            f"(the manifest was changed after it was signed): refusing to load it; re-run "
            f"`pants package` and copy the whole bundle"
        )
    return f"signed by trusted key {sig.key_id} ({dict(keys)[key]})"
