"""The device bundle's kernel manifest: `cache/manifest.json`, schema 1.

This module imports only the standard library and uses Python 3.9 syntax: the Pants plugin
(CPython 3.9, no numpy, no CUDA) imports it to write the manifest with `build_manifest`, and the
runtime parses it with `load_manifest` / `parse_manifest`.

Layout of a device bundle::

    dist/<bundle>/
        <app>.pex
        cache/
            manifest.json
            <library>/<toolchain>/<capability>/<module>.ptx
            <library>/<toolchain>/<capability>/<module>.cubin

Schema 1 (every key is required unless marked optional; unknown keys are ignored on read)::

    {
      "schema": 1,
      "bundle": "imaging_h200",            # deploy_bundle target name
      "driver": "13.0",                    # CUDA version of the device driver the bundle targets
                                           #   (informational: selection uses the real driver)
      "capabilities": ["sm_90"],           # capabilities the deploy_bundle asked for, sorted
      "toolchains": {                      # toolchain name -> its versions (string or null
                                           #   for a component not installed)
        "cuda13": {"cuda": "13.0", "numba-cuda": "0.30.4", ...}
      },
      "libraries": [                       # one per gpu_kernel target, sorted by name
        {
          "name": "saxpy",                 # gpu_kernel target name: unique, a safe path component
          "target": "src/python/imaging/kernels:saxpy",
          "source": "src/python/imaging/kernels/saxpy.py",
          "source_sha256": "<64 hex>",
          "language": "numba" | "cuda_cpp",
          "variants": [                    # sorted by (capability, toolchain)
            {
              "capability": "sm_90",       # "sm_XY", optionally with an "a"/"f" suffix
              "toolchain": "cuda13",       # a key of "toolchains"
              "ptx_isa": "9.0",            # PTX ISA version of the .ptx files
              "min_driver": "13.0",        # minimum driver CUDA version that JITs that PTX
              "options": {...},            # compile options (JSON object; optional, default {})
              "modules": [                 # compile order
                {
                  "name": "saxpy__0",
                  "ptx": "saxpy/cuda13/sm_90/saxpy__0.ptx",      # or null; relative to cache/
                  "cubin": "saxpy/cuda13/sm_90/saxpy__0.cubin",  # or null; relative to cache/
                  "kernels": [
                    {
                      "name": "saxpy",     # Python function name, or NVRTC name expression
                                           #   ("matmul<float, 16>") for CUDA C++
                      "entry": "_Z...",    # mangled PTX .entry name (what the driver looks up)
                      "signature": "void(float32[::1], float32, ...)" | null,
                      "abi": "numba" | "c",
                      "args": [{"kind": "array", "dtype": "float32", "ndim": 1, "layout": "C"},
                               {"kind": "scalar", "dtype": "float32"}, ...] | null,   # null for "c"
                      "params": ["u64", "f32", ...] | null,  # PTX .param types of the entry
                      "resources": {"registers": 12, "shared_bytes": 0, ...}         # optional
                    }
                  ]
                }
              ]
            }
          ]
        }
      ],
      "files": {"saxpy/cuda13/sm_90/saxpy__0.ptx": "<sha256 hex>", ...}
    }

Changes from the first proposal, and why:

* Files live under `<library>/<toolchain>/<capability>/`: one bundle may carry the same
  capability from two toolchains (say a CUDA 12 PTX for older drivers beside CUDA 13 cubins)
  and `<library>/<capability>/` would collide. `variant_dir()` computes it; the plugin places
  each compile output directory there.
* `"files"` is the single list of every file with its sha256; module paths must appear in it
  and nothing else may. The per-module `ptx_sha256`/`cubin_sha256` of the compile metadata are
  folded into it rather than repeated.
* `"options"` of the compile are kept per variant (they are part of what the code is).
* Paths are POSIX, relative to `cache/`, and may not be absolute, contain `..`, `.`, empty
  components or backslashes. The runtime additionally refuses paths that resolve (through
  symlinks) outside `cache/`, and checks each file's sha256 before loading it.

A reader must refuse a manifest whose "schema" it does not know.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from gpu_runtime.errors import ManifestError

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
METADATA_SCHEMA_VERSION = 1

LANGUAGES = ("numba", "cuda_cpp")
ABIS = ("numba", "c")

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_CAPABILITY_RE = re.compile(r"^sm_[0-9]{2,3}[af]?$")
_VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


# --------------------------------------------------------------------------------------------
# Paths


def check_relpath(path: object) -> Optional[str]:
    """Why `path` is not an acceptable cache-relative file path, or None if it is."""
    if not isinstance(path, str):
        return f"path must be a string, not {type(path).__name__}"
    if not path:
        return "path is empty"
    if "\x00" in path:
        return "path contains a NUL byte"
    if "\\" in path:
        return "path contains a backslash"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "path is absolute"
    for part in path.split("/"):
        if part == "..":
            return "path contains '..'"
        if part in ("", "."):
            return "path has an empty or '.' component"
    return None


def variant_dir(library: str, toolchain: str, capability: str) -> str:
    """Directory (relative to `cache/`) holding one library's files for one toolchain+capability."""
    return f"{library}/{toolchain}/{capability}"


