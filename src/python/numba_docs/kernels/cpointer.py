"""numba-cuda's documentation example ``ex_cpointer`` (tests/doc_examples/test_cpointer.py in
NVIDIA/numba-cuda): a kernel taking a raw pointer to uint8 data and a uint32 length, adding one
to each element; the docs launch it with an integer device address,
``add_one[1, 32](x.__cuda_array_interface__["data"][0], len(x))``.

Changes from the original: the kernel is at module level instead of inside the test method;
otherwise as written (the eager signature of numba type objects is compiled ahead of time).
"""

# ex_cpointer.sig.begin
import numpy as np  # noqa: F401  (imported by the original example)
from numba import cuda
from numba.cuda import types

# The first kernel argument is a pointer to a uint8 array.
# The second argument holds the length as a uint32.
# The return type of a kernel is always void.
sig = types.void(types.CPointer(types.uint8), types.uint32)
# ex_cpointer.sig.end


# ex_cpointer.kernel.begin
@cuda.jit(sig)
def add_one(x, n):
    i = cuda.grid(1)
    if i < n:
        x[i] += 1


# ex_cpointer.kernel.end
