"""``python -m gpu_runtime verify <bundle dir>``: every file of a bundle and its signature.

Checks what the device would trust before running anything: the manifest's signature against
the trusted keys (pinned into the app when run from its PEX, ``$GPU_RUNTIME_TRUSTED_KEYS``,
``--key``), then the sha256 of every file the manifest lists, the app PEX included. Prints one
line per problem and a summary; exits 1 on any problem. Needs no GPU.

Run from outside the bundle's PEX, the keys pinned into that PEX are *not* used: they would come
from the very file being checked. Give them with ``--key`` or the environment variable instead.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from typing import List

HELP = "check every file of a bundle (app PEX included) and its signature"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="the bundle directory (holding cache/), or its cache/")
    parser.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="HEX",
        help="also trust this ed25519 public key (64 hex digits); repeatable",
    )


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def bundle_dirs(path: str) -> "tuple[str, str]":
    """(bundle directory, cache directory) of a bundle or cache path."""
    from gpu_spec.bundle_files import CACHE_DIR
    from gpu_spec.manifest.model import MANIFEST_NAME

    path = os.path.abspath(path)
    if os.path.isfile(os.path.join(path, MANIFEST_NAME)):
        return os.path.dirname(path), path
    return path, os.path.join(path, CACHE_DIR)


def problems_of(bundle_dir: str, digests: "dict[str, str]") -> List[str]:
    """One line per listed file that is missing or whose sha256 differs."""
    from gpu_spec.bundle_files import missing_files

    missing = set(missing_files(bundle_dir, digests))
    out = [f"missing: {p}" for p in sorted(missing)]
    for path, digest in digests.items():
        if path not in missing:
            actual = file_sha256(os.path.join(bundle_dir, *path.split("/")))
            if actual != digest:
                out.append(f"changed: {path} (sha256 {actual}, the manifest says {digest})")
    return out


def run(args: argparse.Namespace) -> int:
    from gpu_runtime.bundle.manifest import open_bundle_manifest
    from gpu_runtime.errors import GpuRuntimeError
    from gpu_spec.bundle_files import bundle_file_digests, incomplete_message
    from gpu_spec.signature import SignatureFormatError, parse_public_key

    bundle_dir, cache_dir = bundle_dirs(args.bundle)
    try:
        extra = [(parse_public_key(k, "--key"), "--key") for k in args.key]
        manifest, trust = open_bundle_manifest(cache_dir, extra_keys=extra, require_complete=False)
    except (GpuRuntimeError, SignatureFormatError) as e:
        print(f"REFUSED: {e}")
        return 1
    digests = bundle_file_digests(manifest.files, manifest.bundle_files)
    problems = problems_of(bundle_dir, digests)
    missing = sum(p.startswith("missing: ") for p in problems)
    for line in problems:
        print(line)
    name = f"bundle {manifest.bundle!r} ({bundle_dir})"
    if missing:
        print(f"REFUSED: {incomplete_message(manifest.bundle, bundle_dir, missing, len(digests))}")
    elif problems:
        print(f"REFUSED: {name}: {len(problems)} of {len(digests)} files do not match its manifest")
    else:
        apps = ", ".join(manifest.bundle_files) or "no app files listed"
        print(f"OK: {name}: {len(digests)} files match the manifest ({apps}); {trust}")
    return 1 if problems else 0
