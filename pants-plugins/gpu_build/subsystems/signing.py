"""`[gpu-bundle-signing]`: the key `pants package` signs bundles with, and the keys apps trust."""

from __future__ import annotations

from pants.option.option_types import StrListOption, StrOption
from pants.option.subsystem import Subsystem
from pants.util.strutil import softwrap


class GpuBundleSigning(Subsystem):
    options_scope = "gpu-bundle-signing"
    help = softwrap(
        """
        ed25519 signatures of device bundles. With a `key_file`, `pants package` signs each
        bundle's `cache/manifest.json` (which holds the sha256 of every other file, the app PEX
        included) into `cache/manifest.json.sig`, and pins the key's public half, plus
        `trusted_keys`, into the app PEX's code (a generated module, `gpu_bundle_pinned_keys.py`,
        which the environment cannot remove or replace). An app with keys pinned refuses
        unsigned or wrongly signed bundles before loading any kernel, and never JIT-compiles.
        """
    )

    key_file = StrOption(
        default=None,
        help=softwrap(
            """
            The ed25519 private key (PEM PKCS#8 as `openssl genpkey -algorithm ed25519` writes
            it, or OpenSSH) to sign bundles with; `~` and paths relative to the build root are
            accepted, but the file must lie outside the repository. Usually given per machine as
            `PANTS_GPU_BUNDLE_SIGNING_KEY_FILE`. Unset: bundles are not signed. It is read by an
            uncached process from its path, so its bytes never enter a cache.
            """
        ),
    )
    trusted_keys = StrListOption(
        default=[],
        help=softwrap(
            """
            More ed25519 public keys (64 hex digits each) to pin into every bundle's app, e.g.
            the next signing key during a key rotation. Public keys are not secret.
            """
        ),
    )
    resolve = StrOption(
        default="python-default",
        help="The Python resolve whose locked `cryptography` the signing process runs with.",
    )
