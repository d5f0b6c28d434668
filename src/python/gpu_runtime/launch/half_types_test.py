"""float16 and bfloat16 arguments, byte for byte, in both ABIs: numba's `float16` / `bfloat16`
and C++'s `__half`, `__half2`, `__nv_bfloat16`, `__nv_bfloat162` (declared types as NVRTC
records them: by value `.align 2 .b8 [2]` / `.align 4 .b8 [4]`, pointers `.u64`)."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

from gpu_runtime.conftest import FakeDeviceArray, numba_array_params
from gpu_runtime.errors import DispatchError
from gpu_runtime.launch.abi import pack_args
from gpu_runtime.launch.c_abi import pack_c_args
from gpu_runtime.launch.numba_abi import pack_numba_args
from gpu_runtime.launch.plan import build_plan
from gpu_runtime.launch.scalars import bfloat16_bits
from gpu_spec.manifest.model import ArgSpec, KernelSpec

PTR = 0x7F12_3456_7000
BF16 = np.dtype(ml_dtypes.bfloat16)


def bf16_bytes(*values: float) -> bytes:
    return np.array(values, dtype=BF16).tobytes()


def f16_bytes(*values: float) -> bytes:
    return np.array(values, dtype=np.float16).tobytes()


# The h2k kernel of this file's docstring, as gpu_compiler recorded it from NVRTC 13.0.
H2K = KernelSpec(
    name="h2k",
    entry="h2k",
    abi="c",
    params=(
        "align 4 b8[4]",
        "align 2 b8[2]",
        "align 4 b8[4]",
        "align 2 b8[2]",
        "u64",
        "u64",
        "u64",
    ),
    c_types=(
        "__half2",
        "__nv_bfloat16",
        "__nv_bfloat162",
        "__half",
        "const __half2*",
        "__nv_bfloat16*",
        "float*",
    ),
)


def h2k_args(**overrides):
    args = {
        "s": (1.5, -2.0),
        "b": 3.140625,
        "b2": np.array([0.5, -0.25], dtype=BF16),
        "h": np.float16(0.1),
        "x": FakeDeviceArray((8,), np.float16, PTR),
        "y": FakeDeviceArray((4,), BF16, PTR + 64),
        "o": FakeDeviceArray((1,), np.float32, PTR + 128),
    }
    args.update(overrides)
    return list(args.values())


def test_c_half_types_by_value_and_pointers():
    p = pack_c_args(H2K, h2k_args())
    assert p.image == (
        f16_bytes(1.5, -2.0)
        + bf16_bytes(3.140625)
        + b"\0\0"  # align 4
        + bf16_bytes(0.5, -0.25)
        + f16_bytes(0.1)
        + b"\0" * 2  # align 8
        + struct.pack("<QQQ", PTR, PTR + 64, PTR + 128)
    )


def test_a_bfloat16_parameter_is_not_sent_float16_bits():
    # the same float as `__half` and as `__nv_bfloat16`: different bits, each its type's
    p = pack_c_args(H2K, h2k_args(b=1.0, h=1.0))
    assert p.image[4:6] == bf16_bytes(1.0) == b"\x80\x3f"
    assert p.image[12:14] == f16_bytes(1.0) == b"\x00\x3c"


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"x": FakeDeviceArray((8,), np.float32, PTR)}, r"const __half2\*.*float32, not float16"),
        ({"y": FakeDeviceArray((4,), np.float16, PTR)}, r"float16, not bfloat16"),
        ({"y": FakeDeviceArray((4,), np.uint16, PTR)}, r"uint16, not bfloat16"),
        ({"s": 1.5}, r"__half2 takes a pair of numbers"),
        ({"b2": (1.0, 2.0, 3.0)}, r"__nv_bfloat162 takes a pair"),
        ({"b": 1e39}, r"does not fit bfloat16"),
        ({"s": (1.0, 70000.0)}, r"lane 1: 70000.0 does not fit float16"),
        ({"h": np.int16(1)}, r"expected a number for __half"),
    ],
)
def test_c_half_types_refuse_what_they_cannot_mean(overrides, match):
    with pytest.raises(DispatchError, match=match):
        pack_c_args(H2K, h2k_args(**overrides))


def test_a_bfloat16_array_whose_interface_says_only_v2_fits():
    # numba's and CuPy's device arrays of bfloat16 export typestr "<V2" and nothing else
    class OpaqueV2:
        __cuda_array_interface__ = {
            "shape": (4,),
            "typestr": "<V2",
            "data": (PTR, False),
            "strides": None,
            "version": 3,
        }

    assert pack_c_args(H2K, h2k_args(y=OpaqueV2())).image[-16:-8] == struct.pack("<Q", PTR)


def numba_kernel(args, params):
    return KernelSpec(
        name="bf_axpy",
        entry="_Zbf_axpy",
        abi="numba",
        signature=None,
        args=tuple(ArgSpec(**a) for a in args),
        params=tuple(params),
    )


BF_AXPY = numba_kernel(
    [
        {"kind": "array", "dtype": "bfloat16", "ndim": 1, "layout": "C"},
        {"kind": "scalar", "dtype": "bfloat16"},
        {"kind": "array", "dtype": "bfloat16", "ndim": 1, "layout": "C"},
    ],
    numba_array_params(1) + ["u16"] + numba_array_params(1),
)


@pytest.mark.parametrize("a", [2.5, np.float32(2.5), np.array(2.5, dtype=BF16)[()]])
def test_numba_bfloat16_scalar_and_arrays(a):
    out, x = FakeDeviceArray((5,), BF16, PTR), FakeDeviceArray((5,), BF16, PTR + 64)
    p = pack_numba_args(BF_AXPY, [out, a, x])
    assert p.values[3] == ("s64", 2)  # itemsize
    assert p.values[7] == ("u16", 0x4020) and bf16_bytes(2.5) == b"\x20\x40"


def test_numba_bfloat16_refuses_float16_arrays_and_out_of_range():
    out, half = FakeDeviceArray((5,), BF16, PTR), FakeDeviceArray((5,), np.float16, PTR)
    with pytest.raises(DispatchError, match=r"argument 2.*float16, not bfloat16"):
        pack_numba_args(BF_AXPY, [out, 1.0, half])
    with pytest.raises(DispatchError, match="does not fit bfloat16"):
        pack_numba_args(BF_AXPY, [out, -4e38, out])


def test_bfloat16_and_half_structs_take_the_checked_path():
    # the plan's fast path packs by PTX type; a bfloat16's bits and a half's lanes it cannot
    out, x = FakeDeviceArray((5,), BF16, PTR), FakeDeviceArray((5,), BF16, PTR + 64)
    for kernel, args in [(BF_AXPY, [out, 2.5, x]), (H2K, h2k_args())]:
        assert not build_plan("f", kernel, args, pack_args(kernel, args)).fast


def test_bfloat16_bits_round_as_ml_dtypes_does():
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            rng.standard_normal(2000).astype(np.float32),
            (rng.standard_normal(2000) * 1e30).astype(np.float32),
            (rng.standard_normal(2000) * 1e-39).astype(np.float32),  # subnormals
            np.array([0.0, -0.0, np.inf, -np.inf, 3.3895313892515355e38], np.float32),
        ]
    )
    want = values.astype(BF16).view(np.uint16)
    got = np.array([bfloat16_bits(float(v), "v") for v in values], np.uint16)
    assert (got == want).all()
    assert bfloat16_bits(float("nan"), "v") & 0x7FC0 == 0x7FC0
