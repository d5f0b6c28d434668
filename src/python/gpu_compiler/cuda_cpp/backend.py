"""CUDA C++ (``.cu``) to PTX with NVRTC, through ``cuda.bindings.nvrtc``.

Why the raw bindings and not ``cuda.core.Program``: in cuda-core 1.2.2
``Program.compile("ptx")`` calls into the driver and fails without libcuda,
while ``cuda.bindings.nvrtc`` produces PTX on a machine with no GPU. The cubin
is then built from *that* PTX by nvJitLink (``gpu_compiler.link.linker``), so the
shipped PTX and cubin always correspond (also after a ``.version`` rewrite).

Kernels:
* ``extern "C" __global__`` kernels are found by their ``.entry`` in the PTX
  and recorded under their plain name.
* Templates are instantiated through NVRTC name expressions
  (``nvrtcAddNameExpression``), e.g. ``"matmul<float, 16>"``; the kernel is
  recorded with the expression as its name and ``nvrtcGetLoweredName``'s
  mangled name as its entry.
* Any other ``.entry`` (a non-template C++ kernel without ``extern "C"``) is
  recorded under its mangled name.

Paths: NVRTC is given the source path as the caller gave it (relative), which
is what its diagnostics print (``file(line): error: ...``). Quoted includes
are searched next to the including file first, then in the ``-I`` dirs. NVRTC
writes absolute ``.file`` paths for line info; those are made relative to the
working directory.

Hermetic compiles (a ``sandbox_root``, the default): the user headers are
found, checked and read by ``gpu_compiler.cuda_cpp.includes`` and handed to NVRTC
in memory, so NVRTC opens no user file itself. With ``sandbox_root=None`` (dev
mode) NVRTC reads the source's includes from disk as it finds them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gpu_compiler import ptx as ptxmod
from gpu_compiler.cuda_cpp import includes, toolchain_headers
from gpu_compiler.cuda_cpp.includes import CudaProgramText, resolve_includes
from gpu_compiler.cuda_cpp.param_types import PROBE_SOURCE, declared_param_types
from gpu_compiler.errors import CompileError
from gpu_compiler.paths import relativize_text
from gpu_compiler.sandbox import Sandbox
from gpu_spec.capabilities import parse_capability
from gpu_spec.compile.options import CompileOptions

# "path(12): error: ..." / "path(3): catastrophic error: ..."
_DIAG_RE = re.compile(
    r"^(?P<file>[^\n(]+)\((?P<line>\d+)\): (?:catastrophic )?error\b", re.MULTILINE
)

# NVRTC's report of an include the OS sandbox (gpu_compiler.confine) denied it.
_DENIED_RE = re.compile(
    r"^(?P<file>[^\n(]+)\((?P<line>\d+)\): catastrophic error: cannot open source file "
    r'"(?P<name>[^"\n]+)": (?:Permission denied|Operation not permitted)',
    re.MULTILINE,
)


# NVRTC's report of an include found nowhere (with search dirs, or with none).
_MISSING_RE = re.compile(
    r"^(?P<file>[^\n(]+)\((?P<line>\d+)\): catastrophic error: (?:cannot|could not) open "
    r'source file "(?P<name>[^"\n]+)"(?: \(no directories in search list\))?$',
    re.MULTILINE,
)

# The C++ standard library headers libcu++ mirrors as <cuda/std/NAME> (NVRTC has no host one).
_STD_HEADERS = frozenset(
    "algorithm array atomic barrier bit bitset cassert cfloat chrono climits cmath complex "
    "concepts cstddef cstdint cstdlib cstring functional initializer_list iterator latch limits "
    "mdspan memory numeric numbers optional ratio semaphore span string_view tuple type_traits "
    "utility variant version".split()
)


def _missing_header(m: "re.Match[str]", system_dirs: Sequence[str]) -> CompileError:
    """``file:line: error: cannot find header "x.h"`` with where it was looked for and the fix."""
    shown, line, name = m.group("file"), int(m.group("line")), m.group("name")
    if shown.startswith(toolchain_headers.TOOLCHAIN_LABEL + "/"):
        return CompileError(
            '%s:%d: error: this toolchain header includes "%s", a header of the host\'s C/C++ '
            "library, which NVRTC compiles without: it is host code and cannot be part of a "
            "kernel; fix: for CUB include the block- or warp-level headers (<cub/block/...>, "
            "<cub/warp/...>), for the C++ library libcu++'s <cuda/std/...>" % (shown, line, name),
            source=shown,
            line=line,
        )
    if name in _STD_HEADERS:
        fix = (
            "NVRTC compiles device code and has no host C++ standard library: include "
            "<cuda/std/%s> (libcu++, from the toolchain) instead" % name
        )
    else:
        fix = (
            "put the header inside the repo, add the target that owns it to `dependencies` and, "
            "for an #include <...>, its directory to `include_dirs`; for a CUDA library's "
            "headers, add its NVIDIA wheel to the toolchain's lockfile"
        )
    missing = toolchain_headers.missing_sets()
    lacks = ("; the toolchain lacks %s" % ", ".join(missing)) if missing else ""
    return CompileError(
        '%s:%d: error: cannot find header "%s": it is neither an input of the compile nor one '
        "of the toolchain's CUDA headers (%s)%s; fix: %s"
        % (
            shown,
            line,
            name,
            toolchain_headers.describe(system_dirs),
            lacks,
            fix,
        ),
        source=shown,
        line=line,
    )


def _hint(log: str) -> str:
    """A line after NVRTC's log for a failure whose cause is not in its words."""
    if "is not allowed in JIT mode" in log:
        return (
            "\nhint: NVRTC compiles device code only; a header with host code (<cub/cub.cuh>, "
            "cub/device/, thrust algorithms) cannot be included: include the block- or "
            "warp-level headers instead (<cub/block/block_reduce.cuh>, <cub/warp/...>)"
        )
    return ""