# --------------------------------------------------------------------------------------------
# Data model


@dataclass(frozen=True)
class ArgSpec:
    """One Python-level argument of a numba kernel signature."""

    kind: str  # "array" | "scalar" (others are kept and refused at launch)
    dtype: Optional[str] = None
    ndim: Optional[int] = None
    layout: Optional[str] = None  # "C" | "F" | "A" (arrays only)

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"kind": self.kind}
        if self.dtype is not None:
            d["dtype"] = self.dtype
        if self.ndim is not None:
            d["ndim"] = self.ndim
        if self.layout is not None:
            d["layout"] = self.layout
        return d


@dataclass(frozen=True)
class KernelSpec:
    name: str
    entry: str
    abi: str
    signature: Optional[str] = None
    args: Optional[Tuple[ArgSpec, ...]] = None
    params: Optional[Tuple[str, ...]] = None
    resources: Dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "entry": self.entry,
            "abi": self.abi,
            "signature": self.signature,
            "args": None if self.args is None else [a.to_dict() for a in self.args],
            "params": None if self.params is None else list(self.params),
            "resources": dict(self.resources),
        }

    def describe(self) -> str:
        sig = self.signature
        if sig:
            # "void(float32[::1], float32)" -> "saxpy(float32[::1], float32)"
            return self.name + sig[sig.index("("):] if "(" in sig else f"{self.name} {sig}"
        if self.params is not None:
            return f"{self.name}({', '.join(self.params)})"
        return self.name


@dataclass(frozen=True)
class ModuleSpec:
    name: str
    ptx: Optional[str]
    cubin: Optional[str]
    kernels: Tuple[KernelSpec, ...]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "ptx": self.ptx,
            "cubin": self.cubin,
            "kernels": [k.to_dict() for k in self.kernels],
        }


@dataclass(frozen=True)
class Variant:
    capability: str
    toolchain: str
    ptx_isa: str
    min_driver: str
    modules: Tuple[ModuleSpec, ...]
    options: Dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def has_cubin(self) -> bool:
        return bool(self.modules) and all(m.cubin for m in self.modules)

    @property
    def has_ptx(self) -> bool:
        return bool(self.modules) and all(m.ptx for m in self.modules)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "capability": self.capability,
            "toolchain": self.toolchain,
            "ptx_isa": self.ptx_isa,
            "min_driver": self.min_driver,
            "options": dict(self.options),
            "modules": [m.to_dict() for m in self.modules],
        }

    def describe(self) -> str:
        kinds = "+".join(k for k, ok in (("cubin", self.has_cubin), ("ptx", self.has_ptx)) if ok)
        return (
            f"{self.capability} [{kinds or 'no code'}; toolchain {self.toolchain}, "
            f"PTX ISA {self.ptx_isa} needs driver >= {self.min_driver}]"
        )


