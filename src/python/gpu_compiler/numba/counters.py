"""Restart numba's process-global naming counters for each compile.

Why: numba puts per-process counters into generated names (the ``v<N>`` ABI
tag of every mangled name, ``...B2v1B92...``; the N of shared-array symbols
``_cudapy_smem_N``), so without a restart a kernel's PTX would depend on what
the process compiled before it.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from typing import Any, Iterator, Optional


class _Counter:
    """One numba process-global, monotonically increasing naming counter.

    Its state is an int attribute or an ``itertools.count`` (whose state is
    the next value it yields); ``initial`` is the state of a fresh process.
    """

    def __init__(self, module: str, owner: str, attr: str, initial: int):
        self.module, self.owner, self.attr, self.initial = module, owner, attr, initial

    def _holder(self) -> Any:
        mod = sys.modules.get(self.module)
        if mod is None:
            return None
        holder = getattr(mod, self.owner, None) if self.owner else mod
        return holder if holder is not None and hasattr(holder, self.attr) else None

    def get(self) -> Optional[int]:
        h = self._holder()
        if h is None:
            return None
        v = getattr(h, self.attr)
        if isinstance(v, itertools.count):
            n = next(v)
            setattr(h, self.attr, itertools.count(n))  # put it back unconsumed
            return n
        return v if isinstance(v, int) else None

    def set(self, state: int) -> None:
        h = self._holder()
        if h is None:
            return
        if isinstance(getattr(h, self.attr), itertools.count):
            setattr(h, self.attr, itertools.count(state))
        else:
            setattr(h, self.attr, state)


# Counters that make generated names depend on what the process compiled
# before (all in numba-cuda 0.30.4):
# - FunctionIdentity._unique_ids: the "v<N>" ABI tag in every mangled name;
# - cudaimpl._unique_smem_id: the N in shared-array symbols "_cudapy_smem_N";
# - ir_utils._unique_var_count / _the_max_label: IR variable names and block
#   labels (not visible in PTX today, reset for good measure).
_COUNTERS = (
    _Counter("numba.cuda.core.bytecode", "FunctionIdentity", "_unique_ids", 1),
    _Counter("numba.cuda.cudaimpl", "", "_unique_smem_id", 0),
    _Counter("numba.cuda.core.ir_utils", "", "_unique_var_count", 0),
    _Counter("numba.cuda.core.ir_utils", "_the_max_label", "_value", 0),
)


@contextlib.contextmanager
def fresh_counters() -> Iterator[None]:
    """Restart numba's process-global naming counters for one compile.

    Afterwards each counter continues past both its old and its new value, so
    names stay unique for anything else the host process compiles (the
    runtime's JIT path shares the process with the application).
    """
    import numba.cuda.core.bytecode  # noqa: F401
    import numba.cuda.core.ir_utils  # noqa: F401
    import numba.cuda.cudaimpl  # noqa: F401  (make sure every counter exists)

    saved = [c.get() for c in _COUNTERS]
    for c, old in zip(_COUNTERS, saved):
        if old is not None:
            c.set(c.initial)
    try:
        yield
    finally:
        for c, old in zip(_COUNTERS, saved):
            now = c.get()
            if old is not None and now is not None:
                c.set(max(old, now))
