"""The single compile entry point shared by the CLI and the runtime JIT path.

``compile_source(source_path, capability, options)`` dispatches on the file
suffix (``.py`` -> numba-cuda, ``.cu`` -> NVRTC), assembles every module's PTX
to a cubin with nvJitLink, and returns a ``CompileResult`` holding the bytes and
the ``metadata.json`` content. ``write_outputs(result, out_dir)`` writes them.

Keeping compile and write separate is what makes "a failed compile writes
nothing" easy: nothing touches the output directory until every module has
compiled, and the directory is then published with one rename.

metadata.json (schema 1) is a contract read by other code (the Pants plugin,
the runtime); see ``CompileResult.metadata``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from gpu_compiler import ptx as ptxmod
from gpu_compiler.errors import CompileError
from gpu_compiler.resources import resources_for
from gpu_spec.capabilities import parse_capability
from gpu_spec.errors import SpecError
from gpu_spec.metadata import LANG_CUDA, LANG_NUMBA, METADATA_FILE, METADATA_SCHEMA_VERSION
from gpu_spec.ptx_isa import min_driver_for_ptx, toolchain_ptx_isa, validate_ptx_version


@dataclass
class CompileOptions:
    """Compiler options. ``sys_path`` only affects how numba sources import.

    ``defines``, ``include_dirs`` and ``name_expressions`` apply to ``.cu``
    sources only; passing them for a ``.py`` source is an error rather than
    silently ignored.
    """

    fast_math: bool = False
    lineinfo: bool = False
    max_registers: Optional[int] = None
    ptx_version: Optional[str] = None
    defines: Sequence[str] = ()
    include_dirs: Sequence[str] = ()
    name_expressions: Sequence[str] = ()
    sys_path: Sequence[str] = ()

    def metadata(self) -> Dict[str, Any]:
        return {
            "fast_math": bool(self.fast_math),
            "lineinfo": bool(self.lineinfo),
            "max_registers": self.max_registers,
            "ptx_version": self.ptx_version,
            "defines": list(self.defines),
            "include_dirs": list(self.include_dirs),
            "name_expressions": list(self.name_expressions),
        }


@dataclass
class KernelInfo:
    name: str
    entry: str
    signature: Optional[str]
    abi: str  # "numba" | "c"
    args: Optional[List[Dict[str, Any]]]
    params: List[str]
    resources: Dict[str, int]

    def metadata(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "entry": self.entry,
            "signature": self.signature,
            "abi": self.abi,
            "args": self.args,
            "params": list(self.params),
            "resources": dict(self.resources),
        }


@dataclass
class ModuleOutput:
    name: str
    ptx: str
    cubin: bytes
    kernels: List[KernelInfo]
    link_log: str = ""

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
        return {
            "name": self.name,
            "ptx": self.ptx_file,
            "cubin": self.cubin_file,
            "ptx_sha256": hashlib.sha256(self.ptx_bytes).hexdigest(),
            "cubin_sha256": hashlib.sha256(self.cubin).hexdigest(),
            "kernels": [k.metadata() for k in self.kernels],
        }


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
        out[METADATA_FILE] = self.metadata_json()
        return out


def _validate_options(source_path: str, language: str, capability: str, options: CompileOptions) -> None:
    try:
        parse_capability(capability)
    except SpecError as e:
        raise CompileError(str(e)) from None
    if options.max_registers is not None:
        if isinstance(options.max_registers, bool) or not isinstance(options.max_registers, int) or options.max_registers <= 0:
            raise CompileError("max_registers must be a positive integer, got %r" % (options.max_registers,))
    if language == LANG_NUMBA:
        extra = [
            n
            for n, v in (
                ("defines", options.defines),
                ("include_dirs", options.include_dirs),
                ("name_expressions", options.name_expressions),
            )
            if v
        ]
        if extra:
            raise CompileError(
                "%s: %s apply only to CUDA C++ (.cu) sources" % (source_path, ", ".join(extra))
            )


def _override_ptx_version(requested: str, capability: str, toolchain_isa: str) -> str:
    try:
        return validate_ptx_version(requested, capability, toolchain_isa)
    except SpecError as e:
        raise CompileError(str(e)) from None


def compile_source(
    source_path: str, capability: str, options: Optional[CompileOptions] = None
) -> CompileResult:
    """Compile one kernel source for one capability.

    ``source_path`` is used as given (keep it relative to the working
    directory for reproducible outputs). Raises CompileError on any problem
    with the source or options; nothing is written anywhere.
    """
    options = options or CompileOptions()
    ext = os.path.splitext(source_path)[1].lower()
    if ext == ".py":
        language = LANG_NUMBA
    elif ext == ".cu":
        language = LANG_CUDA
    else:
        raise CompileError(
            "%s: unsupported kernel source type %r: expected .py (numba-cuda) or .cu (CUDA C++)"
            % (source_path, ext or "(none)")
        )
    _validate_options(source_path, language, capability, options)
    if not os.path.isfile(source_path):
        raise CompileError("%s: error: no such file" % (source_path,), source=source_path)

    from gpu_compiler import toolchain
    from gpu_compiler.linker import link_ptx

    toolchain_isa = toolchain_ptx_isa(toolchain.cuda_version())
    requested_isa: Optional[str] = None
    if options.ptx_version is not None and toolchain_isa is not None:
        # Fail fast, before the (slower) compile.
        requested_isa = _override_ptx_version(options.ptx_version, capability, toolchain_isa)

    with open(source_path, "rb") as f:
        source_sha256 = hashlib.sha256(f.read()).hexdigest()

    # (module name, ptx, kernels without resources)
    staged: List[Any] = []
    if language == LANG_NUMBA:
        from gpu_compiler.numba_backend import compile_numba_source

        for k in compile_numba_source(
            source_path,
            capability,
            sys_path=options.sys_path,
            fast_math=options.fast_math,
            lineinfo=options.lineinfo,
        ):
            staged.append(
                (k.module_name, k.ptx, [(k.kernel, k.entry, k.signature, "numba", k.args, k.params)])
            )
        warnings: List[str] = []
    else:
        from gpu_compiler.nvrtc_backend import compile_cuda_source

        cu = compile_cuda_source(
            source_path,
            capability,
            defines=options.defines,
            include_dirs=options.include_dirs,
            fast_math=options.fast_math,
            lineinfo=options.lineinfo,
            max_registers=options.max_registers,
            name_expressions=options.name_expressions,
        )
        stem = os.path.splitext(os.path.basename(source_path))[0]
        staged.append((stem, cu.ptx, [(k.name, k.entry, None, "c", None, k.params) for k in cu.kernels]))
        warnings = [cu.log] if cu.log else []

    modules: List[ModuleOutput] = []
    isas = set()
    for name, ptx_text, kernels in staged:
        emitted = ptxmod.ptx_version(ptx_text)
        if options.ptx_version is not None:
            if requested_isa is None:  # toolchain not in the table: bound by what it emitted
                requested_isa = _override_ptx_version(options.ptx_version, capability, emitted)
            ptx_text = ptxmod.set_ptx_version(ptx_text, requested_isa)
        try:
            linked = link_ptx(
                ptx_text,
                capability,
                max_registers=options.max_registers,
                lineinfo=options.lineinfo,
                module_name=name,
                source=source_path,
            )
        except CompileError as e:
            if options.ptx_version is None or requested_isa == emitted:
                raise
            raise CompileError(
                "%s\n(the PTX was generated as ISA %s and relabelled .version %s by the "
                "ptx_version option; it uses features PTX ISA %s does not have: use a "
                "newer ptx_version)" % (e, emitted, requested_isa, requested_isa),
                source=e.source,
                line=e.line,
            ) from None
        for line in linked.info_log.splitlines():
            if "warning" in line.lower():
                warnings.append("%s: %s" % (name, line.strip()))
        infos = [
            KernelInfo(
                name=kname,
                entry=entry,
                signature=sig,
                abi=abi,
                args=args,
                params=list(params),
                resources=resources_for(linked.info_log, entry),
            )
            for (kname, entry, sig, abi, args, params) in kernels
        ]
        isas.add(ptxmod.ptx_version(ptx_text))
        modules.append(ModuleOutput(name=name, ptx=ptx_text, cubin=linked.cubin, kernels=infos, link_log=linked.info_log))

    if len(isas) != 1:  # pragma: no cover - one toolchain emits one ISA
        raise CompileError("%s: modules disagree on PTX ISA: %s" % (source_path, sorted(isas)))
    ptx_isa = isas.pop()
    try:
        min_driver = min_driver_for_ptx(ptx_isa)
    except SpecError as e:
        raise CompileError(str(e)) from None

    return CompileResult(
        source=source_path,
        source_sha256=source_sha256,
        language=language,
        capability=capability,
        ptx_isa=ptx_isa,
        min_driver=min_driver,
        toolchain=toolchain.versions(),
        options=options,
        modules=modules,
        warnings=warnings,
    )


def write_outputs(result: CompileResult, out_dir: str) -> List[str]:
    """Publish the result's files into ``out_dir`` atomically; return file names.

    Files are written to a temporary directory next to ``out_dir`` and renamed
    into place, so a reader (or a crash) never sees a partial set. An existing
    ``out_dir`` is replaced.
    """
    files = result.files()
    out_dir = os.path.normpath(out_dir)
    if os.path.basename(out_dir) in ("", ".", ".."):
        raise ValueError("out_dir must name a directory to create, got %r" % (out_dir,))
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".%s.tmp-" % os.path.basename(out_dir), dir=parent)
    try:
        for name in sorted(files):
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(files[name])
        os.chmod(tmp, 0o755)
        old = None
        if os.path.lexists(out_dir):
            old = tempfile.mkdtemp(prefix=".%s.old-" % os.path.basename(out_dir), dir=parent)
            os.rmdir(old)
            os.rename(out_dir, old)
        os.rename(tmp, out_dir)
        tmp = None
        if old is not None:
            if os.path.isdir(old) and not os.path.islink(old):
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.unlink(old)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return sorted(files)