@dataclass(frozen=True)
class Library:
    name: str
    target: str
    source: str
    source_sha256: str
    language: str
    variants: Tuple[Variant, ...]

    def kernel_names(self) -> List[str]:
        seen: Dict[str, None] = {}
        for v in self.variants:
            for m in v.modules:
                for k in m.kernels:
                    seen.setdefault(k.name, None)
        return list(seen)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "target": self.target,
            "source": self.source,
            "source_sha256": self.source_sha256,
            "language": self.language,
            "variants": [v.to_dict() for v in self.variants],
        }


@dataclass(frozen=True)
class Manifest:
    bundle: str
    driver: str
    capabilities: Tuple[str, ...]
    toolchains: Dict[str, Dict[str, Optional[str]]]
    libraries: Tuple[Library, ...]
    files: Dict[str, str]
    schema: int = SCHEMA_VERSION

    def library(self, name: str) -> Library:
        for lib in self.libraries:
            if lib.name == name:
                return lib
        raise KeyError(name)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "schema": self.schema,
            "bundle": self.bundle,
            "driver": self.driver,
            "capabilities": list(self.capabilities),
            "toolchains": {k: dict(v) for k, v in self.toolchains.items()},
            "libraries": [lib.to_dict() for lib in self.libraries],
            "files": dict(self.files),
        }


# --------------------------------------------------------------------------------------------
# Reading and validation


class _Checker:
    """Collects every problem so that one error lists them all."""

    def __init__(self) -> None:
        self.errors: List[str] = []

    def err(self, where: str, msg: str) -> None:
        self.errors.append(f"{where}: {msg}" if where else msg)

    def get(self, obj: Mapping[str, Any], key: str, types: Any, where: str,
            optional: bool = False, nullable: bool = False, default: Any = None) -> Any:
        path = f"{where}.{key}" if where else key
        if key not in obj:
            if not optional:
                self.err(path, "missing")
            return default
        val = obj[key]
        if val is None and nullable:
            return None
        # bool is an int subclass: never accept it where a number is meant.
        if not isinstance(val, types) or (isinstance(val, bool) and bool not in _as_tuple(types)):
            self.err(path, f"expected {_type_names(types)}{' or null' if nullable else ''}, "
                           f"got {type(val).__name__} {_short(val)}")
            return default
        return val

    def string(self, obj: Mapping[str, Any], key: str, where: str, pattern: Optional["re.Pattern[str]"] = None,
               what: str = "", nullable: bool = False, optional: bool = False) -> Optional[str]:
        val = self.get(obj, key, str, where, nullable=nullable, optional=optional)
        if isinstance(val, str):
            if not val and not nullable:
                self.err(f"{where}.{key}", "empty string")
            elif pattern is not None and not pattern.match(val):
                self.err(f"{where}.{key}", f"{_short(val)} is not {what or 'valid'}")
        return val


def _as_tuple(types: Any) -> Tuple[Any, ...]:
    return types if isinstance(types, tuple) else (types,)


def _type_names(types: Any) -> str:
    names = {dict: "object", list: "array", str: "string", int: "integer", float: "number",
             bool: "boolean"}
    return " or ".join(names.get(t, t.__name__) for t in _as_tuple(types))


def _short(val: Any) -> str:
    text = json.dumps(val) if not isinstance(val, (bytes, bytearray)) else repr(val)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_args(c: _Checker, raw: Any, where: str) -> Optional[Tuple[ArgSpec, ...]]:
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
                c.err(f"{w}.layout", f"{_short(layout)} is not one of \"C\", \"F\", \"A\"")
        elif kind == "scalar" and dtype is None:
            c.err(f"{w}.dtype", "missing for a scalar argument")
        out.append(ArgSpec(kind=kind or "", dtype=dtype, ndim=ndim, layout=layout))
    return tuple(out)


