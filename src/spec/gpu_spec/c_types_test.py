"""The declared C types' spelling: which dtype a scalar has and a pointer points to."""

from __future__ import annotations

import pytest

from gpu_spec.c_types import c_pointee_dtype, c_scalar_dtype, c_type_problem, split_pointer


@pytest.mark.parametrize(
    "ctype, scalar, pointee",
    [
        ("int", "int32", None),
        ("const int", "int32", None),
        ("unsigned int", "uint32", None),
        ("unsigned long long", "uint64", None),
        ("long", "int64", None),
        ("__half", "float16", None),
        ("const float*", None, "float32"),
        ("float* const", None, "float32"),
        ("volatile const double*", None, "float64"),
        ("unsigned char*", None, "uint8"),
        ("char*", None, None),  # plain char's signedness is the host's
        ("void*", None, None),
        ("ns::Params*", None, None),
        ("float**", None, None),
        ("float* const*", None, None),
        ("ns::Params", None, None),
    ],
)
def test_dtypes_of_declared_types(ctype, scalar, pointee):
    assert (c_scalar_dtype(ctype), c_pointee_dtype(ctype)) == (scalar, pointee)


def test_split_pointer_and_problems():
    assert split_pointer("const float* const") == ("float", True)
    assert split_pointer("int") == ("int", False)
    assert c_type_problem("int") is None
    assert c_type_problem("") and c_type_problem(3) and c_type_problem("a\nb")
