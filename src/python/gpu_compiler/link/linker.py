"""A module's PTX and its linked parts -> cubin with nvJitLink, no GPU or driver needed.

Why one linker for both languages: the cubin must correspond exactly to the PTX we ship
(including a rewritten ``.version``), and nvJitLink's verbose log is where per-kernel resources
come from. Why ``cuda.bindings.nvjitlink`` and not cuda.core's ``Linker``: every input is named
by us (``saxpy__0.ptx``, ``functions.ptx``, ``libcudadevrt.a``), so nvJitLink's messages
("Undefined reference to 'x' in 'saxpy__0.ptx'") name real objects; cuda.core 1.2.2 handed it
unreadable bytes as the object name. The driver's cuLink is never used: it would tie the output
to this machine's driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from gpu_compiler.errors import CompileError
from gpu_compiler.link.errors import link_failure
from gpu_spec.compile.options import CompileOptions


@dataclass(frozen=True)
class LinkInput:
    """One object given to nvJitLink: its kind ("ptx", "library", "cubin", "fatbin")."""

    kind: str
    data: bytes
    name: str  # what nvJitLink calls it in its messages: a plain, readable file name


@dataclass(frozen=True)
class LinkResult:
    cubin: bytes
    info_log: str


def link_options(capability: str, options: CompileOptions) -> List[str]:
    """nvJitLink's options: the register cap and line info apply to the whole linked module."""
    opts = ["-arch=%s" % capability, "-verbose"]
    if options.max_registers is not None:
        opts.append("-maxrregcount=%d" % int(options.max_registers))
    if options.lineinfo:
        opts.append("-lineinfo")
    return opts


def link_ptx(
    ptx: str,
    capability: str,
    *,
    options: CompileOptions,
    module_name: str = "module",
    source: Optional[str] = None,
    parts: Sequence[LinkInput] = (),
) -> LinkResult:
    """Assemble ``ptx`` for ``capability`` (``"sm_90"``), linked with ``parts``.

    A failure (PTX using instructions its ``.version`` lacks, an undefined symbol) becomes a
    CompileError naming the module, the kernel source and nvJitLink's cleaned-up log.
    """
    from cuda.bindings import nvjitlink as nj

    inputs = [LinkInput("ptx", ptx.encode("utf-8"), "%s.ptx" % module_name), *parts]
    kinds = {
        "ptx": nj.InputType.PTX,
        "library": nj.InputType.LIBRARY,
        "cubin": nj.InputType.CUBIN,
        "fatbin": nj.InputType.FATBIN,
    }
    handle = nj.create(*_counted(link_options(capability, options)))
    try:
        try:
            for part in inputs:
                nj.add_data(handle, kinds[part.kind], part.data, len(part.data), part.name)
            nj.complete(handle)
        except nj.nvJitLinkError as e:
            log = _log(handle, nj.get_error_log_size, nj.get_error_log) or str(e)
            raise link_failure(log, capability, module_name, source, inputs) from None
        info = _log(handle, nj.get_info_log_size, nj.get_info_log)
        size = nj.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nj.get_linked_cubin(handle, cubin)
    except CompileError:
        raise
    except Exception as e:  # a toolchain without libnvJitLink, ...
        raise CompileError(
            "%snvJitLink could not link module %s for %s: %s (the toolchain must provide "
            "libnvJitLink: the nvidia-nvjitlink wheel)"
            % ("%s: " % source if source else "", module_name, capability, e),
            source=source,
        ) from None
    finally:
        nj.destroy(handle)
    return LinkResult(cubin=bytes(cubin), info_log=info)


def _counted(options: List[str]):
    return len(options), options


def _log(handle, size_fn, get_fn) -> str:
    try:
        size = size_fn(handle)
        buf = bytearray(size)
        if size:
            get_fn(handle, buf)
    except Exception:
        return ""
    return bytes(buf).rstrip(b"\x00").decode("utf-8", "replace")