def _parse_kernel(c: _Checker, raw: Any, where: str) -> Optional[KernelSpec]:
    if not isinstance(raw, dict):
        c.err(where, "expected object")
        return None
    name = c.string(raw, "name", where)
    entry = c.string(raw, "entry", where)
    abi = c.string(raw, "abi", where)
    if abi is not None and abi not in ABIS:
        c.err(f"{where}.abi", f"{_short(abi)} is not one of {', '.join(ABIS)}")
    signature = c.get(raw, "signature", str, where, optional=True, nullable=True)
    args = _parse_args(c, raw.get("args"), f"{where}.args")
    if abi == "numba" and args is None:
        c.err(f"{where}.args", "required for abi \"numba\"")
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
    return KernelSpec(name=name, entry=entry, abi=abi, signature=signature, args=args,
                      params=params, resources=dict(resources))


def _parse_module(c: _Checker, raw: Any, where: str, files: Mapping[str, str]) -> Optional[ModuleSpec]:
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
                c.err(f"{where}.{key}", f"{_short(p)}: {why}")
            elif p not in files:
                c.err(f"{where}.{key}", f"{_short(p)} is not listed in \"files\"")
        paths[key] = p
    if paths["ptx"] is None and paths["cubin"] is None:
        c.err(where, "has neither \"ptx\" nor \"cubin\"")
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


def _parse_variant(c: _Checker, raw: Any, where: str, files: Mapping[str, str],
                   toolchains: Mapping[str, Any]) -> Optional[Variant]:
    if not isinstance(raw, dict):
        c.err(where, "expected object")
        return None
    cap = c.string(raw, "capability", where, _CAPABILITY_RE, "a capability like \"sm_90\"")
    tc = c.string(raw, "toolchain", where)
    if tc is not None and tc not in toolchains:
        c.err(f"{where}.toolchain", f"{_short(tc)} is not a key of \"toolchains\"")
    isa = c.string(raw, "ptx_isa", where, _VERSION_RE, "a version like \"9.0\"")
    mind = c.string(raw, "min_driver", where, _VERSION_RE, "a version like \"13.0\"")
    options = c.get(raw, "options", dict, where, optional=True, default={}) or {}
    mraw = c.get(raw, "modules", list, where, default=[])
    if not mraw:
        c.err(f"{where}.modules", "is empty")
    modules = []
    for i, m in enumerate(mraw):
        ms = _parse_module(c, m, f"{where}.modules[{i}]", files)
        if ms is not None:
            modules.append(ms)
    names = [m.name for m in modules]
    if len(set(names)) != len(names):
        c.err(f"{where}.modules", "module names are not unique")
    if None in (cap, tc, isa, mind):
        return None
    return Variant(capability=cap, toolchain=tc, ptx_isa=isa, min_driver=mind,
                   modules=tuple(modules), options=dict(options))


def _parse_library(c: _Checker, raw: Any, where: str, files: Mapping[str, str],
                   toolchains: Mapping[str, Any]) -> Optional[Library]:
    if not isinstance(raw, dict):
        c.err(where, "expected object")
        return None
    name = c.string(raw, "name", where, _NAME_RE, "a plain name ([A-Za-z0-9_.+-], no leading dot)")
    target = c.string(raw, "target", where)
    source = c.string(raw, "source", where)
    sha = c.string(raw, "source_sha256", where, _SHA256_RE, "a lowercase sha256 hex digest")
    lang = c.string(raw, "language", where)
    if lang is not None and lang not in LANGUAGES:
        c.err(f"{where}.language", f"{_short(lang)} is not one of {', '.join(LANGUAGES)}")
    vraw = c.get(raw, "variants", list, where, default=[])
    if not vraw:
        c.err(f"{where}.variants", "is empty")
    variants = []
    for i, v in enumerate(vraw):
        vs = _parse_variant(c, v, f"{where}.variants[{i}]", files, toolchains)
        if vs is not None:
            variants.append(vs)
    keys = [(v.capability, v.toolchain) for v in variants]
    if len(set(keys)) != len(keys):
        c.err(f"{where}.variants", "more than one variant for the same (capability, toolchain)")
    if None in (name, target, source, sha, lang):
        return None
    return Library(name=name, target=target, source=source, source_sha256=sha, language=lang,
                   variants=tuple(variants))


