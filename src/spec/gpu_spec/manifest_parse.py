"""Reading `cache/manifest.json`: every field checked against the shared rules.

A manifest that breaks any rule is refused with one `ManifestError` that lists every problem,
so that a hand-edited or truncated bundle is explained in one go.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from gpu_spec.capabilities import parse_capability, sort_capabilities
from gpu_spec.errors import ManifestError, SpecError
from gpu_spec.manifest import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    ArgSpec,
    KernelSpec,
    Library,
    Manifest,
    ModuleSpec,
    Variant,
)
from gpu_spec.manifest_checker import NAME_RE, SHA256_RE, Checker, short
from gpu_spec.metadata import ABIS, LANGUAGES
from gpu_spec.paths import check_relpath
from gpu_spec.ptx_isa import min_driver_for_ptx
from gpu_spec.versions import is_version


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
        dtype = c.get(a, "dtype", str, w, optional=True, nullable=True)
        ndim = c.get(a, "ndim", int, w, optional=True, nullable=True)
        layout = c.get(a, "layout", str, w, optional=True, nullable=True)
        if kind == "array":
            if dtype is None:
                c.err(f"{w}.dtype", "missing for an array argument")
            if ndim is None or ndim < 0:
                c.err(f"{w}.ndim", "missing or negative for an array argument")
            if layout not in ("C", "F", "A"):
                c.err(f"{w}.layout", f'{short(layout)} is not one of "C", "F", "A"')
        elif kind == "scalar" and dtype is None:
            c.err(f"{w}.dtype", "missing for a scalar argument")
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
    resources = c.get(raw, "resources", dict, where, optional=True, nullable=True) or {}
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
    return ModuleSpec(name=name, ptx=paths["ptx"], cubin=paths["cubin"], kernels=tuple(kernels))


def _parse_variant(
    c: Checker, raw: Any, where: str, files: Mapping[str, str], toolchains: Mapping[str, Any]
) -> Optional[Variant]:
    if not isinstance(raw, dict):
        c.err(where, "expected object")
        return None
    cap = _capability(c, raw.get("capability"), f"{where}.capability")
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


def _capability(c: Checker, value: Any, where: str) -> Optional[str]:
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


def _parse_library(
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


def parse_manifest(data: Any, origin: str = "manifest") -> Manifest:
    """Validate a decoded manifest.json and return its `Manifest`.

    Raises `ManifestError` listing every problem found (not just the first).
    """
    if not isinstance(data, dict):
        raise ManifestError(
            f"{origin}: expected a JSON object at the top level, got {type(data).__name__}"
        )
    _check_schema(data.get("schema"), origin)
    c = Checker()
    bundle = c.string(data, "bundle", "")
    driver = c.string(data, "driver", "")
    if driver and not is_version(driver):
        c.err("driver", f'{short(driver)} is not a CUDA version like "13.0"')
    caps = _parse_capabilities(c, c.get(data, "capabilities", list, "", default=[]))
    tcs = _parse_toolchains(c, c.get(data, "toolchains", dict, "", default={}))
    files = _parse_files(c, c.get(data, "files", dict, "", default={}))
    libraries = _parse_libraries(c, c.get(data, "libraries", list, "", default=[]), files, tcs)
    if c.errors:
        raise ManifestError(f"{origin} is invalid:\n  " + "\n  ".join(c.errors))
    return Manifest(
        bundle=bundle or "",
        driver=driver or "",
        capabilities=caps,
        toolchains=tcs,
        libraries=libraries,
        files=files,
    )


def _check_schema(schema: Any, origin: str) -> None:
    if schema == SCHEMA_VERSION:
        return
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION:
        raise ManifestError(
            f"{origin}: manifest schema {schema} is newer than this gpu_runtime understands "
            f"(schema {SCHEMA_VERSION}); rebuild the bundle with a matching gpu_runtime"
        )
    raise ManifestError(
        f"{origin}: unsupported manifest schema {short(schema)} (expected {SCHEMA_VERSION})"
    )


def _parse_capabilities(c: Checker, raw: List[Any]) -> Tuple[str, ...]:
    caps = [
        cap
        for i, v in enumerate(raw)
        if (cap := _capability(c, v, f"capabilities[{i}]")) is not None
    ]
    if len(caps) == len(raw) and caps != sort_capabilities(caps):
        c.err("capabilities", f"{short(caps)} are not unique and oldest first")
    return tuple(caps)


def _parse_toolchains(c: Checker, raw: Mapping[str, Any]) -> Dict[str, Dict[str, Optional[str]]]:
    toolchains = {}
    for name, versions in raw.items():
        if not isinstance(versions, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in versions.items()
        ):
            c.err(f"toolchains.{name}", "expected an object of string (or null) versions")
            continue
        if not is_version(versions.get("cuda")):
            c.err(
                f"toolchains.{name}.cuda",
                f"{short(versions.get('cuda'))} is not a CUDA " f'version like "13.0"',
            )
            continue
        toolchains[name] = dict(versions)
    return toolchains


def _parse_files(c: Checker, raw: Mapping[str, Any]) -> Dict[str, str]:
    files: Dict[str, str] = {}
    for path, digest in raw.items():
        why = check_relpath(path)
        if why:
            c.err(f"files[{short(path)}]", why)
        elif not isinstance(digest, str) or not SHA256_RE.match(digest):
            c.err(f"files[{short(path)}]", f"{short(digest)} is not a lowercase sha256 hex digest")
        else:
            files[path] = digest
    return files


def _parse_libraries(
    c: Checker, raw: List[Any], files: Mapping[str, str], toolchains: Mapping[str, Any]
) -> Tuple[Library, ...]:
    libraries = [
        lib
        for i, r in enumerate(raw)
        if (lib := _parse_library(c, r, f"libraries[{i}]", files, toolchains)) is not None
    ]
    names = [lib.name for lib in libraries]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        c.err("libraries", f"duplicate library names: {', '.join(dups)}")
    used = {
        path
        for lib in libraries
        for v in lib.variants
        for m in v.modules
        for path in (m.ptx, m.cubin)
        if path
    }
    for path in sorted(set(files) - used):
        c.err(f"files[{short(path)}]", "is not used by any module")
    return tuple(libraries)


def load_manifest(path: Union[str, "os.PathLike[str]"]) -> Manifest:
    """Read and validate a manifest.json file (or the manifest.json inside a cache directory)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, MANIFEST_NAME)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ManifestError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ManifestError(f"{path} is not valid JSON: {e}") from e
    return parse_manifest(data, origin=path)
