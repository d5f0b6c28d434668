"""gpu_runtime packs numba-ABI arguments byte for byte as numba-cuda 0.30.4 does, with no GPU.

How numba is run without a GPU: `_Kernel._prepare_args(ty, val, stream, retr, kernelargs)` is
called on a `_Kernel` made without `__init__` (it reads only `self.extensions`), with real
numba `DeviceNDArray`s whose `gpu_data` is a stand-in holding only the device address (numba
asks nothing else of it for a non-empty array: no context, no allocation). numba then launches
`kernelargs` through cuda.core, whose `ParamHolder` (constructible without a GPU) lays out the
`void**` the driver reads; each parameter is read back through it, with the size gpu_runtime
packs, and compared with gpu_runtime's `ParamBuffer`, from both the checked path
(`abi.pack_args`) and the launch plan's repack.
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Sequence

import numpy as np
import pytest
from cuda.core.cu13._kernel_arg_handler import ParamHolder
from numba.cuda import types as _numba_types
from numba.cuda.cudadrv.devicearray import DeviceNDArray
from numba.cuda.dispatcher import _Kernel
from numba.cuda.np.numpy_support import from_dtype
from numba.cuda.random import xoroshiro128p_dtype, xoroshiro128p_type

from gpu_runtime.launch.abi import pack_args
from gpu_runtime.launch.dtype_json import dtype_to_json
from gpu_runtime.launch.param_buffer import ParamBuffer
from gpu_runtime.launch.plan import build_plan
from gpu_spec.manifest.model import ArgSpec, KernelSpec

types: Any = _numba_types  # numba's type objects: untyped for mypy
PTR = 0x7F12_3400_0000


class _Memory:
    """What numba's DeviceNDArray reads of its gpu_data: the device address."""

    def __init__(self, ptr: int) -> None:
        self.device_ctypes_pointer = ctypes.c_void_p(ptr)


def device_array(shape, dtype, ptr=PTR, strides=None) -> DeviceNDArray:
    dtype = np.dtype(dtype)
    if strides is None:
        strides = np.empty(shape, dtype).strides if shape else ()
    return DeviceNDArray(shape, strides, dtype, gpu_data=_Memory(ptr))


def numba_params(
    argtypes: Sequence[Any], values: Sequence[Any], sizes: Sequence[int]
) -> List[bytes]:
    """The bytes of each parameter numba would hand the driver."""
    kernel = _Kernel.__new__(_Kernel)
    kernel.extensions = []
    kernelargs: List[Any] = []
    for ty, val in zip(argtypes, values):
        # numba-cuda 0.30.4's _prepare_args raises NotImplementedError for voidptr (a
        # RawPointer, not a CPointer); a pointer is a pointer-sized integer either way
        ty = types.CPointer(types.uint8) if ty == types.voidptr else ty
        kernel._prepare_args(ty, val, 0, [], kernelargs)
    assert len(kernelargs) == len(sizes), (kernelargs, sizes)
    holder = ParamHolder(kernelargs)
    pointers = (ctypes.c_void_p * len(kernelargs)).from_address(holder.ptr)
    return [ctypes.string_at(pointers[i] or 0, n) for i, n in enumerate(sizes)]


def arg_spec(ty: Any) -> ArgSpec:
    """The manifest's argument entry for a numba type, as the contract spells it."""
    if isinstance(ty, types.Array):
        dtype = ty.dtype
        dt = dtype_to_json(dtype.dtype if isinstance(dtype, types.Record) else np.dtype(str(dtype)))
        return ArgSpec(kind="array", dtype=dt, ndim=ty.ndim, layout=ty.layout)
    if isinstance(ty, types.CPointer):
        return ArgSpec(kind="pointer", dtype=str(ty.dtype))
    if ty == types.voidptr:
        return ArgSpec(kind="pointer", dtype="void")
    return ArgSpec(kind="scalar", dtype=str(ty))


def ours(argtypes: Sequence[Any], values: Sequence[Any]) -> List[bytes]:
    kernel = KernelSpec(
        name="k", entry="_Zk", abi="numba", args=tuple(arg_spec(t) for t in argtypes)
    )
    packed = pack_args(kernel, values)
    checked = list(ParamBuffer.from_packed(packed).param_bytes())
    plan = build_plan("f", kernel, values, packed)
    buf = plan.repack(values) or plan.pack(
        values, [getattr(v, "__cuda_array_interface__", None) for v in values]
    )
    assert list(buf.param_bytes()) == checked
    return checked


POINT = np.dtype([("x", "<f4"), ("n", "<i4"), ("v", "<f8"), ("flag", "u1")], align=True)
NESTED = np.dtype([("id", "<i8"), ("p", POINT), ("m", "<f4", (2, 3))], align=True)

CASES = [
    ("xoroshiro states", [xoroshiro128p_type[::1]], [device_array((64,), xoroshiro128p_dtype)]),
    (
        "records 2-D, any layout",
        [types.Array(from_dtype(POINT), 2, "A")],
        [device_array((3, 4), POINT, strides=(8 * POINT.itemsize, 2 * POINT.itemsize))],
    ),
    ("nested record", [types.Array(from_dtype(NESTED), 1, "C")], [device_array((5,), NESTED)]),
    ("0-d array", [types.Array(types.float64, 0, "C")], [device_array((), np.float64)]),
    (
        "pointers and scalars",
        [types.CPointer(types.float32), types.voidptr, types.float32, types.int64, types.boolean],
        [PTR + 64, PTR + 128, 1.5, -3, True],
    ),
    (
        "mixed",
        [xoroshiro128p_type[::1], types.CPointer(types.int32), types.Array(types.float32, 0, "C")],
        [
            device_array((10,), xoroshiro128p_dtype),
            PTR + 256,
            device_array((), np.float32, PTR + 512),
        ],
    ),
]


@pytest.mark.parametrize("name,argtypes,values", CASES, ids=[c[0] for c in CASES])
def test_packing_equals_numbas(name, argtypes, values):
    mine = ours(argtypes, values)
    assert numba_params(argtypes, values, [len(b) for b in mine]) == mine


def test_pointer_parameters_take_device_arrays_as_their_address():
    """numba passes a pointer argument's integer as is; gpu_runtime also takes the device
    array at that address (and a numpy integer), giving the same bytes."""
    argtypes = [types.CPointer(types.float32), types.voidptr]
    numba_values = [PTR, PTR + 4096]
    sizes = [8, 8]
    expected = numba_params(argtypes, numba_values, sizes)
    assert ours(argtypes, [device_array((16,), np.float32, PTR), np.uint64(PTR + 4096)]) == expected
    assert ours(argtypes, [PTR, device_array((3,), np.int8, PTR + 4096)]) == expected
