"""Which compiled variant runs on this device: a pure function, tested as a table.

Rules, in order of preference:

1. a cubin for exactly the device's capability (`sm_90` cubin on an sm_90 device);
2. a cubin of the same major and a lower minor, the highest such (`sm_80` cubin on sm_86);
3. PTX for a capability <= the device's, highest first, whose PTX ISA the driver can JIT
   (driver CUDA version >= the variant's `min_driver`);
4. otherwise `NoCompatibleVariantError`, naming what the bundle holds, the device and how to
   rebuild.

Details:
* A cubin only loads on a driver of at least its toolchain's CUDA major version (CUDA minor
  version compatibility); the toolchain's major is taken from the variant's `min_driver`.
* Arch-specific capabilities (`sm_90a`) run only on exactly that capability, as cubin or PTX.
  Family-specific ones (`sm_100f`) run on the same major with an equal or higher minor.
* Among equally good variants (same capability, several toolchains) the one needing the newest
  driver that this driver still satisfies wins.
* The minimum driver for a PTX ISA is the stricter of the manifest's `min_driver` and
  `gpu_compiler.arch.min_driver_for_ptx(ptx_isa)` (when that table knows the ISA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple, Union

from gpu_compiler import arch as _arch
from gpu_runtime.errors import NoCompatibleVariantError
from gpu_runtime.manifest import Variant

Version = Tuple[int, int]
KINDS = ("cubin", "ptx")


def parse_version(value: Union[int, str, Sequence[int]]) -> Version:
    """(major, minor) from 13000 (cuDriverGetVersion), "13.0", "13" or (13, 0)."""
    if isinstance(value, bool):
        raise ValueError(f"not a CUDA version: {value!r}")
    if isinstance(value, int):
        return (value // 1000, (value % 1000) // 10)
    if isinstance(value, str):
        parts = value.strip().split(".")
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"not a CUDA version: {value!r}") from None
        if not 1 <= len(nums) <= 3:
            raise ValueError(f"not a CUDA version: {value!r}")
        return (nums[0], nums[1] if len(nums) > 1 else 0)
    nums = tuple(int(v) for v in value)
    if len(nums) < 1:
        raise ValueError(f"not a CUDA version: {value!r}")
    return (nums[0], nums[1] if len(nums) > 1 else 0)


def format_version(v: Version) -> str:
    return f"{v[0]}.{v[1]}"


def split_capability(cap: str) -> Tuple[int, int, str]:
    """("sm_90a") -> (9, 0, "a"); the numeric part is parsed by gpu_compiler.arch."""
    suffix = cap[-1] if cap and cap[-1] in "af" else ""
    base = cap[:-1] if suffix else cap
    major, minor = _arch.parse_capability(base)
    return int(major), int(minor), suffix


def capability_name(cc: Union[str, Sequence[int]]) -> str:
    if isinstance(cc, str):
        return cc
    return f"sm_{cc[0]}{cc[1]}"


def _device_cc(device_cc: Union[str, Sequence[int]]) -> Tuple[int, int]:
    if isinstance(device_cc, str):
        major, minor, _ = split_capability(device_cc)
        return (major, minor)
    major, minor = device_cc
    return (int(major), int(minor))


def effective_min_driver(variant: Variant) -> Version:
    """The stricter of the recorded min_driver and gpu_compiler's table for the PTX ISA."""
    recorded = parse_version(variant.min_driver)
    try:
        table = parse_version(_arch.min_driver_for_ptx(variant.ptx_isa))
    except (KeyError, ValueError, LookupError):
        return recorded
    return max(recorded, table)


@dataclass(frozen=True)
class Choice:
    """The variant to load and whether to load its cubins or its PTX."""

    variant: Variant
    kind: str  # "cubin" | "ptx"
    reason: str

    @property
    def capability(self) -> str:
        return self.variant.capability

    def path_of(self, module) -> str:  # module: ModuleSpec
        return module.cubin if self.kind == "cubin" else module.ptx


