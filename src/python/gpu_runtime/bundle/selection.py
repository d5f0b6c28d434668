"""Which compiled variant runs on this device: a pure function, tested as a table.

Preference, using the compatibility rules of `gpu_spec.compatibility`:

1. a cubin for exactly the device's capability (`sm_90` cubin on an sm_90 device);
2. a cubin of the same major and a lower minor, the highest such (`sm_80` cubin on sm_86);
3. PTX for a capability <= the device's, highest first, whose PTX ISA the driver can JIT;
4. otherwise `NoCompatibleVariantError`, naming what the bundle holds, the device and the fix.

A cubin loads only on a driver of at least its toolchain's CUDA major: the toolchain's CUDA
version (`Variant.toolchain_cuda`) decides, never the PTX ISA, which `ptx_version` may have
relabelled. Among equally good variants (same capability, several toolchains) the one needing the
newest driver that this driver still satisfies wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Sequence, Tuple, Union

from gpu_runtime.errors import NoCompatibleVariantError
from gpu_spec.capabilities import Capability, capability_name, parse_capability
from gpu_spec.compatibility import (
    cubin_runs_on,
    driver_loads_cubin,
    driver_loads_ptx,
    ptx_min_driver,
    ptx_runs_on,
)
from gpu_spec.errors import SpecError
from gpu_spec.manifest.model import ModuleSpec, Variant
from gpu_spec.versions import Version, driver_version, format_version, parse_version

KINDS = ("cubin", "ptx")


@dataclass(frozen=True)
class Choice:
    """The variant to load and whether to load its cubins or its PTX."""

    variant: Variant
    kind: str  # "cubin" | "ptx"
    reason: str

    @property
    def capability(self) -> str:
        return self.variant.capability

    def path_of(self, module: ModuleSpec) -> Optional[str]:
        return module.cubin if self.kind == "cubin" else module.ptx


@dataclass
class _Candidates:
    """The variants sorted by how they could run, and why the others cannot."""

    device: Capability
    driver: Version
    exact: List[Tuple[tuple, Variant]] = field(default_factory=list)
    lower: List[Tuple[tuple, Variant]] = field(default_factory=list)
    ptx: List[Tuple[tuple, Variant]] = field(default_factory=list)
    rejected: List[str] = field(default_factory=list)

    def consider_cubin(self, v: Variant, cc: Capability) -> None:
        if not v.has_cubin:
            self.rejected.append(f"{v.capability}: no cubin")
        elif not cubin_runs_on(cc, self.device):
            self.rejected.append(
                f"cubin {v.capability}: does not run on {capability_name(self.device)}"
            )
        elif not driver_loads_cubin(self.driver, v.toolchain_cuda):
            major = parse_version(v.toolchain_cuda)[0]
            self.rejected.append(
                f"cubin {v.capability}: built with CUDA {major}.x, needs a CUDA "
                f"{major}.x driver (have {format_version(self.driver)})"
            )
        else:
            key = (cc[1], parse_version(v.toolchain_cuda))
            (self.exact if cc == self.device else self.lower).append((key, v))

    def consider_ptx(self, v: Variant, cc: Capability) -> None:
        if not v.has_ptx:
            self.rejected.append(f"{v.capability}: no PTX")
        elif not ptx_runs_on(cc, self.device):
            self.rejected.append(f"ptx {v.capability}: newer than {capability_name(self.device)}")
        elif not driver_loads_ptx(self.driver, v.ptx_isa):
            self.rejected.append(
                f"ptx {v.capability}: PTX ISA {v.ptx_isa} needs driver >= "
                f"{format_version(ptx_min_driver(v.ptx_isa))} (have "
                f"{format_version(self.driver)})"
            )
        else:
            self.ptx.append(((cc, ptx_min_driver(v.ptx_isa)), v))


def _device_cc(device_cc: Union[str, Sequence[int]]) -> Capability:
    if isinstance(device_cc, str):
        return parse_capability(device_cc)
    return int(device_cc[0]), int(device_cc[1])


def select_variant(
    variants: Iterable[Variant],
    device_cc: Union[str, Sequence[int]],
    driver: Union[int, str, Sequence[int]],
    *,
    kinds: Sequence[str] = KINDS,
    device_name: Optional[str] = None,
    library: Optional[str] = None,
    bundle: Optional[str] = None,
    fix: Optional[str] = None,
) -> Choice:
    """Pick the variant (and cubin vs PTX) to load; raise NoCompatibleVariantError if none fits.

    `device_cc`: (9, 0) or "sm_90". `driver`: 13000, "13.0" or (13, 0). `kinds`: restrict to
    ("ptx",) or ("cubin",). The other keyword-only names only make the error more useful (`fix`
    replaces the default advice, which is to add the capability to the deploy_bundle).
    """
    variants = list(variants)
    found = _Candidates(device=_device_cc(device_cc), driver=driver_version(driver))
    for v in variants:
        try:
            cc = parse_capability(v.capability)
        except SpecError as e:
            found.rejected.append(f"{v.capability}: unknown capability ({e})")
            continue
        if "cubin" in kinds:
            found.consider_cubin(v, cc)
        if "ptx" in kinds:
            found.consider_ptx(v, cc)
    dev_name = capability_name(found.device)
    if found.exact:
        return Choice(_best(found.exact), "cubin", f"exact cubin for {dev_name}")
    if found.lower:
        v = _best(found.lower)
        return Choice(v, "cubin", f"cubin {v.capability} is binary-compatible with {dev_name}")
    if found.ptx:
        v = _best(found.ptx)
        why = (
            "PTX only (prefer='ptx')" if "cubin" not in kinds else f"no usable cubin for {dev_name}"
        )
        return Choice(
            v,
            "ptx",
            f"{why}; JIT-compiling PTX {v.capability} (ISA {v.ptx_isa}) "
            f"with driver {format_version(found.driver)}",
        )
    raise NoCompatibleVariantError(
        _no_variant_message(variants, found, kinds, device_name, library, bundle, fix)
    )


def _best(ranked: List[Tuple[tuple, Variant]]) -> Variant:
    return max(ranked, key=lambda kv: kv[0])[1]


def _no_variant_message(
    variants: List[Variant],
    found: _Candidates,
    kinds: Sequence[str],
    device_name: Optional[str],
    library: Optional[str],
    bundle: Optional[str],
    fix_hint: Optional[str],
) -> str:
    dev_name, drv = capability_name(found.device), found.driver
    what = f"library '{library}'" if library else "this library"
    where = f" in bundle '{bundle}'" if bundle else ""
    lines = [
        f"No GPU code in {what}{where} can run on this device.",
        f"  device: {f'{device_name} ({dev_name})' if device_name else dev_name}, driver "
        f"supports CUDA {format_version(drv)}",
        f"  bundle holds: {', '.join(v.describe() for v in variants) or 'nothing'}",
    ]
    if tuple(kinds) != KINDS:
        lines.append(f"  only {'/'.join(kinds)} allowed (GPU_RUNTIME_PREFER / prefer=)")
    if found.rejected:
        lines.append("  rejected: " + "; ".join(found.rejected))
    fix = (
        f'  fix: add "{dev_name}" to the capabilities of the deploy_bundle'
        f"{' ' + repr(bundle) if bundle else ''} and run `pants package` on it"
    )
    needs = sorted({ptx_min_driver(v.ptx_isa) for v in variants if v.has_ptx})
    if needs and all(n > drv for n in needs):
        fix += (
            f"; or use a toolchain whose PTX this driver accepts (CUDA <= {format_version(drv)}),"
            f" or upgrade the driver to CUDA >= {format_version(needs[0])}"
        )
    lines.append(f"  fix: {fix_hint}" if fix_hint else fix)
    return "\n".join(lines)
