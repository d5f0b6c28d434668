"""Kernel specs and launch arguments that the launch tests share: numba-ABI specs built from
argument kinds (`A`, `S`, `P`), C-ABI specs, and the cases packed byte for byte against the
checked path, with fake device arrays (no GPU)."""

from __future__ import annotations

import numpy as np

from gpu_runtime.conftest import FakeDeviceArray
from gpu_spec.manifest.model import ArgSpec, KernelSpec

PTR = 0x7F12_3456_7000


def numba_kernel(args, params=None, name="k"):
    specs = tuple(ArgSpec(**a) for a in args)
    return KernelSpec(
        name=name,
        entry="_Z" + name,
        abi="numba",
        signature=None,
        args=specs,
        params=tuple(params) if params is not None else None,
    )


def A(dtype, ndim, layout="C"):
    return {"kind": "array", "dtype": dtype, "ndim": ndim, "layout": layout}


def S(dtype):
    return {"kind": "scalar", "dtype": dtype}


def P(dtype):
    return {"kind": "pointer", "dtype": dtype}


def c_kernel(params, name="c"):
    return KernelSpec(
        name=name, entry=name, abi="c", signature=None, args=None, params=tuple(params)
    )


def arr(shape, dtype="float32", ptr=PTR, strides=None):
    return FakeDeviceArray(shape, dtype, ptr, strides)


NUMBA_CASES = [
    ([A("float32", 1), S("float32"), A("float32", 1)], [arr((7,)), 2.5, arr((7,), ptr=PTR + 64)]),
    ([A("float32", 2)], [arr((3, 5))]),
    ([A("float32", 2, "A")], [arr((3, 5), strides=(40, 8))]),
    ([A("float64", 3, "F")], [arr((2, 3, 4), "float64", strides=(8, 16, 48))]),
    ([S("int8"), S("uint16"), S("int32"), S("uint64")], [-3, 65535, np.int32(-7), 2**64 - 1]),
    ([S("bool"), S("int64"), S("float64")], [True, np.int64(-(2**63)), np.float32(1.5)]),
    ([S("bool")], [np.bool_(True)]),  # an int other than 0/1 is refused (abi_test)
    ([S("uint8"), A("uint8", 1), S("float32")], [np.uint8(9), arr((0,), "uint8", 0), 1e-40]),
]


C_CASES = [
    (["u64", "u64", "u32", "u32", "u32"], [arr((4,)), arr((4,), ptr=PTR + 16), 2, 3, 4]),
    (["u64", "f32", "f64", "s8", "u16"], [PTR, 1.25, np.float32(2), -1, 7]),
    (["b32", "s64", "u8"], [np.uint32(5), -(2**40), True]),
]
