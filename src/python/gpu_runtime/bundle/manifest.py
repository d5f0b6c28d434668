"""Opening a bundle's manifest: its bytes read once, trusted, parsed, and the bundle complete.

The signature is checked on the very bytes that are then parsed (`gpu_runtime.bundle.trust`), and a
bundle with modules whose files are all gone is refused as incomplete
(`gpu_runtime.bundle.completeness`), as is one whose app files beside cache/ lead out of it or
include a file the manifest does not list (`gpu_runtime.bundle.integrity.check_app_files`),
before any kernel is looked up or loaded.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping, Optional, Tuple

from gpu_runtime.bundle.completeness import check_complete
from gpu_runtime.bundle.integrity import check_app_files
from gpu_runtime.bundle.trust import Trust, check_trust, trusted_keys
from gpu_runtime.errors import ManifestError, manifest_errors
from gpu_runtime.logs import log
from gpu_spec.manifest.model import MANIFEST_NAME, Manifest
from gpu_spec.manifest.parse import loads_manifest
from gpu_spec.safe_read import MAX_MANIFEST_BYTES, FileReadError, read_regular_file


def read_manifest_bytes(root: str) -> bytes:
    """The manifest's bytes: a regular file of sane size only (a FIFO would block forever)."""
    path = os.path.join(root, MANIFEST_NAME)
    try:
        return read_regular_file(path, MAX_MANIFEST_BYTES, "bundle manifest")
    except FileReadError as e:
        raise ManifestError(str(e)) from e
    except OSError as e:
        raise ManifestError(f"cannot read {path}: {e.strerror or e}") from e


def open_bundle_manifest(
    root: str,
    environ: Optional[Mapping[str, str]] = None,
    extra_keys: Iterable[Tuple[bytes, str]] = (),
    *,
    require_complete: bool = True,
) -> Tuple[Manifest, Trust]:
    """(the manifest of the cache directory `root`, how it is trusted: `str()` says it)."""
    raw = read_manifest_bytes(root)
    trust = check_trust(raw, root, trusted_keys(environ, extra_keys))
    with manifest_errors():
        manifest = loads_manifest(raw, origin=os.path.join(root, MANIFEST_NAME))
    if require_complete:
        check_complete(manifest, root)
        check_app_files(manifest.bundle_files, root)
    log.info("gpu_runtime: bundle %r at %s: %s", manifest.bundle, root, trust)
    return manifest, trust
