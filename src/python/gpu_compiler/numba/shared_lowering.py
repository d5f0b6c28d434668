"""One lowering of a numba kernel for several capabilities: what a batched compile shares.

Why: numba-cuda's typing and lowering is most of a (kernel, signature, capability) compile
(about 0.1 s of it on the build machine; NVVM and nvJitLink take 0.01-0.02 s each), and one
process compiles a source for all its capabilities. The lowered LLVM IR is the same for every
capability of one *lowering class* but for the ABI tag of each mangled name, which encodes the
flags the function was lowered with, the compute capability included (numba-cuda's
`typed_passes`: `abi_tags=[flags.get_mangle_string()]`). So inside `shared_lowering()`, the
first capability of a class lowers the kernel with a placeholder for each distinct tag and
remembers the flags behind it; each capability of that class then gets that IR with every
placeholder replaced by the tag its flags give with that capability, compiled by NVVM for its
arch through the same code library (`get_asm_strs`). The PTX is byte-identical to a separate
lowering: `numba_shared_lowering_test.py` compares kernels of every kind, and the package
integration test compares the batched layout (which shares) with the per-capability one (one
capability per process, which does not).

Lowering classes: numba-cuda 0.30.4 lowers differently only across capabilities 6.0 (atomics,
`nvvmutils`) and 7.5 (`tanh`, `mathimpl`); every capability gpu_spec accepts (sm_75 and up) is
in one class. Another numba-cuda version is not shared: each capability is lowered on its own,
as outside `shared_lowering()`. Where anything does not check out (a placeholder left in the IR,
tags that do not come back when the lowering's own capability is put back), that capability is
lowered on its own too.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

# numba-cuda versions whose lowering is known to depend on the capability only as below.
VERIFIED_NUMBA_CUDA = ("0.30.4",)
_CLASS_BOUNDS = ((6, 0), (7, 5))
_PLACEHOLDER = "GpuCompilerAbiTag%dZ"

Capability = Tuple[int, int]
_active: Optional[Dict[tuple, "_Lowered"]] = None


@contextlib.contextmanager
def shared_lowering() -> Iterator[None]:
    """Within the block, `ptx_for` lowers each (kernel, signature, options) once per class."""
    global _active
    saved, _active = _active, {}
    try:
        yield
    finally:
        _active = saved


def active() -> bool:
    return _active is not None and _numba_cuda_version() in VERIFIED_NUMBA_CUDA


def lowering_class(cc: Capability) -> int:
    return sum(cc >= bound for bound in _CLASS_BOUNDS)


@dataclass
class _Lowered:
    library: Any  # numba-cuda's CUDACodeLibrary of the first lowering
    irs: List[str]  # its LLVM IR, placeholders in the ABI tags
    flags: Dict[str, Any]  # a placeholder, as mangled, -> the flags whose tag it stands for

    def irs_for(self, cc: Capability) -> Optional[List[str]]:
        """The IR with the tags of capability `cc`; None if a placeholder is left over."""
        tags = {held: _mangled_tag(flags, cc) for held, flags in self.flags.items()}
        out = []
        for ir in self.irs:
            for held, tag in tags.items():
                ir = ir.replace(held, tag)
            if _PLACEHOLDER.split("%")[0] in ir:
                return None
            out.append(ir)
        return out


def ptx_for(key: tuple, cc: Capability, lower: Callable[[], Any]) -> Tuple[List[str], Any]:
    """(PTX modules, code library) of the kernel `key` for `cc`, lowered by `lower()` (a fresh
    lowering for the capability `cc`) the first time its class is asked for."""
    assert _active is not None, "ptx_for outside shared_lowering()"
    slot = key + (lowering_class(cc),)
    lowered = _active.get(slot)
    if lowered is None:
        lowered = _lower_with_placeholders(lower, cc)
        if lowered is None:
            library = lower()
            return library.get_asm_strs(cc=cc), library
        _active[slot] = lowered
    irs = lowered.irs_for(cc)
    if irs is None:
        library = lower()
        return library.get_asm_strs(cc=cc), library
    lowered.library._llvm_strs = irs  # the library's own IR cache, which get_asm_strs compiles
    return lowered.library.get_asm_strs(cc=cc), lowered.library


def _lower_with_placeholders(lower: Callable[[], Any], cc: Capability) -> Optional[_Lowered]:
    from numba.cuda.core.targetconfig import TargetConfig

    real = TargetConfig.get_mangle_string
    seen: Dict[str, Tuple[str, Any]] = {}  # real tag -> (placeholder, flags)

    def placeholder(flags: Any) -> str:
        tag = real(flags)
        if tag not in seen:
            seen[tag] = (_PLACEHOLDER % len(seen), flags.copy())
        return seen[tag][0]

    TargetConfig.get_mangle_string = placeholder
    try:
        library = lower()
    finally:
        TargetConfig.get_mangle_string = real
    lowered = _Lowered(
        library, list(library.llvm_strs), {_mangle(p): flags for p, flags in seen.values()}
    )
    # The tags must come back when the lowering's own capability is put back, and every
    # placeholder must sit only inside a mangled name; else this kernel is not shared.
    if {_mangled_tag(f, cc) for f in lowered.flags.values()} != {_mangle(t) for t in seen}:
        return None
    for plain, _ in seen.values():
        held = _mangle(plain)
        if sum(ir.count(plain) for ir in lowered.irs) != sum(ir.count(held) for ir in lowered.irs):
            return None
    return lowered


def _mangled_tag(flags: Any, cc: Capability) -> str:
    retargeted = flags.copy()
    retargeted.compute_capability = cc
    return _mangle(retargeted.get_mangle_string())


def _mangle(tag: str) -> str:
    from numba.cuda.itanium_mangler import mangle_abi_tag

    return mangle_abi_tag(tag)


def _numba_cuda_version() -> str:
    try:
        import numba_cuda

        return str(numba_cuda.__version__)
    except Exception:  # pragma: no cover - numba-cuda without a version: not shared
        return ""
