"""numba-cuda's documentation example ``ex_matmul`` / ``ex_fast_matmul``
(tests/doc_examples/test_matmul.py in NVIDIA/numba-cuda): C = A * B, naive and with shared
memory tiles of TPB x TPB.

Changes from the original, for the AOT convention: the kernels are at module level instead of
inside the test function, and their signatures are listed in AOT_SIGNATURES: the docs' inputs
are ``np.arange(...).reshape(...)`` (int64) times ``np.ones(...)`` (float64) into
``np.zeros(...)`` (float64), all C-contiguous 2-D arrays.
"""

# magictoken.ex_import.begin
from numba import cuda
from numba.cuda import float32
import numpy as np  # noqa: F401  (imported by the original example)
import math  # noqa: F401  (imported by the original example, for the launch)

# magictoken.ex_import.end


# magictoken.ex_matmul.begin
@cuda.jit
def matmul(A, B, C):
    """Perform square matrix multiplication of C = A * B."""
    i, j = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        tmp = 0.0
        for k in range(A.shape[1]):
            tmp += A[i, k] * B[k, j]
        C[i, j] = tmp


# magictoken.ex_matmul.end

# magictoken.ex_fast_matmul.begin
# Controls threads per block and shared memory usage.
# The computation will be done on blocks of TPBxTPB elements.
# TPB should not be larger than 32 in this example
TPB = 16


@cuda.jit
def fast_matmul(A, B, C):
    """
    Perform matrix multiplication of C = A * B using CUDA shared memory.

    Reference: https://stackoverflow.com/a/64198479/13697228 by @RobertCrovella
    """
    # Define an array in the shared memory
    # The size and type of the arrays must be known at compile time
    sA = cuda.shared.array(shape=(TPB, TPB), dtype=float32)
    sB = cuda.shared.array(shape=(TPB, TPB), dtype=float32)

    x, y = cuda.grid(2)

    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    bpg = cuda.gridDim.x  # blocks per grid

    # Each thread computes one element in the result matrix.
    # The dot product is chunked into dot products of TPB-long vectors.
    tmp = float32(0.0)
    for i in range(bpg):
        # Preload data into shared memory
        sA[ty, tx] = 0
        sB[ty, tx] = 0
        if y < A.shape[0] and (tx + i * TPB) < A.shape[1]:
            sA[ty, tx] = A[y, tx + i * TPB]
        if x < B.shape[1] and (ty + i * TPB) < B.shape[0]:
            sB[ty, tx] = B[ty + i * TPB, x]

        # Wait until all threads finish preloading
        cuda.syncthreads()

        # Computes partial product on the shared memory
        for j in range(TPB):
            tmp += sA[ty, j] * sB[j, tx]

        # Wait until all threads finish computing
        cuda.syncthreads()
    if y < C.shape[0] and x < C.shape[1]:
        C[y, x] = tmp


# magictoken.ex_fast_matmul.end

_SIG = "void(int64[:, ::1], float64[:, ::1], float64[:, ::1])"
AOT_SIGNATURES = {"matmul": [_SIG], "fast_matmul": [_SIG]}
