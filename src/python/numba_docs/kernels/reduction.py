"""numba-cuda's documentation example ``ex_reduction`` (tests/doc_examples/test_reduction.py in
NVIDIA/numba-cuda): a shared-memory sum of 1024 elements by one block, into ``data[0]``.

Changes from the original, for the AOT convention: the kernel is at module level; ``nelem``,
which the docs take from ``len(a)`` of the array they allocate (``np.arange(1024)``), is the
constant 1024 here (a shared array's size is fixed when the kernel is compiled, so the docs'
kernel is also compiled for exactly that size); the signature (int64, as np.arange gives) is
listed in AOT_SIGNATURES. Launch it as the docs do: ``array_sum[1, nelem](a)``.
"""

# ex_reduction.import.begin
import numpy as np  # noqa: F401  (imported by the original example)
from numba import cuda
from numba.cuda.types import int32

# ex_reduction.import.end

# ex_reduction.allocate.begin
nelem = 1024  # len(cuda.to_device(np.arange(1024))) in the docs
# ex_reduction.allocate.end


# ex_reduction.kernel.begin
@cuda.jit
def array_sum(data):
    tid = cuda.threadIdx.x
    size = len(data)
    if tid < size:
        i = cuda.grid(1)

        # Declare an array in shared memory
        shr = cuda.shared.array(nelem, int32)
        shr[tid] = data[i]

        # Ensure writes to shared memory are visible
        # to all threads before reducing
        cuda.syncthreads()

        s = 1
        while s < cuda.blockDim.x:
            if tid % (2 * s) == 0:
                # Stride by `s` and add
                shr[tid] += shr[tid + s]
            s *= 2
            cuda.syncthreads()

        # After the loop, the zeroth  element contains the sum
        if tid == 0:
            data[tid] = shr[tid]


# ex_reduction.kernel.end

AOT_SIGNATURES = {"array_sum": ["void(int64[::1])"]}
