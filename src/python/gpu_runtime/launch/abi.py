"""Kernel arguments, as the runtime uses them: `pack_args` and `select_overload`.

Two ABIs, one module each: "numba" (kernels compiled by numba-cuda, `gpu_runtime.launch.numba_abi`)
and "c" (CUDA C++ through NVRTC, `gpu_runtime.launch.c_abi`). Both produce a `PackedArgs`
(`gpu_runtime.launch.params`): the typed values, one per PTX parameter, from which a launch takes
numpy scalars and `Kernel.pack` the byte image. `gpu_runtime.launch.dispatch` picks among several
signatures of one kernel name; `gpu_runtime.launch.arrays` reads device arrays.
"""

from __future__ import annotations

from typing import Any, Sequence

from gpu_runtime.errors import DispatchError
from gpu_runtime.launch.c_abi import pack_c_args
from gpu_runtime.launch.dispatch import select_overload
from gpu_runtime.launch.numba_abi import pack_numba_args
from gpu_runtime.launch.params import PackedArgs
from gpu_spec.manifest.model import KernelSpec

__all__ = ["PackedArgs", "pack_args", "select_overload"]


def pack_args(kernel: KernelSpec, args: Sequence[Any]) -> PackedArgs:
    """Pack `args` by `kernel`'s ABI; DispatchError if they do not fit."""
    if kernel.abi == "numba":
        return pack_numba_args(kernel, args)
    if kernel.abi == "c":
        return pack_c_args(kernel, args)
    raise DispatchError(f"kernel {kernel.name}: unknown ABI {kernel.abi!r}")