def parse_manifest(data: Any, origin: str = "manifest") -> Manifest:
    """Validate a decoded manifest.json and return its `Manifest`.

    Raises `ManifestError` listing every problem found (not just the first).
    """
    c = _Checker()
    if not isinstance(data, dict):
        raise ManifestError(f"{origin}: expected a JSON object at the top level, got {type(data).__name__}")
    schema = data.get("schema")
    if schema != SCHEMA_VERSION:
        if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION:
            raise ManifestError(
                f"{origin}: manifest schema {schema} is newer than this gpu_runtime understands "
                f"(schema {SCHEMA_VERSION}); rebuild the bundle with a matching gpu_runtime")
        raise ManifestError(f"{origin}: unsupported manifest schema {_short(schema)} (expected {SCHEMA_VERSION})")

    bundle = c.string(data, "bundle", "")
    driver = c.string(data, "driver", "", _VERSION_RE, "a CUDA version like \"13.0\"")
    caps = c.get(data, "capabilities", list, "", default=[])
    for i, cap in enumerate(caps):
        if not isinstance(cap, str) or not _CAPABILITY_RE.match(cap):
            c.err(f"capabilities[{i}]", f"{_short(cap)} is not a capability like \"sm_90\"")
    tcs = c.get(data, "toolchains", dict, "", default={})
    for tname, tver in tcs.items():
        if not isinstance(tver, dict) or not all(
                isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in tver.items()):
            c.err(f"toolchains.{tname}", "expected an object of string (or null) versions")

    files_raw = c.get(data, "files", dict, "", default={})
    files: Dict[str, str] = {}
    for p, digest in files_raw.items():
        why = check_relpath(p)
        if why:
            c.err(f"files[{_short(p)}]", why)
            continue
        if not isinstance(digest, str) or not _SHA256_RE.match(digest):
            c.err(f"files[{_short(p)}]", f"{_short(digest)} is not a lowercase sha256 hex digest")
            continue
        files[p] = digest

    libraries = []
    lraw = c.get(data, "libraries", list, "", default=[])
    for i, lib in enumerate(lraw):
        ls = _parse_library(c, lib, f"libraries[{i}]", files, tcs)
        if ls is not None:
            libraries.append(ls)
    names = [lib.name for lib in libraries]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        c.err("libraries", f"duplicate library names: {', '.join(dups)}")

    used = set()
    for lib in libraries:
        for v in lib.variants:
            for m in v.modules:
                used.update(p for p in (m.ptx, m.cubin) if p)
    for p in sorted(set(files) - used):
        c.err(f"files[{_short(p)}]", "is not used by any module")

    if c.errors:
        raise ManifestError(f"{origin} is invalid:\n  " + "\n  ".join(c.errors))
    return Manifest(bundle=bundle, driver=driver, capabilities=tuple(caps),
                    toolchains={k: dict(v) for k, v in tcs.items()},
                    libraries=tuple(libraries), files=files, schema=schema)


def load_manifest(path: "os.PathLike[str] | str") -> Manifest:
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


def dumps_manifest(manifest: "Manifest | Mapping[str, Any]") -> str:
    """Deterministic JSON text of a manifest (sorted keys, 2-space indent, trailing newline)."""
    data = manifest.to_dict() if isinstance(manifest, Manifest) else manifest
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=True) + "\n"


