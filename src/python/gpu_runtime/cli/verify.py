"""``python -m gpu_runtime verify <bundle dir>``: every file of a bundle and its signature.

Checks what the device would trust before running anything: the manifest's signature against
the trusted keys (pinned into the app when run from its PEX, ``$GPU_RUNTIME_TRUSTED_KEYS``,
``--key``), then every file the manifest lists, the app PEX included: its path by the runtime's
own rule (`gpu_runtime.bundle.integrity.locate_file`: nothing out of cache/ or the bundle
directory, nothing but regular files), then its sha256; and the app's files beside cache/ by the
rule the runtime applies when it opens the bundle (`gpu_spec.bundle_files.app_file_problems`: no
symlink out of the bundle, no file the manifest does not list, such as an added
`app.pex/zzz.pth`), refused in the very line the runtime's error is. Prints one line per problem
and a summary; after an ``OK`` summary, one line per kernel variant whose manifest recorded its
resources (``kernel <library>.<kernel> <capability> (<toolchain>): registers ...; occupancy
...``). Needs no GPU. Exit status:

* 0 ``OK``: every file matches, and the signature was checked against a trusted key (or the
  bundle is unsigned and no key is trusted: nothing claims more than the sha256);
* 1 ``REFUSED``: a file is missing, changed or refused, or the signature does not hold;
* 3 ``NOT VERIFIED``: the files match a manifest that is signed, but no key is trusted here, so
  the signature was not checked (a re-hashed manifest would pass the sha256 alone).

Run from outside the bundle's PEX, the keys pinned into that PEX are *not* used: they would come
from the very file being checked. Give them with ``--key`` or the environment variable instead.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, List

if TYPE_CHECKING:
    from gpu_spec.manifest.model import Manifest

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


NOT_VERIFIED = 3


def file_sha256(path: str) -> str:
    """The sha256 of the regular file `path` (gpu_spec.safe_read's, as every reader hashes)."""
    from gpu_spec.safe_read import regular_file_sha256

    return regular_file_sha256(path, "bundle file")


def bundle_dirs(path: str) -> "tuple[str, str]":
    """(bundle directory, cache directory) of a bundle or cache path."""
    from gpu_spec.bundle_files import CACHE_DIR
    from gpu_spec.manifest.model import MANIFEST_NAME

    path = os.path.abspath(path)
    if os.path.isfile(os.path.join(path, MANIFEST_NAME)):
        return os.path.dirname(path), path
    return path, os.path.join(path, CACHE_DIR)


def problems_of(
    bundle_dir: str, digests: "dict[str, str]", skip: "tuple[str, ...]" = ()
) -> List[str]:
    """One line per listed file that is missing, refused or whose sha256 differs.

    Paths under cache/ are located as the runtime locates them (inside the real cache/), the
    app's files inside the bundle directory, both by `locate_file`. Paths at or under `skip`
    (refused already, e.g. a symlinked `app.pex/`) are left out.
    """
    from gpu_runtime.bundle.integrity import locate_file
    from gpu_runtime.errors import IntegrityError
    from gpu_spec.bundle_files import CACHE_DIR, split_cache_path
    from gpu_spec.safe_read import FileReadError

    out = []
    for path, digest in digests.items():
        if any(path == s or path.startswith(f"{s}/") for s in skip):
            continue
        head, rest = split_cache_path(path)
        try:
            if head:
                real = locate_file(os.path.join(bundle_dir, CACHE_DIR), rest)
            else:
                real = locate_file(bundle_dir, rest, "the bundle directory")
        except IntegrityError as e:
            out.append(f"refused: {path}: {e}")
            continue
        if real is None:
            out.append(f"missing: {path}")
            continue
        try:
            actual = file_sha256(real)
        except (OSError, FileReadError) as e:
            out.append(f"refused: {path}: {getattr(e, 'strerror', None) or e}")
            continue
        if actual != digest:
            out.append(f"changed: {path} (sha256 {actual}, the manifest says {digest})")
    return sorted(out, key=lambda line: not line.startswith("missing: "))


def app_summary(bundle_files: "dict[str, str]") -> str:
    """The app's files in a few words: a packed PEX directory is one item with its file count."""
    counts: "dict[str, int]" = {}
    for path in bundle_files:
        top, sep, _ = path.partition("/")
        key = f"{top}/" if sep else top
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} ({n} files)" if k.endswith("/") else k for k, n in counts.items())


