"""Every file of a device bundle, with its sha256, as its manifest lists them.

A bundle directory holds `cache/manifest.json`, whose "files" (relative to `cache/`) and
"bundle_files" (relative to the bundle directory: the app PEX) together name every file but the
manifest and its signature. The runtime's `verify`, its check for an incomplete bundle and the
deploy tool all take the list from here, so "what a bundle is" is defined once.
"""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Tuple

from gpu_spec.manifest.model import MANIFEST_NAME

CACHE_DIR = "cache"
MANIFEST_PATH = f"{CACHE_DIR}/{MANIFEST_NAME}"  # relative to the bundle directory
SIGNATURE_NAME = f"{MANIFEST_NAME}.sig"  # beside the manifest
SIGNATURE_PATH = f"{CACHE_DIR}/{SIGNATURE_NAME}"


def bundle_file_digests(
    files: Mapping[str, str], bundle_files: Mapping[str, str]
) -> Dict[str, str]:
    """{path relative to the bundle directory: sha256} of every file the manifest lists."""
    out = {f"{CACHE_DIR}/{path}": digest for path, digest in files.items()}
    for path, digest in bundle_files.items():
        if path == CACHE_DIR or path.startswith(f"{CACHE_DIR}/"):
            raise ValueError(f'"bundle_files" may not name {path!r}: cache/ is "files"')
        out[path] = digest
    return dict(sorted(out.items()))


def missing_files(root: str, relpaths: Mapping[str, str]) -> List[str]:
    """The paths of `relpaths` (relative to `root`) that are not regular files there."""
    return [p for p in relpaths if not os.path.isfile(os.path.join(root, *p.split("/")))]


def incomplete_message(bundle: str, where: str, missing: int, total: int) -> str:
    """The one wording of "this bundle was not written (or copied) completely"."""
    return (
        f"bundle {bundle!r} ({where}) is incomplete: {missing} of {total} files missing: "
        f"re-run `pants package` (or copy the whole bundle directory again)"
    )


def split_cache_path(path: str) -> Tuple[str, str]:
    """("cache", rest) for a bundle path under cache/, else ("", path)."""
    head, _, rest = path.partition("/")
    return (CACHE_DIR, rest) if head == CACHE_DIR and rest else ("", path)
