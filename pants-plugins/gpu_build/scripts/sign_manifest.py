"""Runs inside the bundle-signing PEX (cryptography from the device resolve), never inside Pants.

    sign_manifest public-key <private key file>          -> prints the public key (64 hex)
    sign_manifest sign <private key file> <file>          -> prints the public key, then the
                                                             ed25519 signature of the file's bytes

The key file is an ed25519 private key in PEM (PKCS#8, as `openssl genpkey -algorithm ed25519`
writes it) or OpenSSH format. It is read from its absolute path outside the sandbox, so its bytes
are never an input of a Pants process (nor in any cache); its processes are never cached.

Both files are read by gpu_spec.safe_read (shipped in the PEX beside this script): regular files
only (a FIFO as the key file would hang `pants package`), within a size limit. They are read
before `cryptography` is imported, so a bad file is refused first, in one line.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from gpu_spec.safe_read import MAX_KEY_BYTES, MAX_MANIFEST_BYTES, FileReadError, read_regular_file

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,  # pants: no-infer-dep
    )


def read_file(path: str, limit: int, what: str) -> bytes:
    """The bytes of the regular file `path`, or SystemExit with one line naming it."""
    try:
        return read_regular_file(path, limit, what)
    except FileReadError as e:
        raise SystemExit(str(e)) from None
    except OSError as e:
        raise SystemExit(f"cannot read the {what} {path}: {e.strerror or e}") from None


def load_key(path: str) -> "Ed25519PrivateKey":
    data = read_file(path, MAX_KEY_BYTES, "bundle signing key")
    # Run from the signing PEX's own resolve, never imported by the plugin inside Pants.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,  # pants: no-infer-dep
    )
    from cryptography.hazmat.primitives.serialization import (
        load_pem_private_key,  # pants: no-infer-dep
        load_ssh_private_key,  # pants: no-infer-dep
    )

    try:
        if b"OPENSSH PRIVATE KEY" in data:
            key = load_ssh_private_key(data, password=None)
        else:
            key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise SystemExit(f"{path} is not an unencrypted PEM or OpenSSH private key: {e}") from e
    if not isinstance(key, Ed25519PrivateKey):
        raise SystemExit(f"{path} holds a {type(key).__name__}, not an ed25519 private key")
    return key


def main(argv: list) -> int:
    if len(argv) < 2 or argv[0] not in ("public-key", "sign"):
        raise SystemExit(__doc__)
    data = read_file(argv[2], MAX_MANIFEST_BYTES, "manifest") if argv[0] == "sign" else b""
    key = load_key(argv[1])
    from cryptography.hazmat.primitives.serialization import (
        Encoding,  # pants: no-infer-dep
        PublicFormat,  # pants: no-infer-dep
    )

    print(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex())
    if argv[0] == "sign":
        print(key.sign(data).hex())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
