"""A bundle with files missing in bulk is incomplete, not a capability problem.

`pants package` materialises a bundle file by file (Pants 2.17 gives a rule no way to make that
atomic), and a copy to a device can stop half-way: both leave a manifest whose files are partly
absent. A cubin deleted on purpose (the PTX beside it still runs) is tolerated with a warning
(`gpu_runtime.loader.variants_on_disk`); but when a module has none of its files left, or when no
variant can be chosen while files are missing, the error says the bundle is incomplete (never
"add a capability", which would be wrong advice).
"""

from __future__ import annotations

from typing import Any

from gpu_runtime.errors import IncompleteBundleError, NoCompatibleVariantError
from gpu_runtime.selection import Choice, select_variant
from gpu_spec.bundle_files import incomplete_message, missing_files
from gpu_spec.manifest import Manifest


def _error(manifest: Manifest, root: str, missing: int) -> IncompleteBundleError:
    return IncompleteBundleError(
        incomplete_message(manifest.bundle, root, missing, len(manifest.files))
    )


def check_complete(manifest: Manifest, root: str) -> None:
    """Refuse a bundle in which some module has none of its files (run when it is opened)."""
    missing = set(missing_files(root, manifest.files))
    if not missing:
        return
    for lib in manifest.libraries:
        for variant in lib.variants:
            for module in variant.modules:
                paths = [p for p in (module.ptx, module.cubin) if p]
                if paths and all(p in missing for p in paths):
                    raise _error(manifest, root, len(missing))


def select_unless_incomplete(manifest: Manifest, root: str, *args: Any, **kwargs: Any) -> Choice:
    """`select_variant(*args, **kwargs)`; when nothing fits while listed files are missing, the
    error is IncompleteBundleError rather than capability advice."""
    try:
        return select_variant(*args, **kwargs)
    except NoCompatibleVariantError:
        missing = missing_files(root, manifest.files)
        if missing:
            raise _error(manifest, root, len(missing)) from None
        raise