def _header_path(m: "re.Match[str]") -> str:
    shown, name = m.group("file"), m.group("name")
    # NVRTC names the header as written; a relative one is looked up first beside its includer.
    return name if os.path.isabs(name) else os.path.join(os.path.dirname(shown), name)


def _unseen_header(m: "re.Match[str]") -> bool:
    """A header NVRTC did not find because the namespaces do not show it (a host path)."""
    from gpu_compiler import confine

    conf = confine.active()
    return conf is not None and conf.unseen(_header_path(m))


def _denied_include(m: "re.Match[str]") -> CompileError:
    """``file:line: error: refused to read <header>: ...``: one line, where NVRTC's is five.

    Why here and not by the ``#include`` scan: this is a spelling the scan did not see (a
    comment or a backslash-newline inside the directive, say) that NVRTC's preprocessor
    did; the OS sandbox kept the file from it, and NVRTC says so this way.
    """
    from gpu_compiler import confine

    shown, line = m.group("file"), int(m.group("line"))
    path = _header_path(m)
    return CompileError(
        "%s:%d: error: %s" % (shown, line, confine.refusal_text(path)),
        source=shown,
        line=line,
    )


@dataclass
class CudaKernel:
    name: str
    entry: str
    params: List[str] = field(default_factory=list)
    # declared C types, one per param (gpu_spec.c_types); None if they could not be read
    c_types: Optional[List[str]] = None


@dataclass
class CudaPTX:
    ptx: str
    kernels: List[CudaKernel]
    log: str = ""


def nvrtc_options(capability: str, options: CompileOptions) -> List[str]:
    """The NVRTC command line, in a fixed order (it is part of the output's identity)."""
    major, minor = parse_capability(capability)
    opts = ["--gpu-architecture=compute_%d%d" % (major, minor), "-std=c++17"]
    for d in options.defines:
        if not d or d.startswith("=") or any(c.isspace() for c in d.split("=", 1)[0]):
            raise CompileError("invalid define %r: expected NAME or NAME=VALUE" % (d,))
        clock = includes.CLOCK_RE.search(d.split("=", 1)[1]) if "=" in d else None
        if clock is not None:
            raise CompileError(
                "invalid define %r: refused %s: it expands to the time of this compile; fix: %s"
                % (d, clock.group(1), includes.FIX_CLOCK)
            )
        opts.append("-D%s" % d)
    for inc in options.include_dirs:
        opts.append("-I%s" % inc)
    if options.fast_math:
        opts.append("--use_fast_math")
    if options.lineinfo:
        opts.append("-lineinfo")
    if options.max_registers is not None:
        opts.append("--maxrregcount=%d" % int(options.max_registers))
    return opts


def _check(result: Tuple, what: str) -> Tuple:
    from cuda.bindings import nvrtc

    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        raise RuntimeError(
            "%s failed: %s" % (what, msg.decode() if isinstance(msg, bytes) else msg)
        )
    return result[1:]