def run(args: argparse.Namespace) -> int:
    from gpu_runtime.bundle.manifest import open_bundle_manifest
    from gpu_runtime.errors import GpuRuntimeError
    from gpu_spec.bundle_files import app_file_problems, bundle_file_digests, incomplete_message
    from gpu_spec.manifest.model import MANIFEST_NAME
    from gpu_spec.signature import TRUSTED_KEYS_ENV, SignatureFormatError, parse_public_key

    bundle_dir, cache_dir = bundle_dirs(args.bundle)
    try:
        extra = [(parse_public_key(k, "--key"), "--key") for k in args.key]
        manifest, trust = open_bundle_manifest(cache_dir, extra_keys=extra, require_complete=False)
    except (GpuRuntimeError, SignatureFormatError) as e:
        print(f"REFUSED: {e}")
        return 1
    try:
        digests = bundle_file_digests(manifest.files, manifest.bundle_files)
    except ValueError as e:
        print(f"REFUSED: {os.path.join(cache_dir, MANIFEST_NAME)}: {e}")
        return 1
    app = app_file_problems(bundle_dir, manifest.bundle_files)  # the runtime's rule, and line
    problems = problems_of(bundle_dir, digests, skip=tuple(app))
    missing = sum(p.startswith("missing: ") for p in problems)
    for line in problems:
        print(line)
    for line in app.values():
        print(f"refused: {line}")
    name = f"bundle {manifest.bundle!r} ({bundle_dir})"
    if missing:
        print(f"REFUSED: {incomplete_message(manifest.bundle, bundle_dir, missing, len(digests))}")
    elif problems:
        print(f"REFUSED: {name}: {len(problems)} of {len(digests)} files do not match its manifest")
    elif app:
        print(f"REFUSED: {name}: {len(app)} of the app's paths beside cache/ refused (above)")
    elif trust.status == "unchecked":
        print(
            f"NOT VERIFIED: {name}: {len(digests)} files match its manifest, but the manifest "
            f"is signed by key {trust.key_id} and no key is trusted here, so the signature was "
            f"not checked; pass --key <64 hex digits> or set ${TRUSTED_KEYS_ENV}, or run verify "
            f"from the bundle's PEX (PEX_MODULE=gpu_runtime python3 app.pex verify ...), which "
            f"has its keys pinned"
        )
        return NOT_VERIFIED
    else:
        apps = app_summary(manifest.bundle_files) or "no app files listed"
        print(f"OK: {name}: {len(digests)} files match the manifest ({apps}); {trust}")
        for line in resource_lines(manifest):
            print(line)
    return 1 if problems or app else 0


def resource_lines(manifest: "Manifest") -> List[str]:
    """One line per kernel variant whose manifest recorded its resources: what the compiler
    measured and the occupancy at the best block size (`gpu_spec.resources.occupancy`). Printed
    after the OK line only: a manifest that is refused, or whose signature went unchecked,
    vouches for no figures, and scripts read a refusal's verdict from the last line."""
    from gpu_spec.resources.occupancy import describe_resources

    return [
        f"kernel {lib.name}.{k.name} {v.capability} ({v.toolchain}): "
        + describe_resources(v.capability, k.resources)
        for lib in manifest.libraries
        for v in lib.variants
        for m in v.modules
        for k in m.kernels
        if k.resources
    ]
