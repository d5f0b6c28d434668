"""Is a bundle's manifest trusted? Checked on its exact bytes before anything is parsed or loaded.

The trusted keys are those pinned into the app at build time (read from the module the plugin
generates into the app's code, `gpu_spec.signature.PINNED_KEYS_MODULE`) and those the device
adds (`$GPU_RUNTIME_TRUSTED_KEYS`); the environment cannot remove or replace a pinned key. With
none, a bundle is used as before (its files still checked against the manifest's sha256). With
any, the manifest must carry a valid ed25519 signature by one of them, or the bundle is refused,
naming it and the key ids. `cryptography` is imported only to check a signature, so an app with
no key pinned never loads it.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence, Tuple

from gpu_runtime.errors import UntrustedBundleError
from gpu_runtime.logs import log
from gpu_spec.bundle_files import SIGNATURE_NAME
from gpu_spec.ed25519 import verify as verify_ed25519
from gpu_spec.safe_read import MAX_SIGNATURE_BYTES, FileReadError, loads_json, read_regular_file
from gpu_spec.signature import (
    PINNED_KEYS_ENV,
    PINNED_KEYS_MODULE,
    SIGN_FIX,
    TRUSTED_KEYS_ENV,
    NotSignedError,
    SignatureFormatError,
    UntrustedKeyError,
    describe_keys,
    key_id,
    not_signed_reason,
    pinned_keys_of,
    signature_policy,
    trusted_keys_from_env,
    untrusted_key_reason,
)


def bundle_name(raw: bytes, root: str) -> str:
    """The manifest's "bundle" (for messages only), read before the manifest is trusted."""
    try:  # nesting checked first: this runs on bytes not yet parsed (or trusted)
        name = loads_json(raw, "manifest").get("bundle")
    except (ValueError, UnicodeDecodeError, AttributeError):
        name = None
    return f"{name!r} ({root})" if isinstance(name, str) and name else repr(root)


@dataclass(frozen=True)
class Trust:
    """How a bundle's manifest is trusted: `status` is "unsigned" (no signature, no key trusted),
    "unchecked" (signed, but no key trusted here: the signature was not checked) or "trusted"
    (a valid signature by `key_id`, a trusted key). `str()` says it in words."""

    status: str
    text: str
    key_id: Optional[str] = None

    @property
    def trusted(self) -> bool:
        return self.status == "trusted"

    def __str__(self) -> str:
        return self.text


def pinned_keys() -> Tuple[bytes, ...]:
    """The keys pinned into this app's code, or () when the app has none (JIT mode, a bundle
    built without a signing key).

    The module is part of the app PEX's sources, which its sha256 in the signed manifest covers;
    no environment variable is consulted. (Whoever controls `sys.path`, e.g. through
    PYTHONPATH, runs code in the app anyway, which no check inside the app can prevent.)
    """
    try:
        module = importlib.import_module(PINNED_KEYS_MODULE)
    except ModuleNotFoundError as e:
        if e.name != PINNED_KEYS_MODULE:
            raise
        return ()
    origin = getattr(module, "__file__", None) or PINNED_KEYS_MODULE
    try:
        return pinned_keys_of(module, origin)
    except SignatureFormatError as e:
        raise UntrustedBundleError(
            f"cannot read the keys pinned into this app: {e}; rebuild it with `pants package`"
        ) from e


def trusted_keys(
    environ: Optional[Mapping[str, str]] = None, extra: Iterable[Tuple[bytes, str]] = ()
) -> Tuple[Tuple[bytes, str], ...]:
    """[(key, where from)]: the pinned keys, then $GPU_RUNTIME_TRUSTED_KEYS, then `extra`."""
    env = os.environ if environ is None else environ
    if env.get(PINNED_KEYS_ENV) is not None:
        log.warning(
            "gpu_runtime: $%s is ignored: pinned keys are part of the app's code; add keys with "
            "$%s",
            PINNED_KEYS_ENV,
            TRUSTED_KEYS_ENV,
        )
    pinned = pinned_keys()
    try:
        found = trusted_keys_from_env(env, pinned)
    except SignatureFormatError as e:
        raise UntrustedBundleError(f"cannot read the trusted keys: {e}") from e
    keys = dict(found)
    for key, how in extra:
        keys.setdefault(key, how)
    return tuple(keys.items())


def check_trust(raw: bytes, root: str, keys: Sequence[Tuple[bytes, str]]) -> Trust:
    """How the manifest bytes `raw` (of the cache directory `root`) are trusted, in words.

    Raises UntrustedBundleError when `keys` are trusted and no valid signature by one of them
    sits beside the manifest.
    """
    sig_path = os.path.join(root, SIGNATURE_NAME)
    try:  # a regular file of sane size only: a FIFO there would block the app forever
        sig_raw: Optional[bytes] = read_regular_file(sig_path, MAX_SIGNATURE_BYTES, "signature")
    except FileNotFoundError:
        sig_raw = None
    except FileReadError as e:  # a directory, a FIFO, a device, too big
        raise UntrustedBundleError(
            f"bundle {bundle_name(raw, root)}: cannot read its signature: {e} (or copy the "
            f"whole bundle again)"
        ) from None
    except OSError as e:  # no permission: the signature cannot be read
        raise UntrustedBundleError(
            f"bundle {bundle_name(raw, root)}: cannot read its signature {sig_path} "
            f"({e.strerror or e}): refusing to load it; copy the whole bundle again"
        ) from None
    bundle = bundle_name(raw, root)
    trusted = [k for k, _ in keys]
    trusted_ids = f"{describe_keys(trusted)} ({'; '.join(sorted({h for _, h in keys}))})"
    try:
        sig, key = signature_policy(sig_raw, sig_path, trusted)
    except NotSignedError as e:
        raise UntrustedBundleError(
            f"bundle {bundle} ({SIGNATURE_NAME} is missing) "
            f"{not_signed_reason('this app', trusted_ids)}: refusing to load it; {SIGN_FIX}"
        ) from e
    except SignatureFormatError as e:
        raise UntrustedBundleError(f"bundle {bundle}: {e}; refusing to load it") from e
    except UntrustedKeyError as e:
        reason = untrusted_key_reason(e.signature.key_id, "this app", trusted_ids)
        raise UntrustedBundleError(
            f"bundle {bundle} {reason}: refusing to load it; {SIGN_FIX}"
        ) from e
    if sig is None:
        return Trust(
            "unsigned",
            f"unsigned (no trusted keys: set ${TRUSTED_KEYS_ENV} to require a signature)",
        )
    if key is None:
        return Trust(
            "unchecked",
            f"signed by key {sig.key_id}, not checked (no trusted keys: ${TRUSTED_KEYS_ENV})",
            sig.key_id,
        )
    if not verify_ed25519(key, sig.signature, raw):
        raise UntrustedBundleError(
            f"bundle {bundle}: the signature by key {key_id(key)} does not match its manifest "
            f"(the manifest was changed after it was signed): refusing to load it; re-run "
            f"`pants package` and copy the whole bundle"
        )
    return Trust("trusted", f"signed by trusted key {sig.key_id} ({dict(keys)[key]})", sig.key_id)
