"""PTX -> cubin with nvJitLink (through cuda.core), no GPU or driver needed.

Why one linker for both languages: the cubin must correspond exactly to the PTX
we ship (including a rewritten ``.version``), and nvJitLink's verbose log is
where per-kernel resources come from. cuda.core's ``Linker`` uses nvJitLink when
it is available, which it is in the pinned toolchain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gpu_compiler.errors import CompileError


@dataclass(frozen=True)
class LinkResult:
    cubin: bytes
    info_log: str


def link_ptx(
    ptx: str,
    capability: str,
    *,
    max_registers: Optional[int] = None,
    lineinfo: bool = False,
    module_name: str = "module",
    source: Optional[str] = None,
) -> LinkResult:
    """Assemble ``ptx`` for ``capability`` (``"sm_90"``) and return cubin + log.

    A failure (e.g. PTX using instructions its ``.version`` does not have)
    becomes a CompileError carrying nvJitLink's error log.
    """
    from cuda.core import Linker, LinkerOptions, ObjectCode

    kwargs = {"arch": capability, "verbose": True}
    if max_registers is not None:
        kwargs["max_register_count"] = int(max_registers)
    if lineinfo:
        kwargs["lineinfo"] = True
    options = LinkerOptions(**kwargs)
    linker = None
    try:
        obj = ObjectCode.from_ptx(ptx.encode("utf-8"), name=module_name)
        linker = Linker(obj, options=options)
        backend = linker.which_backend()
        if backend != "nvJitLink":
            # The driver's cuLink would tie the output to this machine's driver.
            raise CompileError(
                "the PTX linker backend is %r, not nvJitLink: the toolchain must "
                "provide libnvJitLink (nvidia-nvjitlink wheel)" % (backend,)
            )
        code = linker.link("cubin")
        info = linker.get_info_log() or ""
    except CompileError:
        raise
    except Exception as e:  # nvJitLinkError, CUDAError, ...
        log = ""
        if linker is not None:
            try:
                log = linker.get_error_log() or ""
            except Exception:
                log = ""
        detail = log.strip() or str(e)
        raise CompileError(
            "%snvJitLink failed to build the %s cubin for module %s:\n%s"
            % ("%s: " % source if source else "", capability, module_name, detail),
            source=source,
        ) from None
    finally:
        if linker is not None:
            try:
                linker.close()
            except Exception:
                pass
    return LinkResult(cubin=bytes(code.code), info_log=info)
