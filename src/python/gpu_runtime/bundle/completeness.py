"""A bundle with files missing in bulk is incomplete, not a capability problem.

`pants package` materialises a bundle file by file (Pants 2.17 gives a rule no way to make that
atomic), and a copy to a device can stop half-way: both leave a manifest whose files are partly
absent. A cubin deleted on purpose (the PTX beside it still runs) is tolerated with a warning
(`gpu_runtime.bundle.loader.variants_on_disk`); but when a module has none of its files left, or
when no variant on disk fits while the bundle as built would have had one, the error says the
bundle is incomplete (never "add a capability", which would be wrong advice).
"""

from __future__ import annotations

from typing import Any, List, Sequence

from gpu_runtime.bundle.selection import Choice, select_variant
from gpu_runtime.errors import DriverTooOldError, IncompleteBundleError, NoCompatibleVariantError
from gpu_spec.bundle_files import incomplete_message, missing_files
from gpu_spec.capabilities import Capability, capability_name, parse_capability
from gpu_spec.compatibility import cubin_runs_on, ptx_min_driver, ptx_runs_on
from gpu_spec.errors import SpecError
from gpu_spec.manifest.model import Manifest, Variant
from gpu_spec.versions import Version, driver_version, format_version, parse_version


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


def select_unless_incomplete(
    manifest: Manifest, root: str, on_disk: Sequence[Variant], *args: Any, **kwargs: Any
) -> Choice:
    """`select_variant(on_disk, *args, **kwargs)`; when nothing on disk fits but the bundle as
    built would (its missing files are the cause), IncompleteBundleError, not capability advice.
    """
    try:
        return select_variant(on_disk, *args, **kwargs)
    except NoCompatibleVariantError:
        library, kinds = kwargs["library"], kwargs.get("kinds", ("cubin", "ptx"))
        missing = missing_files(root, manifest.files)
        if missing:
            try:
                select_variant(manifest.library(library).variants, *args, **kwargs)
            except NoCompatibleVariantError:
                _refuse_if_driver_too_old(manifest, root, args[0], args[1], library, kinds)
                _refuse_if_listed(manifest, root, args[0], library)
                raise  # the bundle as built has nothing for this device either
            raise _error(manifest, root, len(missing)) from None
        _refuse_if_driver_too_old(manifest, root, args[0], args[1], library, kinds)
        _refuse_if_listed(manifest, root, args[0], library)
        raise


def _refuse_if_driver_too_old(
    manifest: Manifest, root: str, device_cc: Any, driver: Any, library: str, kinds: Any
) -> None:
    """The library holds code this GPU could run (by capability), and every piece of it needs a
    newer driver: DriverTooOldError naming the CUDA version needed and the driver's. Without
    this, a listed capability read as "incomplete or edited", which sent users re-copying."""
    try:
        cc: Capability = (
            parse_capability(device_cc)
            if isinstance(device_cc, str)
            else (int(device_cc[0]), int(device_cc[1]))
        )
        have = driver_version(driver)
    except SpecError:
        return
    needs: List[Version] = []
    for v in manifest.library(library).variants:
        try:
            vcc = parse_capability(v.capability)
        except SpecError:
            continue
        if "cubin" in kinds and v.has_cubin and cubin_runs_on(vcc, cc):
            needs.append((parse_version(v.toolchain_cuda)[0], 0))  # a CUDA major.x driver
        if "ptx" in kinds and v.has_ptx and ptx_runs_on(vcc, cc):
            needs.append(ptx_min_driver(v.ptx_isa))
    if not needs or any(n <= have for n in needs):
        return  # no code for this GPU at all, or some that this driver loads: not the driver
    need = format_version(min(needs))
    raise DriverTooOldError(
        f"bundle {manifest.bundle!r} ({root}): library {library!r} has code for this GPU "
        f"({capability_name(cc)}), but it needs a driver for CUDA >= {need} and this device's "
        f"driver supports CUDA {format_version(have)}: upgrade the driver to CUDA >= {need}, or "
        f"build the bundle with a toolchain this driver accepts (CUDA <= "
        f"{format_version(have)}) and re-run `pants package`"
    )


def _refuse_if_listed(manifest: Manifest, root: str, device_cc: Any, library: str) -> None:
    """A capability the manifest lists, with no code for it in the library: the manifest was
    edited or cut, and "add the capability" (the usual advice) would be wrong."""
    try:
        cc = device_cc if isinstance(device_cc, str) else capability_name(device_cc)
    except SpecError:  # a GPU newer than gpu_spec's table: no bundle can list it
        return
    if cc in manifest.capabilities:
        raise IncompleteBundleError(
            f"bundle {manifest.bundle!r} ({root}) lists {cc} among its capabilities, but its "
            f"library {library!r} holds no {cc} code: the bundle is incomplete or was edited; "
            f"re-run `pants package` (or copy the whole bundle directory again)"
        )