def _get_log(prog) -> str:
    from cuda.bindings import nvrtc

    (size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    buf = b" " * size
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.rstrip(b"\x00").decode("utf-8", "replace")


def compile_cuda_source(source_path: str, capability: str, options: CompileOptions) -> CudaPTX:
    """Compile ``source_path`` to PTX for ``capability``; CompileError on failure.

    ``options.sandbox_root``: every file the compile reads must resolve inside it (None:
    anywhere). CUDA's own headers come from the toolchain (``toolchain_headers``), searched
    after ``options.include_dirs``.
    """
    system_dirs = toolchain_headers.cuda_include_dirs()
    sandbox = Sandbox(options.sandbox_root)
    program = _program_text(source_path, options.include_dirs, sandbox, system_dirs)
    exprs = list(dict.fromkeys(options.name_expressions))  # de-duplicate, keep order
    nvrtc_argv = nvrtc_options(capability, options) + _system_include_options(system_dirs)
    ptx_text, lowered, log = _run_nvrtc(
        program, source_path, capability, nvrtc_argv, exprs, system_dirs
    )
    ptx_text = toolchain_headers.relabel(ptxmod.relativize_file_directives(ptx_text))
    kernels = _kernels(ptx_text, lowered, source_path)
    by_entry = {low: e for e, low in lowered.items()}
    declared = declared_param_types(
        [(k.entry, by_entry.get(k.entry), len(k.params)) for k in kernels],
        lambda probes: _probe_lowered_names(program, source_path, nvrtc_argv, probes),
    )
    for k in kernels:
        k.c_types = declared.get(k.entry)
    return CudaPTX(ptx=ptx_text, kernels=kernels, log=log)


def _probe_lowered_names(
    program: CudaProgramText, source_path: str, options: List[str], probes: List[str]
) -> Optional[Dict[str, str]]:
    """Lowered names of `probes` in the source plus the probe template
    (`gpu_compiler.cuda_cpp.param_types`), front end only; None if NVRTC refuses it."""
    from cuda.bindings import nvrtc

    probe_program = CudaProgramText(program.source + PROBE_SOURCE, program.headers)
    prog = _create_program(probe_program, source_path, probes)
    try:
        opts = [o.encode("utf-8") for o in options + ["-fdevice-syntax-only"]]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None
        out = {}
        for e in probes:
            err, name = nvrtc.nvrtcGetLoweredName(prog, e.encode("utf-8"))
            if err == nvrtc.nvrtcResult.NVRTC_SUCCESS and name:
                out[e] = name.decode("utf-8") if isinstance(name, bytes) else str(name)
        return out
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _system_include_options(system_dirs: Sequence[str]) -> List[str]:
    """``-I`` for the toolchain's header directories: after the target's own (the nvcc order),
    outside `nvrtc_options` because their absolute paths differ from machine to machine."""
    return ["-I%s" % d for d in system_dirs]


def _program_text(
    source_path: str,
    include_dirs: Sequence[str],
    sandbox: Sandbox,
    system_dirs: Sequence[str] = (),
) -> CudaProgramText:
    """The source, and in a hermetic compile every user header it includes, read by us."""
    if sandbox.confined:
        return resolve_includes(source_path, include_dirs, sandbox, system_dirs)
    try:
        with open(source_path, "rb") as f:
            return CudaProgramText(f.read())
    except OSError as e:
        raise CompileError(
            "%s: error: cannot read source: %s" % (source_path, e), source=source_path
        ) from e


def _create_program(program: CudaProgramText, source_path: str, exprs: Sequence[str]) -> Any:
    """An NVRTC program of `program` (its headers handed in memory) with the name expressions
    `exprs` added; the caller compiles it and destroys it."""
    from cuda.bindings import nvrtc

    names = [n.encode("utf-8") for n, _ in program.headers]
    texts = [t for _, t in program.headers]
    (prog,) = _check(
        nvrtc.nvrtcCreateProgram(
            program.source, source_path.encode("utf-8"), len(texts), texts, names
        ),
        "nvrtcCreateProgram",
    )
    try:
        for e in exprs:
            _check(nvrtc.nvrtcAddNameExpression(prog, e.encode("utf-8")), "nvrtcAddNameExpression")
    except BaseException:
        nvrtc.nvrtcDestroyProgram(prog)
        raise
    return prog


def _run_nvrtc(
    program: CudaProgramText,
    source_path: str,
    capability: str,
    options: List[str],
    exprs: List[str],
    system_dirs: Sequence[str] = (),
) -> Tuple[str, Dict[str, str], str]:
    """One NVRTC program: (PTX, name expression -> lowered name, relativized log)."""
    from cuda.bindings import nvrtc

    prog = _create_program(program, source_path, exprs)
    try:
        log = _compile_program(prog, options, source_path, capability, system_dirs)
        ptx_text = _get_ptx(prog)
        lowered = {e: _lowered_name(prog, e, source_path) for e in exprs}
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return ptx_text, lowered, log


def _compile_program(
    prog, options: List[str], source_path: str, capability: str, system_dirs: Sequence[str] = ()
) -> str:
    """Run the compile; its log, or a CompileError located by NVRTC's first diagnostic."""
    from cuda.bindings import nvrtc

    opt_bytes = [o.encode("utf-8") for o in options]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opt_bytes), opt_bytes)
    log = toolchain_headers.relabel(relativize_text(_get_log(prog))).strip()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        denied = _DENIED_RE.search(log)
        if denied is not None:
            raise _denied_include(denied)
        missing = _MISSING_RE.search(log)
        if missing is not None and _unseen_header(missing):
            raise _denied_include(missing)
        if missing is not None:
            raise _missing_header(missing, system_dirs)
        m = _DIAG_RE.search(log)
        raise CompileError(
            "%s: error: NVRTC failed to compile for %s:\n%s%s"
            % (source_path, capability, log or str(err), _hint(log)),
            source=m.group("file") if m else source_path,
            line=int(m.group("line")) if m else None,
        )
    return log


