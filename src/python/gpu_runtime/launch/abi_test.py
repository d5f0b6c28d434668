"""Argument packing, byte for byte (numba ABI as numba-cuda 0.30.4's _Kernel._prepare_args)."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest

from gpu_runtime.conftest import FakeDeviceArray, numba_array_params
from gpu_runtime.errors import DispatchError
from gpu_runtime.launch.arrays import ArrayView, array_view, c_strides
from gpu_runtime.launch.c_abi import pack_c_args
from gpu_runtime.launch.numba_abi import pack_numba_args
from gpu_runtime.launch.params import build_image, parse_param_type
from gpu_runtime_testutil.launch_cases import PTR, A, S, numba_kernel
from gpu_spec.manifest.model import KernelSpec


def view_of(obj) -> ArrayView:
    view = array_view(obj)
    assert view is not None, obj
    return view


def q(*vals: int) -> bytes:
    """8-byte little-endian signed ints."""
    return b"".join(struct.pack("<q", v) for v in vals)


# ---------------------------------------------------------------------------------------------
# arrays


def test_1d_contiguous():
    k = numba_kernel([A("float32", 1)], numba_array_params(1))
    p = pack_numba_args(k, [FakeDeviceArray((10,), np.float32, PTR)])
    #           meminfo parent nitems itemsize data  shape stride
    assert p.image == q(0, 0, 10, 4, PTR, 10, 4)
    assert p.values == (
        ("u64", 0),
        ("u64", 0),
        ("s64", 10),
        ("s64", 4),
        ("u64", PTR),
        ("s64", 10),
        ("s64", 4),
    )
    assert p.offsets == tuple(range(0, 56, 8))


def test_2d_contiguous():
    k = numba_kernel([A("float64", 2)], numba_array_params(2))
    p = pack_numba_args(k, [FakeDeviceArray((3, 5), np.float64, PTR)])
    assert p.image == q(0, 0, 15, 8, PTR, 3, 5, 40, 8)


def test_3d_contiguous():
    k = numba_kernel([A("int16", 3)], numba_array_params(3))
    p = pack_numba_args(k, [FakeDeviceArray((2, 3, 4), np.int16, PTR)])
    assert p.image == q(0, 0, 24, 2, PTR, 2, 3, 4, 24, 8, 2)


def test_explicit_c_strides_are_passed_as_given():
    # A size-1 dimension may carry any stride; numba passes the interface's strides through.
    k = numba_kernel([A("float32", 2)], numba_array_params(2))
    p = pack_numba_args(k, [FakeDeviceArray((1, 4), np.float32, PTR, strides=(999, 4))])
    assert p.image == q(0, 0, 4, 4, PTR, 1, 4, 999, 4)


def test_strided_slice():
    # a[::3] of a float32 vector of 30: 10 elements, stride 12 bytes, layout "A"
    k = numba_kernel([A("float32", 1, "A")], numba_array_params(1))
    v = FakeDeviceArray((10,), np.float32, PTR, strides=(12,))
    assert view_of(v).layout == "A"
    assert pack_numba_args(k, [v]).image == q(0, 0, 10, 4, PTR, 10, 12)


def test_transposed_view_is_f_contiguous():
    # (4, 6) C-contiguous float64 transposed: shape (6, 4), strides (8, 48)
    k = numba_kernel([A("float64", 2, "F")], numba_array_params(2))
    v = FakeDeviceArray((6, 4), np.float64, PTR, strides=(8, 48))
    assert view_of(v).layout == "F"
    assert pack_numba_args(k, [v]).image == q(0, 0, 24, 8, PTR, 6, 4, 8, 48)


def test_3d_non_contiguous_sub_block():
    # x[:, 1:3, ::2] of a C (4, 5, 6) int32 array at PTR: shape (4, 2, 3), strides (120, 24, 8)
    base = PTR + 24
    k = numba_kernel([A("int32", 3, "A")], numba_array_params(3))
    v = FakeDeviceArray((4, 2, 3), np.int32, base, strides=(120, 24, 8))
    assert pack_numba_args(k, [v]).image == q(0, 0, 24, 4, base, 4, 2, 3, 120, 24, 8)


def test_negative_strides():
    k = numba_kernel([A("uint8", 1, "A")], numba_array_params(1))
    v = FakeDeviceArray((5,), np.uint8, PTR + 4, strides=(-1,))
    assert pack_numba_args(k, [v]).image == q(0, 0, 5, 1, PTR + 4, 5, -1)


def test_empty_and_zero_d():
    k = numba_kernel([A("float32", 2)], numba_array_params(2))
    assert pack_numba_args(k, [FakeDeviceArray((0, 3), np.float32, 0)]).image == q(
        0, 0, 0, 4, 0, 0, 3, 12, 4
    )
    k0 = numba_kernel([A("float32", 0)], numba_array_params(0))
    assert pack_numba_args(k0, [FakeDeviceArray((), np.float32, PTR)]).image == q(0, 0, 1, 4, PTR)


@pytest.mark.parametrize(
    "shape, strides, layout",
    [
        ((10,), None, "C"),
        ((10,), (4,), "C"),
        ((10,), (8,), "A"),
        ((3, 4), (16, 4), "C"),
        ((3, 4), (4, 12), "F"),
        ((3, 4), (32, 4), "A"),
        ((1, 4), (4, 4), "C"),
        ((4, 1), (4, 4), "C"),
        ((3, 4), (0, 4), "A"),
        ((0, 4), (4, 4), "C"),
    ],
)
def test_layout_rules(shape, strides, layout):
    assert view_of(FakeDeviceArray(shape, np.float32, PTR, strides)).layout == layout


def test_c_layout_signature_refuses_strided_array():
    k = numba_kernel([A("float32", 1, "C")], numba_array_params(1))
    with pytest.raises(
        DispatchError,
        match=r"expected float32\[::1\], got float32\[:\] device array|not C-contiguous",
    ):
        pack_numba_args(k, [FakeDeviceArray((10,), np.float32, PTR, strides=(8,))])


# ---------------------------------------------------------------------------------------------
# scalars: (signature dtype, value, expected PTX-typed values, expected bytes at offset 56)

SCALARS = [
    ("int8", -3, [("s8", -3)], struct.pack("<b", -3)),
    ("int16", -300, [("s16", -300)], struct.pack("<h", -300)),
    ("int32", -7, [("s32", -7)], struct.pack("<i", -7)),
    ("int64", -(2**40), [("s64", -(2**40))], struct.pack("<q", -(2**40))),
    ("uint8", 255, [("u8", 255)], b"\xff"),
    ("uint16", 65535, [("u16", 65535)], b"\xff\xff"),
    ("uint32", 2**32 - 1, [("u32", 2**32 - 1)], b"\xff" * 4),
    ("uint64", 2**64 - 1, [("u64", 2**64 - 1)], b"\xff" * 8),
    ("float16", 1.5, [("u16", 0x3E00)], struct.pack("<e", 1.5)),
    ("float32", 0.1, [("f32", float(np.float32(0.1)))], struct.pack("<f", 0.1)),
    ("float64", 1 / 3, [("f64", 1 / 3)], struct.pack("<d", 1 / 3)),
    ("bool", True, [("u8", 1)], b"\x01"),
    ("bool", np.bool_(False), [("u8", 0)], b"\x00"),
    ("complex64", 1 + 2j, [("f32", 1.0), ("f32", 2.0)], struct.pack("<ff", 1, 2)),
    ("complex128", 1.5 - 2j, [("f64", 1.5), ("f64", -2.0)], struct.pack("<dd", 1.5, -2)),
    ("int32", np.int32(-5), [("s32", -5)], struct.pack("<i", -5)),
    ("float32", np.float32(2.5), [("f32", 2.5)], struct.pack("<f", 2.5)),
    ("timedelta64[ns]", np.timedelta64(5, "us"), [("s64", 5000)], struct.pack("<q", 5000)),
]


@pytest.mark.parametrize("dtype, value, typed, raw", SCALARS)
def test_scalar_after_array(dtype, value, typed, raw):
    # an array first (7 x 8 bytes), then the scalar: it lands at offset 56, naturally aligned
    nparams = 2 if dtype.startswith("complex") else 1
    sizes = {
        "int8": "u8",
        "uint8": "u8",
        "bool": "u8",
        "int16": "u16",
        "uint16": "u16",
        "float16": "u16",
        "int32": "u32",
        "uint32": "u32",
        "float32": "f32",
        "complex64": "f32",
        "complex128": "f64",
        "float64": "f64",
    }
    ptx = [sizes.get(dtype, "u64")] * nparams
    k = numba_kernel([A("float32", 1), S(dtype)], numba_array_params(1) + ptx)
    p = pack_numba_args(k, [FakeDeviceArray((4,), np.float32, PTR), value])
    assert list(p.values[7:]) == typed
    assert p.image[:56] == q(0, 0, 4, 4, PTR, 4, 4)
    assert p.image[56:] == raw


def test_alignment_padding_between_scalars():
    # int8, then float64 (pad to 8), then int16, then int32 (pad to 4), then complex64
    k = numba_kernel(
        [S("int8"), S("float64"), S("int16"), S("int32"), S("complex64")],
        ["u8", "f64", "u16", "u32", "f32", "f32"],
    )
    p = pack_numba_args(k, [1, 2.0, 3, 4, 5 + 6j])
    assert p.offsets == (0, 8, 16, 20, 24, 28)
    assert p.sizes == (1, 8, 2, 4, 4, 4)
    assert p.image == (
        b"\x01"
        + b"\0" * 7
        + struct.pack("<d", 2.0)
        + struct.pack("<h", 3)
        + b"\0\0"
        + struct.pack("<i", 4)
        + struct.pack("<ff", 5, 6)
    )


@pytest.mark.parametrize(
    "dtype, value", [("int8", 128), ("uint8", -1), ("uint64", 2**64), ("int32", 2**31)]
)
def test_scalar_out_of_range(dtype, value):
    k = numba_kernel([S(dtype)])
    with pytest.raises(DispatchError, match="does not fit"):
        pack_numba_args(k, [value])


def test_scalar_type_errors():
    with pytest.raises(DispatchError, match="expected an integer"):
        pack_numba_args(numba_kernel([S("int32")]), [1.5])
    with pytest.raises(DispatchError, match="expected a real number"):
        pack_numba_args(numba_kernel([S("float32")]), ["x"])
    with pytest.raises(DispatchError, match="host \\(numpy\\) array"):
        pack_numba_args(numba_kernel([A("float32", 1)]), [np.zeros(3, np.float32)])


def test_param_count_mismatch_is_reported():
    k = numba_kernel([A("float32", 1)], ["u64"] * 6)
    with pytest.raises(DispatchError, match="numba ABI gives 7 parameters but the PTX entry"):
        pack_numba_args(k, [FakeDeviceArray((4,), np.float32, PTR)])
    k = numba_kernel([S("float64")], ["f32"])
    with pytest.raises(
        DispatchError, match="parameter 0 is f32 in PTX but the numba ABI packs f64"
    ):
        pack_numba_args(k, [1.0])


def test_launch_args_are_exact_numpy_scalars():
    k = numba_kernel([A("float32", 1), S("float32"), S("bool"), S("int8")])
    args = pack_numba_args(k, [FakeDeviceArray((4,), np.float32, PTR), 2.0, True, -1]).launch_args()
    assert [type(a) for a in args] == [
        np.uint64,
        np.uint64,
        np.int64,
        np.int64,
        np.uint64,
        np.int64,
        np.int64,
        np.float32,
        np.uint8,
        np.int8,
    ]
    assert b"".join(a.tobytes() for a in args[:7]) == q(0, 0, 4, 4, PTR, 4, 4)


# ---------------------------------------------------------------------------------------------
# C ABI (NVRTC kernels)


def c_kernel(params, name="c"):
    return KernelSpec(name=name, entry=name, abi="c", params=tuple(params))


def test_c_sobel_args():
    k = c_kernel(["u64", "u64", "u32", "u32", "u32"], "sobel_magnitude")
    src = FakeDeviceArray((8, 10), np.float32, PTR)
    dst = FakeDeviceArray((8, 10), np.float32, PTR + 4096)
    p = pack_c_args(k, [src, dst, 10, 8, np.int32(10)])
    assert p.image == struct.pack("<QQIII", PTR, PTR + 4096, 10, 8, 10)
    assert p.offsets == (0, 8, 16, 20, 24)


def test_c_negative_int_into_u32_param():
    # NVRTC declares `int` params as .u32: -1 must arrive as 0xffffffff
    p = pack_c_args(c_kernel(["u32", "s32"]), [-1, -1])
    assert p.image == b"\xff" * 8
    assert p.values == (("u32", 0xFFFFFFFF), ("s32", -1))
    with pytest.raises(DispatchError, match="does not fit in 32 bits"):
        pack_c_args(c_kernel(["u32"]), [2**32])


def test_c_declared_types_check_signedness_and_pointees():
    """PTX says `.u32` for `int` and `unsigned int` alike; the declared types tell them apart."""
    k = KernelSpec(
        name="k",
        entry="k",
        abi="c",
        params=("u32", "u32", "u64", "u64", "u64", "u8"),
        c_types=("int", "unsigned int", "const double*", "void*", "ns::P*", "unsigned char"),
    )
    f64, f32 = FakeDeviceArray((4,), np.float64, PTR), FakeDeviceArray((4,), np.float32, PTR)
    p = pack_c_args(k, [-1, 2**32 - 1, f64, f32, f32, 255])
    assert p.image == struct.pack("<iIQQQB", -1, 2**32 - 1, PTR, PTR, PTR, 255)
    for args, match in [
        ([-1, -1, f64, f32, f32, 0], r"argument 1 of k \(unsigned int\): -1 does not fit in "),
        ([2**31, 0, f64, f32, f32, 0], r"argument 0 of k \(int\): 2147483648 does not fit"),
        ([0, np.int64(-2), f64, f32, f32, 0], "-2 does not fit in unsigned int"),
        ([0, 0, f32, f32, f32, 0], r"\(const double\*\): got a device array of dtype float32"),
        ([0, 0, f64, f32, f32, -1], "-1 does not fit in unsigned char"),
    ]:
        with pytest.raises(DispatchError, match=match):
            pack_c_args(k, args)
    assert pack_c_args(k, [0, 0, PTR + 8, PTR, PTR, 0]).values[2] == ("u64", PTR + 8)


def test_c_pointer_sources():
    class Buf:  # like a cuda.core Buffer
        handle = PTR + 8

    p = pack_c_args(c_kernel(["u64", "u64", "u64", "s64"]), [Buf(), 1234, np.uint64(77), -5])
    assert p.image == struct.pack("<QQQq", PTR + 8, 1234, 77, -5)
    with pytest.raises(DispatchError, match="host \\(numpy\\) array"):
        pack_c_args(c_kernel(["u64"]), [np.zeros(3)])


def test_c_floats_and_mixed_alignment():
    p = pack_c_args(c_kernel(["f32", "f64", "u8", "f32", "u16"]), [0.5, 2, 7, np.float64(1.25), 9])
    assert p.offsets == (0, 8, 16, 20, 24)
    assert p.image == struct.pack("<f4xdB3xfH", 0.5, 2.0, 7, 1.25, 9)


def test_c_struct_by_value():
    p = pack_c_args(c_kernel(["u32", "align 8 b8[16]"]), [1, np.complex128(1 + 2j)])
    assert p.offsets == (0, 8)
    assert p.image == struct.pack("<I4xdd", 1, 1, 2)
    assert p.launch_args()[1] == np.complex128(1 + 2j)
    with pytest.raises(DispatchError, match="takes 16 bytes"):
        pack_c_args(c_kernel(["align 8 b8[16]"]), [b"123"])
    big = pack_c_args(c_kernel(["align 4 b8[12]"]), [bytes(range(12))])
    assert big.image == bytes(range(12))
    with pytest.raises(DispatchError, match="12-byte by-value parameter"):
        big.launch_args()


def test_c_arg_count():
    with pytest.raises(DispatchError, match="takes 2 arguments, got 1"):
        pack_c_args(c_kernel(["u64", "u32"]), [1])


@pytest.mark.parametrize(
    "text, size, align",
    [
        ("u64", 8, 8),
        (".f32", 4, 4),
        ("u8", 1, 1),
        ("align 8 b8[16]", 16, 8),
        (".align 4 .b8 [12]", 12, 4),
        ("b8[3]", 3, 1),
    ],
)
def test_parse_param_type(text, size, align):
    pt = parse_param_type(text)
    assert (pt.size, pt.align) == (size, align)


@pytest.mark.parametrize("bad", ["f8", "pred", "u128", "x32", "bf16"])
def test_parse_param_type_rejects(bad):
    with pytest.raises(DispatchError, match="unknown PTX parameter type"):
        parse_param_type(bad)


def test_build_image_matches_struct_alignment():
    vals = [("u8", 1), ("u64", 2), ("u16", 3), ("f64", 4.0)]
    assert build_image(vals).image == struct.pack("<B7xQH6xd", 1, 2, 3, 4.0)


def test_cai_edge_cases():
    assert c_strides((2, 3, 4), 8) == (96, 32, 8)

    class Masked(FakeDeviceArray):
        @property
        def __cuda_array_interface__(self):
            d = dict(super().__cuda_array_interface__)
            d["mask"] = object()
            return d

    with pytest.raises(DispatchError, match="masked"):
        array_view(Masked((3,), np.float32))
    assert array_view(object()) is None
    with pytest.raises(DispatchError, match="non-native byte order"):
        array_view(FakeDeviceArray((3,), np.dtype(">f4")))


@pytest.mark.parametrize("dtype, value", [("float32", 1e39), ("float16", 70000.0)])
def test_a_finite_float_beyond_a_narrow_type_is_refused_not_sent_as_inf(dtype, value):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning either
        with pytest.raises(DispatchError, match=f"does not fit {dtype}"):
            pack_numba_args(numba_kernel([S(dtype)]), [value])
        with pytest.raises(DispatchError, match=f"does not fit {dtype}"):
            pack_numba_args(numba_kernel([S(dtype)]), [np.float64(value)])
        with pytest.raises(DispatchError, match=f"does not fit {dtype}"):
            pack_c_args(c_kernel(["f32" if dtype == "float32" else "f16"]), [value])
    with pytest.raises(DispatchError, match="imaginary part.*does not fit float32"):
        pack_numba_args(numba_kernel([S("complex64")]), [complex(1, 1e39)])


def test_inf_nan_and_the_largest_float32_still_pass():
    big = float(np.finfo(np.float32).max)
    p = pack_c_args(c_kernel(["f32", "f32", "f32"]), [float("inf"), big, -big])
    assert p.image == struct.pack("<fff", float("inf"), big, -big)
    p = pack_numba_args(numba_kernel([S("float32")]), [float("nan")])
    assert np.isnan(struct.unpack("<f", p.image)[0])


def test_values_no_kernel_can_take_are_refused_in_one_line():
    """Issue 30: each was packed as given (an address 2**64 - 1, a bool byte of 2, a null
    pointer, an interface version whose fields may mean something else)."""
    c = KernelSpec(name="f", entry="f", abi="c", params=("u64", "u8"), c_types=("float*", "bool"))
    nb = numba_kernel([A("float32", 1), S("bool")])
    cases = [
        (pack_c_args, c, [-1, True], "-1 is not a device address"),
        (pack_c_args, c, [PTR, 2], "expected a bool, got the integer 2"),
        (pack_c_args, c, [PTR, np.uint8(3)], "expected a bool, got the integer 3"),
        (pack_numba_args, nb, [FakeDeviceArray((4,), np.float32, PTR), 2], "the integer 2"),
        (pack_numba_args, nb, [FakeDeviceArray((4,), np.float32, 0), True], "null device array"),
        (
            pack_numba_args,
            nb,
            [FakeDeviceArray((4,), np.float32, PTR, version=99), True],
            "version 99",
        ),
    ]
    for pack, kernel, args, message in cases:
        with pytest.raises(DispatchError, match=message) as e:
            pack(kernel, args)
        assert "\n" not in str(e.value)
    # what stays accepted: 0/1 and bools for a bool, an empty array with no data, version 2
    pack_c_args(c, [PTR, 1])
    pack_c_args(c, [0, np.bool_(False)])
    pack_numba_args(nb, [FakeDeviceArray((0,), np.float32, 0), 0])
    pack_numba_args(nb, [FakeDeviceArray((4,), np.float32, PTR, version=2), 1])
