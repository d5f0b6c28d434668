"""numba-cuda's documentation example ``ex_linking_cu`` (tests/doc_examples/test_ffi.py in
NVIDIA/numba-cuda): a kernel calling the CUDA C++ function ``mul_f32_f32`` of ffi/functions.cu
(copied unchanged from the same directory), declared with ``cuda.declare_device(..., link=...)``.
The build compiles functions.cu with NVRTC and links it into the cubin; the PTX variant carries
its PTX for the driver's linker. ``r = x * y`` exactly.

Changes from the original, for the AOT convention: the declaration and kernel are at module
level and the signature (float32 vectors, as in the docs) is listed in AOT_SIGNATURES. The
docs' other ffi examples: ``ex_from_buffer`` is ffi_from_buffer.py; ``ex_extra_search_paths``
is not here, as it needs a header from numba-cuda's test data.
"""

# magictoken.ex_linking_cu.begin
from numba import cuda
import numpy as np  # noqa: F401  (imported by the original example)
import os

# Path to the source containing the foreign function
# (here assumed to be in a subdirectory called "ffi")
basedir = os.path.dirname(os.path.abspath(__file__))
functions_cu = os.path.join(basedir, "ffi", "functions.cu")

# Declaration of the foreign function
mul = cuda.declare_device("mul_f32_f32", "float32(float32, float32)", link=functions_cu)


# A kernel that calls mul; functions.cu is linked automatically due to
# the call to mul.
@cuda.jit
def multiply_vectors(r, x, y):
    i = cuda.grid(1)
    if i < len(r):
        r[i] = mul(x[i], y[i])


# magictoken.ex_linking_cu.end

AOT_SIGNATURES = {"multiply_vectors": ["void(float32[::1], float32[::1], float32[::1])"]}
