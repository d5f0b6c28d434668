"""The order in which a numba kernel's linked device-function libraries reach NVVM, made stable.

Why: numba-cuda 0.30.4 keeps a code library's linked libraries in a `set` of library objects and
hands their LLVM modules to NVVM in that set's order (`CUDACodeLibrary.modules`), which follows
the objects' addresses. NVVM emits the modules' globals in the order it gets them, so a kernel
calling two or more device functions (numba.cuda.random's, a cooperative group's, a helper's)
got PTX whose declarations came in an order that depended on what the process had allocated
before: one process per capability and one process for all capabilities gave different bytes
(seen for numba_docs' montecarlo, laplace and cg kernels), and so could two machines. Here the
linked libraries are ordered by name, then by the numba ids of the functions each defines (the
`v<N>` of their mangled names, which `gpu_compiler.numba.counters` restarts per compile): the
same order in any process and for every capability. A kernel with at most one linked library
is unchanged.
"""

from __future__ import annotations

import re
from typing import Any, List, Tuple

_UID = re.compile(r"define[^\n]*?B\d+v(\d+)")
_installed = False


def install() -> None:
    """Order `CUDACodeLibrary.modules` stably, once per process (see the module docstring)."""
    global _installed
    if _installed:
        return
    from numba.cuda.codegen import CUDACodeLibrary

    def modules(self: Any) -> List[Any]:
        linked = sorted(self._linking_libraries, key=library_order)
        return [self._module] + [mod for lib in linked for mod in lib.modules]

    CUDACodeLibrary.modules = property(modules)  # type: ignore[assignment]
    _installed = True


def library_order(library: Any) -> Tuple[str, Tuple[int, ...]]:
    """(name, ids of the functions its own module defines): the same for every capability."""
    module = getattr(library, "_module", None)  # an ExternalCodeLibrary (linked files) has none
    ids = sorted({int(n) for n in _UID.findall(str(module))}) if module is not None else []
    return (str(library.name), tuple(ids))