def select_variant(
    variants: Iterable[Variant],
    device_cc: Union[str, Sequence[int]],
    driver_version: Union[int, str, Sequence[int]],
    *,
    kinds: Sequence[str] = KINDS,
    device_name: Optional[str] = None,
    library: Optional[str] = None,
    bundle: Optional[str] = None,
    fix: Optional[str] = None,
) -> Choice:
    """Pick the variant (and cubin vs PTX) to load; raise NoCompatibleVariantError if none fits.

    `device_cc`: (9, 0) or "sm_90". `driver_version`: 13000, "13.0" or (13, 0).
    `kinds`: restrict to ("ptx",) or ("cubin",) (e.g. to test the JIT path on purpose).
    The other keyword-only names only make the error message more useful (`fix` replaces the
    default advice, which is to add the capability to the deploy_bundle and rebuild).
    """
    variants = list(variants)
    dev = _device_cc(device_cc)
    drv = parse_version(driver_version)
    dev_name = capability_name(dev)
    rejected: List[str] = []

    exact: List[Tuple[tuple, Variant]] = []
    lower: List[Tuple[tuple, Variant]] = []
    ptx: List[Tuple[tuple, Variant]] = []
    for v in variants:
        try:
            major, minor, suffix = split_capability(v.capability)
        except (ValueError, TypeError, LookupError) as e:
            rejected.append(f"{v.capability}: unknown capability ({e})")
            continue
        cc = (major, minor)
        need = effective_min_driver(v)
        tc_major = parse_version(v.min_driver)[0]
        if "cubin" in kinds and v.has_cubin:
            if suffix == "a":
                fits = cc == dev
            else:
                fits = major == dev[0] and minor <= dev[1]
            if not fits:
                rejected.append(f"cubin {v.capability}: does not run on {dev_name}")
            elif drv[0] < tc_major:
                rejected.append(f"cubin {v.capability}: built with CUDA {tc_major}.x, needs a "
                                f"CUDA {tc_major}.x driver (have {format_version(drv)})")
            else:
                key = (minor, need, suffix == "a")
                (exact if cc == dev else lower).append((key, v))
        elif "cubin" in kinds:
            rejected.append(f"{v.capability}: no cubin")
        if "ptx" in kinds and v.has_ptx:
            if suffix == "a":
                fits = cc == dev
            elif suffix == "f":
                fits = major == dev[0] and minor <= dev[1]
            else:
                fits = cc <= dev
            if not fits:
                rejected.append(f"ptx {v.capability}: newer than {dev_name}" if cc > dev
                                else f"ptx {v.capability}: arch-specific, not JIT-able for {dev_name}")
            elif drv < need:
                rejected.append(f"ptx {v.capability}: PTX ISA {v.ptx_isa} needs driver >= "
                                f"{format_version(need)} (have {format_version(drv)})")
            else:
                ptx.append(((cc, need, suffix != ""), v))
        elif "ptx" in kinds:
            rejected.append(f"{v.capability}: no PTX")

    if exact:
        _, v = max(exact, key=lambda kv: kv[0])
        return Choice(v, "cubin", f"exact cubin for {dev_name}")
    if lower:
        _, v = max(lower, key=lambda kv: kv[0])
        return Choice(v, "cubin", f"cubin {v.capability} is binary-compatible with {dev_name}")
    if ptx:
        _, v = max(ptx, key=lambda kv: kv[0])
        why = "PTX only (prefer='ptx')" if "cubin" not in kinds else f"no usable cubin for {dev_name}"
        return Choice(v, "ptx", f"{why}; JIT-compiling PTX {v.capability} "
                                f"(ISA {v.ptx_isa}) with driver {format_version(drv)}")
    raise NoCompatibleVariantError(_no_variant_message(
        variants, dev_name, drv, rejected, kinds, device_name, library, bundle, fix))


def _no_variant_message(variants: List[Variant], dev_name: str, drv: Version, rejected: List[str],
                        kinds: Sequence[str], device_name: Optional[str], library: Optional[str],
                        bundle: Optional[str], fix_hint: Optional[str] = None) -> str:
    what = f"library '{library}'" if library else "this library"
    where = f" in bundle '{bundle}'" if bundle else ""
    dev = f"{device_name} ({dev_name})" if device_name else dev_name
    holds = ", ".join(v.describe() for v in variants) or "nothing"
    lines = [
        f"No GPU code in {what}{where} can run on this device.",
        f"  device: {dev}, driver supports CUDA {format_version(drv)}",
        f"  bundle holds: {holds}",
    ]
    if tuple(kinds) != KINDS:
        lines.append(f"  only {'/'.join(kinds)} allowed (GPU_RUNTIME_PREFER / prefer=)")
    if rejected:
        lines.append("  rejected: " + "; ".join(rejected))
    fix = (f"  fix: add \"{dev_name}\" to the capabilities of the deploy_bundle"
           f"{' ' + repr(bundle) if bundle else ''} and run `pants package` on it")
    needs = sorted({effective_min_driver(v) for v in variants if v.has_ptx})
    if needs and all(n > drv for n in needs):
        fix += (f"; or use a toolchain whose PTX this driver accepts (CUDA <= {format_version(drv)}),"
                f" or upgrade the driver to CUDA >= {format_version(needs[0])}")
    lines.append(f"  fix: {fix_hint}" if fix_hint else fix)
    return "\n".join(lines)