# --------------------------------------------------------------------------------------------
# Writing (used by the Pants plugin and by dev mode)


def library_from_metadata(
    name: str,
    target: str,
    outputs: Sequence[Mapping[str, Any]],
) -> Tuple[Dict[str, Any], Dict[str, Dict[str, str]], Dict[str, str]]:
    """Turn one gpu_kernel target's compile outputs into a manifest library entry.

    `outputs`: one mapping per (toolchain, capability) compile, with keys
      * "toolchain": toolchain name (e.g. "cuda13"),
      * "metadata": the decoded metadata.json that gpu_compiler wrote,
      * "dir" (optional): where its files go, relative to cache/
        (default `variant_dir(name, toolchain, capability)`),
      * "digests" (optional): {file name in the compile output: sha256} as measured by the
        caller (the plugin has them from Pants' snapshot); they must agree with the metadata.

    Returns (library dict, {toolchain name: versions}, {cache-relative path: sha256}).
    Raises `ManifestError` on inconsistent or malformed metadata.
    """
    errors: List[str] = []
    if not isinstance(name, str) or not _NAME_RE.match(name) or name in (".", ".."):
        raise ManifestError(f"library name {name!r} is not a plain name ([A-Za-z0-9_.+-], no leading dot)")
    if not outputs:
        raise ManifestError(f"library {name!r}: no compile outputs")
    toolchains: Dict[str, Dict[str, str]] = {}
    files: Dict[str, str] = {}
    variants: List[Dict[str, Any]] = []
    source = source_sha = language = None
    for i, out in enumerate(outputs):
        where = f"library {name!r} output {i}"
        tc = out.get("toolchain")
        md = out.get("metadata")
        if not isinstance(tc, str) or not tc:
            errors.append(f"{where}: missing \"toolchain\" name")
            continue
        if not isinstance(md, dict):
            errors.append(f"{where}: missing \"metadata\" object")
            continue
        if md.get("schema") != METADATA_SCHEMA_VERSION:
            errors.append(f"{where}: metadata schema {md.get('schema')!r} is not {METADATA_SCHEMA_VERSION}")
            continue
        missing = [k for k in ("source", "source_sha256", "language", "capability", "ptx_isa",
                               "min_driver", "toolchain", "modules") if k not in md]
        if missing:
            errors.append(f"{where}: metadata lacks {', '.join(missing)}")
            continue
        cap = md["capability"]
        if source is None:
            source, source_sha, language = md["source"], md["source_sha256"], md["language"]
        elif (md["source"], md["source_sha256"], md["language"]) != (source, source_sha, language):
            errors.append(f"{where}: metadata for {cap} was compiled from a different source "
                          f"({md['source']} {md['source_sha256'][:12]}) than the other outputs "
                          f"({source} {str(source_sha)[:12]}): stale compile output?")
            continue
        versions = {str(k): (None if v is None else str(v)) for k, v in (md.get("toolchain") or {}).items()}
        if tc in toolchains and toolchains[tc] != versions:
            errors.append(f"{where}: toolchain {tc!r} versions {versions} differ from {toolchains[tc]}")
        toolchains.setdefault(tc, versions)
        vdir = out.get("dir") or variant_dir(name, tc, str(cap))
        why = check_relpath(vdir + "/x")
        if why:
            errors.append(f"{where}: output dir {vdir!r}: {why}")
            continue
        digests = out.get("digests") or {}
        modules = []
        for j, m in enumerate(md["modules"]):
            mw = f"{where} module {j}"
            mod: Dict[str, Any] = {"name": m.get("name"), "ptx": None, "cubin": None,
                                   "kernels": m.get("kernels")}
            for key in ("ptx", "cubin"):
                fname = m.get(key)
                if not fname:
                    continue
                if not isinstance(fname, str) or "/" in fname or check_relpath(fname):
                    errors.append(f"{mw}: {key} file name {fname!r} is not a plain file name")
                    continue
                digest = m.get(f"{key}_sha256")
                measured = digests.get(fname)
                if measured is not None and digest is not None and measured != digest:
                    errors.append(f"{mw}: {fname} has sha256 {measured} but its metadata says {digest}")
                    continue
                digest = measured or digest
                if not isinstance(digest, str) or not _SHA256_RE.match(digest):
                    errors.append(f"{mw}: no valid sha256 for {fname}")
                    continue
                path = f"{vdir}/{fname}"
                if path in files and files[path] != digest:
                    errors.append(f"{mw}: two different files would be placed at {path}")
                files[path] = digest
                mod[key] = path
            modules.append(mod)
        variants.append({
            "capability": cap,
            "toolchain": tc,
            "ptx_isa": md["ptx_isa"],
            "min_driver": md["min_driver"],
            "options": md.get("options") or {},
            "modules": modules,
        })
    if errors:
        raise ManifestError("cannot build the manifest:\n  " + "\n  ".join(errors))
    variants.sort(key=lambda v: (str(v["capability"]), str(v["toolchain"])))
    lib = {
        "name": name,
        "target": target,
        "source": source,
        "source_sha256": source_sha,
        "language": language,
        "variants": variants,
    }
    return lib, toolchains, files


