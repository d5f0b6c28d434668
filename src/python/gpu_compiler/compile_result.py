"""What a compile produces, and its ``metadata.json`` serialization.

Why a module of its own: the data model is what callers (the CLI, the runtime's
JIT path) hold and what ``write_outputs`` publishes, while the pipeline that
fills it in needs the toolchain. metadata.json (schema
``gpu_spec.metadata.METADATA_SCHEMA_VERSION``) is a contract read by the Pants
plugin and the runtime: its keys are those of the ``metadata()`` methods here,
and its bytes are canonical (sorted keys, no timestamps) so that the same
inputs give byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from gpu_spec.compile.options import CompileOptions
from gpu_spec.metadata import METADATA_FILE, METADATA_SCHEMA_VERSION


@dataclass
class KernelInfo:
    """One kernel: what the runtime needs to find its entry and pack its arguments.

    ``args`` is the numba ABI per argument (``gpu_compiler.numba.abi``), None for
    CUDA C++ kernels, whose ``params`` (PTX param types) are all the runtime has.
    """

    name: str
    entry: str
    signature: Optional[str]
    abi: str  # "numba" | "c"
    args: Optional[List[Dict[str, Any]]]
    params: List[str]
    resources: Dict[str, int]
    cooperative: bool = False  # grid sync: the runtime must launch it cooperatively
    # CUDA C++: the declared type of each parameter (gpu_spec.c_types); written only when known
    c_types: Optional[List[str]] = None

    def metadata(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "name": self.name,
            "entry": self.entry,
            "signature": self.signature,
            "abi": self.abi,
            "args": self.args,
            "params": list(self.params),
            "resources": dict(self.resources),
        }
        if self.cooperative:
            out["cooperative"] = True
        if self.c_types is not None:
            out["c_types"] = list(self.c_types)
        return out


@dataclass
class ModuleOutput:
    """One PTX module and the cubin nvJitLink built from exactly that PTX and its ``parts``
    (``gpu_compiler.numba.links``), which the PTX variant links on the device ("ptx_link")."""

    name: str
    ptx: str
    cubin: bytes
    kernels: List[KernelInfo]
    link_log: str = ""
    parts: List[Any] = field(default_factory=list)  # numba_links.LinkPart

    @property
    def ptx_file(self) -> str:
        return "%s.ptx" % self.name

    @property
    def cubin_file(self) -> str:
        return "%s.cubin" % self.name

    @property
    def ptx_bytes(self) -> bytes:
        return self.ptx.encode("utf-8")

    def metadata(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "name": self.name,
            "ptx": self.ptx_file,
            "cubin": self.cubin_file,
            "ptx_sha256": hashlib.sha256(self.ptx_bytes).hexdigest(),
            "cubin_sha256": hashlib.sha256(self.cubin).hexdigest(),
            "kernels": [k.metadata() for k in self.kernels],
        }
        if self.parts:
            out["ptx_link"] = [p.file for p in self.parts]
            out["ptx_link_sha256"] = {
                p.file: hashlib.sha256(p.data).hexdigest() for p in self.parts
            }
        return out


@dataclass
class CompileResult:
    source: str
    source_sha256: str
    language: str
    capability: str
    ptx_isa: str
    min_driver: str
    toolchain: Dict[str, Optional[str]]
    options: CompileOptions
    modules: List[ModuleOutput] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)

    def metadata(self) -> Dict[str, Any]:
        """The ``metadata.json`` object (schema 1). Keys are a contract."""
        return {
            "schema": METADATA_SCHEMA_VERSION,
            "source": self.source,
            "source_sha256": self.source_sha256,
            "language": self.language,
            "capability": self.capability,
            "ptx_isa": self.ptx_isa,
            "min_driver": self.min_driver,
            "toolchain": dict(self.toolchain),
            "options": self.options.metadata(),
            "modules": [m.metadata() for m in self.modules],
        }

    def metadata_json(self) -> bytes:
        """Canonical bytes: sorted keys, indent 2, trailing newline, no timestamps."""
        return (json.dumps(self.metadata(), sort_keys=True, indent=2) + "\n").encode("utf-8")

    def files(self) -> Dict[str, bytes]:
        """Every output file name -> content."""
        out: Dict[str, bytes] = {}
        for m in self.modules:
            out[m.ptx_file] = m.ptx_bytes
            out[m.cubin_file] = m.cubin
            for p in m.parts:  # shared by modules of one compile: the same bytes
                out[p.file] = p.data
        out[METADATA_FILE] = self.metadata_json()
        return out
