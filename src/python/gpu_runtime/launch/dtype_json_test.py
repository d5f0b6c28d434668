"""numpy dtypes as signature JSON, and which device arrays fit a record argument."""

from __future__ import annotations

import numpy as np

from gpu_runtime.conftest import FakeDeviceArray
from gpu_runtime.launch.arrays import array_view
from gpu_runtime.launch.dtype_json import dtype_fits, dtype_to_json
from gpu_spec.conftest import XOROSHIRO128P
from gpu_spec.dtypes import dtype_problems, same_dtype

XORO = np.dtype([("s0", np.uint64), ("s1", np.uint64)], align=True)


class WithDescr(FakeDeviceArray):
    @property
    def __cuda_array_interface__(self):
        return dict(super().__cuda_array_interface__, descr=self.dtype.descr)


def test_scalars_are_numba_names():
    for name in ["float32", "float64", "int8", "uint64", "bool", "complex64", "float16"]:
        assert dtype_to_json(np.dtype(name)) == name


def test_xoroshiro_record_is_what_the_compiler_writes():
    assert dtype_to_json(XORO) == XOROSHIRO128P
    unaligned = np.dtype([("s0", "<u8"), ("s1", "<u8")])
    assert same_dtype(dtype_to_json(unaligned), XOROSHIRO128P)  # same bytes


def test_nested_and_subarray_fields():
    inner = np.dtype([("x", "<f4"), ("y", "<f4")])
    dt = np.dtype([("a", "u1"), ("r", inner), ("m", "<i4", (2, 3))], align=True)
    j = dtype_to_json(dt)
    fields = dt.fields
    assert isinstance(j, dict) and fields is not None and dtype_problems(j) == []
    assert j["itemsize"] == dt.itemsize and j["aligned"] is True
    assert j["fields"][1] == ["r", dtype_to_json(inner), fields["r"][1]]
    assert j["fields"][2] == ["m", "int32", fields["m"][1], [2, 3]]


def test_record_arrays_fit_by_bytes():
    assert dtype_fits(XOROSHIRO128P, XORO) is None
    view = array_view(WithDescr((4,), XORO))  # descr carries the fields, padding dropped
    assert view is not None and dtype_fits(XOROSHIRO128P, view.dtype) is None
    # numba's device arrays export "|V16" with no descr: the itemsize is all there is to check
    assert dtype_fits(XOROSHIRO128P, np.dtype("V16")) is None
    assert "record" in (dtype_fits(XOROSHIRO128P, np.dtype("V8")) or "")
    renamed = np.dtype([("a", "<u8"), ("b", "<u8")])
    assert "Record(s0:uint64@0" in (dtype_fits(XOROSHIRO128P, renamed) or "")
    assert dtype_fits("float32", XORO) is not None
    assert dtype_fits(XOROSHIRO128P, np.dtype("float32")) is not None


def test_aligned_padding_in_descr_is_not_a_field():
    dt = np.dtype([("a", "u1"), ("b", "<u8")], align=True)
    view = array_view(WithDescr((2,), dt))
    assert view is not None and view.dtype.names == ("a", "b")
    assert dtype_fits(dtype_to_json(dt), view.dtype) is None
