"""Bundle signatures: what is signed, how keys are named and written, where they come from.

`pants package` signs the exact bytes of `cache/manifest.json` with ed25519 and writes
`cache/manifest.json.sig` beside it (`gpu_spec.bundle_files.SIGNATURE_PATH`). Since the manifest
holds the sha256 of every other file (kernels and the app PEX), the signature covers the bundle.

Formats (standard library only here; the cryptography itself is done with `cryptography` by the
plugin's signing process and by `gpu_runtime.bundle.trust` on the device):

* a public key is written as 64 lowercase hex digits of its 32 raw bytes;
* its key id is the first 16 hex digits of the sha256 of those raw bytes;
* the signature file is JSON: {"algorithm": "ed25519", "key_id": "<16 hex>",
  "signature": "<128 hex>"} and a newline.

Trusted keys on the device: those pinned into the app at build time plus those of
`TRUSTED_KEYS_ENV` (public keys separated by commas or whitespace). When any key is trusted, a
bundle must carry a valid signature by one of them.

Pinned keys are part of the app's code, not of its environment: the plugin writes the module
`PINNED_KEYS_MODULE` (`pinned_keys_module_source`) into the app PEX's sources, so the PEX's hash,
listed in the signed manifest, covers them, and the runtime reads them from that module. The
environment can only add keys (`TRUSTED_KEYS_ENV`), never remove or replace pinned ones: an
earlier design froze them into the PEX's environment as `PINNED_KEYS_ENV`, which pex sets only
when unset, so an empty or different value there removed or replaced them. That variable is now
ignored (the runtime warns when it is set).

`signature_policy` is the trust rule, once: the runtime applies it before loading a bundle and
the deploy tool on the device before switching to a release.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence, Tuple

from gpu_spec.safe_read import FileReadError, loads_json

ALGORITHM = "ed25519"
PINNED_KEYS_ENV = "GPU_RUNTIME_PINNED_KEYS"  # no longer read: ignored, with a warning
TRUSTED_KEYS_ENV = "GPU_RUNTIME_TRUSTED_KEYS"
PINNED_KEYS_MODULE = "gpu_bundle_pinned_keys"  # top-level module of the app PEX's sources
PINNED_KEYS_FILE = f"{PINNED_KEYS_MODULE}.py"
PINNED_ORIGIN = "pinned into the app"

_PUBLIC_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
_KEY_ID_RE = re.compile(r"^[0-9a-f]{16}$")
_SIGNATURE_RE = re.compile(r"^[0-9a-f]{128}$")


class SignatureFormatError(ValueError):
    """A public key or signature file that is not in the format above."""


def key_id(public_key: bytes) -> str:
    return hashlib.sha256(public_key).hexdigest()[:16]


def parse_public_key(text: str, origin: str) -> bytes:
    key = text.strip().lower()
    if not _PUBLIC_KEY_RE.match(key):
        raise SignatureFormatError(
            f"{origin}: {text.strip()[:80]!r} is not an ed25519 public key (64 hex digits)"
        )
    return bytes.fromhex(key)


def parse_public_keys(text: str, origin: str) -> Tuple[bytes, ...]:
    return tuple(parse_public_key(k, origin) for k in re.split(r"[\s,]+", text) if k)


def trusted_keys_from_env(
    environ: Mapping[str, str], pinned: Iterable[bytes] = ()
) -> Tuple[Tuple[bytes, str], ...]:
    """[(public key, where it came from)] of the pinned keys, then the device-trusted keys of
    `TRUSTED_KEYS_ENV`, deduplicated: the environment adds to `pinned` and cannot take any away.
    `PINNED_KEYS_ENV` is not read."""
    keys: dict = {key: PINNED_ORIGIN for key in pinned}
    for key in parse_public_keys(environ.get(TRUSTED_KEYS_ENV, ""), f"${TRUSTED_KEYS_ENV}"):
        keys.setdefault(key, f"${TRUSTED_KEYS_ENV}")
    return tuple(keys.items())


def pinned_keys_module_source(keys: Sequence[str]) -> str:
    """The text of `PINNED_KEYS_FILE` for `keys` (64 hex digits each), as the plugin writes it."""
    checked = [parse_public_key(k, "pinned key").hex() for k in keys]
    lines = "".join(f"    {k!r},\n" for k in checked)
    return (
        '"""Public keys pinned into this app by `pants package` (gpu_build); generated, do not '
        "edit.\n\ngpu_runtime trusts bundles signed by these keys and no others but those of "
        f'${TRUSTED_KEYS_ENV}.\n"""\n\nPINNED_KEYS = (\n{lines})\n'
    )