def _get_ptx(prog) -> str:
    from cuda.bindings import nvrtc

    (size,) = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
    buf = b" " * size
    _check(nvrtc.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
    return buf.rstrip(b"\x00").decode("utf-8")


def _lowered_name(prog, expr: str, source_path: str) -> str:
    """The mangled entry NVRTC gave a name expression's instantiation."""
    from cuda.bindings import nvrtc

    try:
        (name,) = _check(
            nvrtc.nvrtcGetLoweredName(prog, expr.encode("utf-8")), "nvrtcGetLoweredName"
        )
    except RuntimeError as ex:
        raise CompileError(
            "%s: error: name expression %r: %s" % (source_path, expr, ex), source=source_path
        ) from None
    return name.decode("utf-8") if isinstance(name, bytes) else str(name)


def _kernels(ptx_text: str, lowered: Dict[str, str], source_path: str) -> List[CudaKernel]:
    """Every ``.entry`` of the PTX, named by its name expression where it has one."""
    entries = ptxmod.parse_entries(ptx_text)
    by_entry = {v: k for k, v in lowered.items()}
    for e, low in lowered.items():
        if low not in entries:
            raise CompileError(
                "%s: error: name expression %r (%s) is not a __global__ kernel"
                % (source_path, e, low),
                source=source_path,
            )
    if not entries:
        raise CompileError(
            '%s: error: no kernels in the PTX: declare extern "C" __global__ kernels '
            "or instantiate templates with name expressions" % (source_path,),
            source=source_path,
        )
    return [
        CudaKernel(name=by_entry.get(entry, entry), entry=entry, params=params)
        for entry, params in entries.items()
    ]


def compile_cuda_part(
    source_path: str,
    capability: str,
    options: CompileOptions,
    *,
    shown: str,
    text: Optional[bytes] = None,
) -> str:
    """Relocatable PTX of CUDA C++ that a numba kernel links (device functions, no kernels
    needed): ``-rdc`` keeps its ``extern`` functions for the linker. ``text``: in-memory
    source (numba's CUSource) instead of the file. ``include_dirs``: where ``#include <...>``
    looks (numba's CUDA_NVRTC_EXTRA_SEARCH_PATHS, see gpu_compiler.numba.links), before
    numba-cuda's own search list from the toolchain (its fp16/bf16 shims include
    ``<cuda_fp16.h>``)."""
    system_dirs = toolchain_headers.numba_include_dirs()
    if text is not None:
        program = CudaProgramText(text)
    else:
        here = shown if not os.path.isabs(shown) else source_path
        sandbox = Sandbox(options.sandbox_root)
        program = _program_text(here, options.include_dirs, sandbox, system_dirs)
    argv = nvrtc_options(capability, options) + ["--relocatable-device-code=true"]
    argv += _system_include_options(system_dirs)
    ptx_text, _lowered, _log = _run_nvrtc(program, shown, capability, argv, [], system_dirs)
    return toolchain_headers.relabel(ptxmod.relativize_file_directives(ptx_text))
