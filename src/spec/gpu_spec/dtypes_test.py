from __future__ import annotations

import pytest

from gpu_spec.dtypes import check_dtype, describe_dtype, dtype_problems, same_dtype
from gpu_spec.errors import SpecError

XORO = {"fields": [["s0", "uint64", 0], ["s1", "uint64", 8]], "itemsize": 16, "aligned": True}


def test_names_compare_as_names():
    assert same_dtype("float32", "float32")
    assert not same_dtype("float32", "float64")
    assert not same_dtype("float32", XORO)


def test_records_compare_by_layout_not_field_order_or_aligned_flag():
    shuffled = {"fields": [["s1", "uint64", 8], ["s0", "uint64", 0]], "itemsize": 16}
    assert same_dtype(XORO, shuffled)
    assert same_dtype(XORO, dict(XORO, aligned=False))


@pytest.mark.parametrize(
    "other",
    [
        {"fields": [["s0", "uint64", 0], ["s1", "uint64", 8]], "itemsize": 24},
        {"fields": [["s0", "uint64", 0], ["s1", "int64", 8]], "itemsize": 16},
        {"fields": [["s0", "uint64", 0], ["t1", "uint64", 8]], "itemsize": 16},
        {"fields": [["s0", "uint64", 0], ["s1", "uint32", 12]], "itemsize": 16},
        {"fields": [["s0", "uint64", 0], ["s1", "uint32", 8, [2]]], "itemsize": 16},
    ],
)
def test_records_differing_in_bytes_are_not_the_same(other):
    assert not same_dtype(XORO, other)


def test_nested_and_subarray_fields():
    inner = {"fields": [["x", "float32", 0], ["y", "float32", 4]], "itemsize": 8}
    outer = {"fields": [["p", inner, 0], ["v", "int16", 8, [2, 3]]], "itemsize": 20}
    assert dtype_problems(outer) == []
    assert same_dtype(
        outer, {"fields": [["v", "int16", 8, [2, 3]], ["p", inner, 0]], "itemsize": 20}
    )
    assert not same_dtype(
        outer, {"fields": [["p", inner, 0], ["v", "int16", 8, [3, 2]]], "itemsize": 20}
    )
    assert (
        describe_dtype(outer)
        == "Record(p:Record(x:float32@0, y:float32@4; 8 bytes)@0, v:int16[2,3]@8; 20 bytes)"
    )


@pytest.mark.parametrize(
    "bad, says",
    [
        (3, "expected a dtype name or a record object"),
        ("", "empty dtype name"),
        ({"fields": [], "itemsize": 8}, "non-empty array of fields"),
        ({"fields": [["a", "int8", 0]], "itemsize": 0}, "itemsize: expected a positive integer"),
        ({"fields": [["a", "int8", 0]], "itemsize": True}, "itemsize: expected a positive integer"),
        ({"fields": [["a", "int8"]], "itemsize": 1}, "expected [name, dtype, offset]"),
        ({"fields": [["a", "int8", 0], ["a", "int8", 1]], "itemsize": 2}, "repeated"),
        ({"fields": [["a", "int8", -1]], "itemsize": 1}, "offset -1"),
        ({"fields": [["a", "int8", 0, [0]]], "itemsize": 1}, "subarray shape"),
        ({"fields": [["a", 7, 0]], "itemsize": 1}, "fields[0].dtype"),
        ({"fields": [["a", "int8", 0]], "itemsize": 1, "aligned": "yes"}, "aligned"),
    ],
)
def test_invalid_forms_are_explained(bad, says):
    problems = dtype_problems(bad)
    assert problems and says in "; ".join(problems)
    with pytest.raises(SpecError, match="dtype"):
        check_dtype(bad)
    assert not same_dtype(bad, bad)
