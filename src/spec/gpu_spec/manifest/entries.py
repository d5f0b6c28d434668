"""Reading one library entry of a manifest: its variants, modules, kernels and arguments.

`gpu_spec.manifest.parse` reads the manifest around these; both record every problem in one
`Checker`, so that one error lists them all.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from gpu_spec.c_types import c_type_problem
from gpu_spec.capabilities import parse_capability
from gpu_spec.dtypes import dtype_problems
from gpu_spec.errors import SpecError
from gpu_spec.manifest.checker import NAME_RE, SHA256_RE, Checker, short
from gpu_spec.manifest.model import (
    PTX_LINK_KINDS,
    ArgSpec,
    KernelSpec,
    Library,
    ModuleSpec,
    Variant,
    ptx_link_kind,
)
from gpu_spec.manifest.paths import check_relpath
from gpu_spec.metadata import ABIS, LANGUAGES
from gpu_spec.ptx_isa import min_driver_for_ptx


def _parse_args(c: Checker, raw: Any, where: str) -> Optional[Tuple[ArgSpec, ...]]:
    if raw is None:
        return None
    if not isinstance(raw, list):
        c.err(where, f"expected array or null, got {type(raw).__name__}")
        return None
    out = []
    for i, a in enumerate(raw):
        w = f"{where}[{i}]"
        if not isinstance(a, dict):
            c.err(w, "expected object")
            continue
        kind = c.string(a, "kind", w)
        dtype = c.get(a, "dtype", (str, dict), w, optional=True, nullable=True)
        for problem in dtype_problems(dtype, f"{w}.dtype") if dtype is not None else ():
            c.err("", problem)
        ndim = c.get(a, "ndim", int, w, optional=True, nullable=True)
        layout = c.get(a, "layout", str, w, optional=True, nullable=True)
        if kind == "array":
            if dtype is None:
                c.err(f"{w}.dtype", "missing for an array argument")
            if ndim is None or ndim < 0:
                c.err(f"{w}.ndim", "missing or negative for an array argument")
            if layout not in ("C", "F", "A"):
                c.err(f"{w}.layout", f'{short(layout)} is not one of "C", "F", "A"')
        elif kind in ("scalar", "pointer") and dtype is None:
            c.err(f"{w}.dtype", f"missing for a {kind} argument")
        out.append(ArgSpec(kind=kind or "", dtype=dtype, ndim=ndim, layout=layout))
    return tuple(out)


def _parse_kernel(c: Checker, raw: Any, where: str) -> Optional[KernelSpec]:
    if not isinstance(raw, dict):
        c.err(where, "expected object")
        return None
    name = c.string(raw, "name", where)
    entry = c.string(raw, "entry", where)
    abi = c.string(raw, "abi", where)
    if abi is not None and abi not in ABIS:
        c.err(f"{where}.abi", f"{short(abi)} is not one of {', '.join(ABIS)}")
    signature = c.get(raw, "signature", str, where, optional=True, nullable=True)
    args = _parse_args(c, raw.get("args"), f"{where}.args")
    if abi == "numba" and args is None:
        c.err(f"{where}.args", 'required for abi "numba"')
    params_raw = c.get(raw, "params", list, where, optional=True, nullable=True)
    params: Optional[Tuple[str, ...]] = None
    if params_raw is not None:
        if not all(isinstance(p, str) and p for p in params_raw):
            c.err(f"{where}.params", "expected an array of PTX type strings")
        else:
            params = tuple(params_raw)
    c_types_raw = c.get(raw, "c_types", list, where, optional=True, nullable=True)
    c_types: Optional[Tuple[str, ...]] = None
    if c_types_raw is not None:
        problem = next(filter(None, map(c_type_problem, c_types_raw)), None)
        if problem is not None:
            c.err(f"{where}.c_types", problem)
        elif params is not None and len(c_types_raw) != len(params):
            c.err(
                f"{where}.c_types",
                f"{len(c_types_raw)} declared types for {len(params)} PTX parameters",
            )
        else:
            c_types = tuple(c_types_raw)
    resources = c.get(raw, "resources", dict, where, optional=True, nullable=True) or {}
    cooperative = c.get(raw, "cooperative", bool, where, optional=True, default=False)
    if name is None or entry is None or abi is None:
        return None
    return KernelSpec(
        name=name,
        entry=entry,
        abi=abi,
        signature=signature,
        args=args,
        params=params,
        resources=dict(resources),
        cooperative=bool(cooperative),
        c_types=c_types,
    )


def _parse_module(
    c: Checker, raw: Any, where: str, files: Mapping[str, str]
) -> Optional[ModuleSpec]:
    if not isinstance(raw, dict):
        c.err(where, "expected object")
        return None
    name = c.string(raw, "name", where)
    paths = {}
    for key in ("ptx", "cubin"):
        p = c.get(raw, key, str, where, nullable=True)
        if p is not None:
            why = check_relpath(p)
            if why:
                c.err(f"{where}.{key}", f"{short(p)}: {why}")
            elif p not in files:
                c.err(f"{where}.{key}", f'{short(p)} is not listed in "files"')
        paths[key] = p
    if paths["ptx"] is None and paths["cubin"] is None:
        c.err(where, 'has neither "ptx" nor "cubin"')
    ptx_link = _parse_ptx_link(c, raw, where, files, paths["ptx"])
    kraw = c.get(raw, "kernels", list, where, default=[])
    kernels = []
    for i, k in enumerate(kraw):
        ks = _parse_kernel(c, k, f"{where}.kernels[{i}]")
        if ks is not None:
            kernels.append(ks)
    if not kraw:
        c.err(f"{where}.kernels", "is empty")
    if name is None:
        return None
    return ModuleSpec(
        name=name,
        ptx=paths["ptx"],
        cubin=paths["cubin"],
        kernels=tuple(kernels),
        ptx_link=ptx_link,
    )


def _parse_ptx_link(
    c: Checker, raw: Mapping[str, Any], where: str, files: Mapping[str, str], ptx: Optional[str]
) -> Tuple[str, ...]:
    """A module's "ptx_link" files: listed in "files", of a kind the driver linker takes."""
    items = c.get(raw, "ptx_link", list, where, optional=True, default=[]) or []
    out = []
    for i, p in enumerate(items):
        w = f"{where}.ptx_link[{i}]"
        why = check_relpath(p) if isinstance(p, str) else "not a string"
        if why:
            c.err(w, f"{short(p)}: {why}")
        elif p not in files:
            c.err(w, f'{short(p)} is not listed in "files"')
        elif ptx_link_kind(p) is None:
            c.err(w, f"{short(p)} does not end in one of {', '.join(PTX_LINK_KINDS)}")
        else:
            out.append(p)
    if items and ptx is None:
        c.err(f"{where}.ptx_link", 'given for a module without "ptx"')
    return tuple(out)


