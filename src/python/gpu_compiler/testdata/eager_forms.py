"""Eager signatures in every form numba accepts: a string, a numba Signature, a tuple of types
and a list mixing them; and AOT_SIGNATURES with a type object for a lazy kernel."""

from numba import cuda
from numba.cuda import types


@cuda.jit("void(float32[::1], float32)")
def from_string(x, a):
    x[0] = a


@cuda.jit(types.void(types.CPointer(types.float32), types.voidptr, types.float32[:, ::1]))
def from_signature(p, q, z):
    p[0] = z[0, 0]


@cuda.jit((types.int32[::1],))
def from_tuple(x):
    x[0] = 1


@cuda.jit(["void(float64[::1])", (types.int64[::1],)])
def from_list(x):
    x[0] = 2


@cuda.jit("float32(float32)", device=True)
def helper(v):
    return v * 2


@cuda.jit
def lazy(x, zero_d):
    zero_d[()] = helper(x[0])


AOT_SIGNATURES = {"lazy": [types.void(types.float32[::1], types.Array(types.float32, 0, "C"))]}