def build_manifest(
    bundle: str,
    driver: str,
    libraries: Iterable[Mapping[str, Any]],
    capabilities: Optional[Sequence[str]] = None,
) -> Dict[str, Any]:
    """Build (and validate) the manifest dict for a device bundle.

    `libraries`: one mapping per gpu_kernel target: {"name": target name, "target": address,
    "outputs": [...]} with "outputs" as described in `library_from_metadata`.
    `capabilities`: what the deploy_bundle asked for; each library must then have a variant for
    each of them. Default: the union of the capabilities compiled.

    The caller places each output's files at `variant_dir(name, toolchain, capability)` (or the
    "dir" it gave) under cache/, and writes `dumps_manifest(result)` to cache/manifest.json.
    Raises `ManifestError` if anything is inconsistent.
    """
    libs: List[Dict[str, Any]] = []
    toolchains: Dict[str, Dict[str, str]] = {}
    files: Dict[str, str] = {}
    errors: List[str] = []
    for spec in libraries:
        try:
            lib, tcs, fs = library_from_metadata(spec["name"], spec.get("target", spec["name"]),
                                                 spec.get("outputs") or ())
        except ManifestError as e:
            errors.append(str(e))
            continue
        for k, v in tcs.items():
            if k in toolchains and toolchains[k] != v:
                errors.append(f"toolchain {k!r}: library {lib['name']!r} was compiled with {v}, "
                              f"another with {toolchains[k]}")
            toolchains.setdefault(k, v)
        for p, d in fs.items():
            if p in files and files[p] != d:
                errors.append(f"two different files would be placed at {p}")
            files[p] = d
        libs.append(lib)
    compiled = sorted({str(v["capability"]) for lib in libs for v in lib["variants"]})
    caps = sorted(set(capabilities)) if capabilities is not None else compiled
    if capabilities is not None:
        for lib in libs:
            have = {v["capability"] for v in lib["variants"]}
            lacking = [cap for cap in caps if cap not in have]
            if lacking:
                errors.append(f"library {lib['name']!r} has no code for {', '.join(lacking)}")
    if errors:
        raise ManifestError("cannot build the manifest:\n  " + "\n  ".join(errors))
    libs.sort(key=lambda lib: lib["name"])
    data = {
        "schema": SCHEMA_VERSION,
        "bundle": bundle,
        "driver": driver,
        "capabilities": caps,
        "toolchains": toolchains,
        "libraries": libs,
        "files": dict(sorted(files.items())),
    }
    parse_manifest(data, origin=f"manifest of bundle {bundle!r}")  # validate what we wrote
    return data