def pinned_keys_of(module: object, origin: str) -> Tuple[bytes, ...]:
    """The keys of a loaded `PINNED_KEYS_MODULE` (its `PINNED_KEYS`, a tuple of 64-hex strings)."""
    keys = getattr(module, "PINNED_KEYS", None)
    if not isinstance(keys, (tuple, list)) or not all(isinstance(k, str) for k in keys):
        raise SignatureFormatError(f"{origin}: PINNED_KEYS is not a tuple of 64-hex-digit strings")
    return tuple(parse_public_key(k, origin) for k in keys)


@dataclass(frozen=True)
class Signature:
    key_id: str
    signature: bytes  # 64 bytes

    def dumps(self) -> bytes:
        doc = {"algorithm": ALGORITHM, "key_id": self.key_id, "signature": self.signature.hex()}
        return (json.dumps(doc, sort_keys=True) + "\n").encode()


def parse_signature(raw: bytes, origin: str) -> Signature:
    try:
        doc = loads_json(raw, origin)
    except FileReadError as e:
        raise SignatureFormatError(str(e)) from e
    except (UnicodeDecodeError, ValueError) as e:
        raise SignatureFormatError(f"{origin} is not a JSON signature file: {e}") from e
    if not isinstance(doc, dict) or doc.get("algorithm") != ALGORITHM:
        raise SignatureFormatError(f"{origin}: expected an {ALGORITHM!r} signature object")
    kid, sig = doc.get("key_id"), doc.get("signature")
    if not isinstance(kid, str) or not _KEY_ID_RE.match(kid):
        raise SignatureFormatError(f"{origin}: key_id {kid!r} is not 16 hex digits")
    if not isinstance(sig, str) or not _SIGNATURE_RE.match(sig):
        raise SignatureFormatError(f"{origin}: signature is not 128 hex digits")
    return Signature(kid, bytes.fromhex(sig))


def describe_keys(keys: Iterable[bytes]) -> str:
    return ", ".join(key_id(k) for k in keys) or "none"


# The fix of every signature refusal, on the device and at deploy time alike.
SIGN_FIX = (
    "sign the bundle with a key that is trusted: set `[gpu-bundle-signing].key_file` (or "
    "PANTS_GPU_BUNDLE_SIGNING_KEY_FILE) to its private key and re-run `pants package`, or "
    f"trust the bundle's key in ${TRUSTED_KEYS_ENV}"
)


def not_signed_reason(party: str, trusted_ids: str) -> str:
    """Why an unsigned bundle is refused where keys are trusted (``party``: "this app", "the
    device"); the caller adds what it refuses and ``SIGN_FIX``."""
    return f"is not signed, and {party} trusts only bundles signed by key {trusted_ids}"


def untrusted_key_reason(kid: str, party: str, trusted_ids: str) -> str:
    """Why a bundle signed by a key that ``party`` does not trust is refused."""
    return f"is signed by key {kid}, which {party} does not trust (trusted: {trusted_ids})"


def find_key(keys: Iterable[bytes], kid: str) -> Optional[bytes]:
    return next((k for k in keys if key_id(k) == kid), None)


class NotSignedError(ValueError):
    """Keys are trusted and the manifest has no signature file."""


class UntrustedKeyError(ValueError):
    """Keys are trusted and the manifest is signed by another one (`signature.key_id`)."""

    def __init__(self, signature: Signature) -> None:
        super().__init__(f"signed by key {signature.key_id}, which is not trusted")
        self.signature = signature


def signature_policy(
    sig_raw: Optional[bytes], origin: str, trusted: Sequence[bytes]
) -> Tuple[Optional[Signature], Optional[bytes]]:
    """(the signature, the trusted key it must verify with) of a manifest under `trusted` keys.

    `sig_raw` is the signature file's bytes (None: there is none), `origin` its path for messages.
    With no trusted keys nothing is required: (None or the parsed signature, None). With any,
    raises NotSignedError, SignatureFormatError or UntrustedKeyError, else returns the key whose
    ed25519 check of the manifest's exact bytes decides (the caller does that check).
    """
    if sig_raw is None:
        if trusted:
            raise NotSignedError(f"{origin} is missing")
        return None, None
    sig = parse_signature(sig_raw, origin)
    if not trusted:
        return sig, None
    key = find_key(trusted, sig.key_id)
    if key is None:
        raise UntrustedKeyError(sig)
    return sig, key