def _parse_variant(
    c: Checker, raw: Any, where: str, files: Mapping[str, str], toolchains: Mapping[str, Any]
) -> Optional[Variant]:
    if not isinstance(raw, dict):
        c.err(where, "expected object")
        return None
    cap = parse_capability_field(c, raw.get("capability"), f"{where}.capability")
    tc = c.string(raw, "toolchain", where)
    if tc is not None and tc not in toolchains:
        c.err(f"{where}.toolchain", f'{short(tc)} is not a key of "toolchains"')
    isa = c.string(raw, "ptx_isa", where)
    mind = c.string(raw, "min_driver", where)
    if isa is not None and mind is not None:
        _check_min_driver(c, isa, mind, where)
    options = c.get(raw, "options", dict, where, optional=True, default={}) or {}
    mraw = c.get(raw, "modules", list, where, default=[])
    if not mraw:
        c.err(f"{where}.modules", "is empty")
    modules = [
        m
        for i, r in enumerate(mraw)
        if (m := _parse_module(c, r, f"{where}.modules[{i}]", files)) is not None
    ]
    names = [m.name for m in modules]
    if len(set(names)) != len(names):
        c.err(f"{where}.modules", "module names are not unique")
    if cap is None or tc is None or isa is None or mind is None or tc not in toolchains:
        return None
    return Variant(
        capability=cap,
        toolchain=tc,
        toolchain_cuda=toolchains[tc].get("cuda") or "",
        ptx_isa=isa,
        min_driver=mind,
        modules=tuple(modules),
        options=dict(options),
    )


def parse_capability_field(c: Checker, value: Any, where: str) -> Optional[str]:
    try:
        parse_capability(value)
    except SpecError as e:
        c.err(where, str(e))
        return None
    return value


def _check_min_driver(c: Checker, isa: str, min_driver: str, where: str) -> None:
    """`min_driver` is derived data: it must be what the PTX ISA table says."""
    try:
        expected = min_driver_for_ptx(isa)
    except SpecError as e:
        c.err(f"{where}.ptx_isa", str(e))
        return
    if min_driver != expected:
        c.err(
            f"{where}.min_driver",
            f"{short(min_driver)} is not {expected}, the oldest driver "
            f"that loads PTX ISA {isa}",
        )


def parse_library(
    c: Checker, raw: Any, where: str, files: Mapping[str, str], toolchains: Mapping[str, Any]
) -> Optional[Library]:
    if not isinstance(raw, dict):
        c.err(where, "expected object")
        return None
    name = c.string(raw, "name", where, NAME_RE, "a plain name ([A-Za-z0-9_.+-], no leading dot)")
    target = c.string(raw, "target", where)
    source = c.string(raw, "source", where)
    sha = c.string(raw, "source_sha256", where, SHA256_RE, "a lowercase sha256 hex digest")
    lang = c.string(raw, "language", where)
    if lang is not None and lang not in LANGUAGES:
        c.err(f"{where}.language", f"{short(lang)} is not one of {', '.join(LANGUAGES)}")
    vraw = c.get(raw, "variants", list, where, default=[])
    if not vraw:
        c.err(f"{where}.variants", "is empty")
    variants = [
        v
        for i, r in enumerate(vraw)
        if (v := _parse_variant(c, r, f"{where}.variants[{i}]", files, toolchains)) is not None
    ]
    keys = [(v.capability, v.toolchain) for v in variants]
    if len(set(keys)) != len(keys):
        c.err(f"{where}.variants", "more than one variant for the same (capability, toolchain)")
    if name is None or target is None or source is None or sha is None or lang is None:
        return None
    return Library(
        name=name,
        target=target,
        source=source,
        source_sha256=sha,
        language=lang,
        variants=tuple(variants),
    )
