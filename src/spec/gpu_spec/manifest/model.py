"""The device bundle's kernel manifest: `cache/manifest.json`, schema 1.

The data model and the schema's version live here; `gpu_spec.manifest.parse` reads and checks a
manifest, `gpu_spec.manifest.build` writes one from compile metadata (the plugin for a bundle,
the runtime for its development cache).

Layout of a device bundle::

    dist/<bundle>/
        <app>.pex
        cache/
            manifest.json
            <library>/<toolchain>/<capability>/<module>.ptx
            <library>/<toolchain>/<capability>/<module>.cubin

Schema 1 is `manifest.schema.json` beside this module (JSON Schema 2020-12, with a description
of each key): every manifest the fixtures and the example bundles build is validated against it
(`schema_test.py`, gpu_build's `package_bundle_integration_test.py`). What a schema cannot say
(capabilities known and oldest first, `min_driver` from `ptx_isa`, each module path listed in
`"files"` and each file used, unique names) `gpu_spec.manifest.parse` checks. Unknown keys are
ignored on read.

Why it is laid out so:

* Files live under `<library>/<toolchain>/<capability>/`: one bundle may carry the same
  capability from two toolchains (say a CUDA 12 PTX for older drivers beside CUDA 13 cubins)
  and `<library>/<capability>/` would collide. `variant_dir()` computes it; the plugin places
  each compile output directory there.
* `"files"` is the single list of every file with its sha256; module paths must appear in it
  and nothing else may. The per-module `ptx_sha256`/`cubin_sha256` of the compile metadata are
  folded into it rather than repeated.
* `"options"` of the compile are kept per variant (they are part of what the code is).
* `"bundle_files"` lists what sits beside `cache/` (the app PEX), so that the manifest, and a
  signature over its bytes (`gpu_spec.signature`), covers every file of the bundle
  (`gpu_spec.bundle_files`). The PEX is hashed, not embedded: the manifest is written after it.
* Paths are POSIX, relative to `cache/`, and may not be absolute, contain `..`, `.`, empty
  components or backslashes. The runtime additionally refuses paths that resolve (through
  symlinks) outside `cache/`, and checks each file's sha256 before loading it.

A reader must refuse a manifest whose "schema" it does not know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from gpu_spec.dtypes import DtypeJSON

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"

# What a module's "ptx_link" file is, by its name's ending: the driver linker input type
# (cuLinkAddData's CUjitInputType) the runtime gives it.
PTX_LINK_KINDS = {
    ".ptx": "CU_JIT_INPUT_PTX",  # PTX of a linked part (CUDA C++ compiled by NVRTC)
    ".a": "CU_JIT_INPUT_LIBRARY",  # a device library archive (libcudadevrt.a)
    ".fatbin": "CU_JIT_INPUT_FATBINARY",
    ".cubin": "CU_JIT_INPUT_CUBIN",  # relocatable device code for the capability
}


def ptx_link_kind(path: str) -> Optional[str]:
    """The driver linker input type of a "ptx_link" file, or None if its kind is unknown."""
    for ext, kind in PTX_LINK_KINDS.items():
        if path.endswith(ext):
            return kind
    return None


@dataclass(frozen=True)
class ArgSpec:
    """One Python-level argument of a numba kernel signature."""

    kind: str  # "array" | "scalar" | "pointer" (others are kept and refused at launch)
    # A dtype name, or a record object (gpu_spec.dtypes); "void" for a voidptr pointer. Not
    # hashed: a record is a dict.
    dtype: Optional[DtypeJSON] = field(default=None, hash=False)
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
    # Uses grid-wide sync (cooperative groups): must be launched with a cooperative launch.
    cooperative: bool = False
    # CUDA C++ kernels: the declared C type of each parameter (`gpu_spec.c_types`), one per
    # `params` entry; None in manifests of compilers that did not record them.
    c_types: Optional[Tuple[str, ...]] = None

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {
            "name": self.name,
            "entry": self.entry,
            "abi": self.abi,
            "signature": self.signature,
            "args": None if self.args is None else [a.to_dict() for a in self.args],
            "params": None if self.params is None else list(self.params),
            "resources": dict(self.resources),
        }
        if self.cooperative:
            d["cooperative"] = True
        if self.c_types is not None:
            d["c_types"] = list(self.c_types)
        return d

    def describe(self) -> str:
        sig = self.signature
        if sig:
            # "void(float32[::1], float32)" -> "saxpy(float32[::1], float32)"
            return self.name + sig[sig.index("(") :] if "(" in sig else f"{self.name} {sig}"
        if self.c_types is not None:  # as declared: "matmul<float, 16>(const float*, int)"
            return f"{self.name}({', '.join(self.c_types)})"
        if self.params is not None:
            return f"{self.name}({', '.join(self.params)})"
        return self.name


@dataclass(frozen=True)
class ModuleSpec:
    name: str
    ptx: Optional[str]
    cubin: Optional[str]
    kernels: Tuple[KernelSpec, ...]
    # Files the driver's linker links with `ptx` to load the PTX variant (see PTX_LINK_KINDS);
    # the cubin is already fully linked.
    ptx_link: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {
            "name": self.name,
            "ptx": self.ptx,
            "cubin": self.cubin,
            "kernels": [k.to_dict() for k in self.kernels],
        }
        if self.ptx_link:
            d["ptx_link"] = list(self.ptx_link)
        return d


@dataclass(frozen=True)
class Variant:
    """One library compiled for one capability by one toolchain.

    `toolchain_cuda` is the CUDA version of `toolchain` (from the manifest's "toolchains"): it,
    not the PTX ISA, decides which drivers load the cubins. It is not written back by
    `to_dict`, since "toolchains" holds it once.
    """

    capability: str
    toolchain: str
    toolchain_cuda: str
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
    bundle_files: Dict[str, str] = field(default_factory=dict)

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
            **({"bundle_files": dict(self.bundle_files)} if self.bundle_files else {}),
        }


def dumps_manifest(manifest: Union[Manifest, Mapping[str, Any]]) -> str:
    """Deterministic JSON text of a manifest (sorted keys, 2-space indent, trailing newline)."""
    data = manifest.to_dict() if isinstance(manifest, Manifest) else manifest
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=True) + "\n"
