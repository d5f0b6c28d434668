"""numba-cuda's documentation example ``ex_grid_sync`` (tests/doc_examples/test_cg.py in
NVIDIA/numba-cuda): each row of a 1024 x 1024 int32 matrix is one greater than the previous,
with a grid-wide sync between rows. The docs give the signature eagerly, ``@cuda.jit(sig)``
with a tuple of numba types, and launch ``sequential_rows[1024 // 32, 32](A)`` ("implicitly a
cooperative launch"): the build links libcudadevrt and marks the kernel "cooperative".

Changes from the original: the kernel is at module level instead of inside the test method;
otherwise as written (the eager signature is compiled ahead of time, with no GPU).
"""

# magictoken.ex_grid_sync_kernel.begin
from numba import cuda
from numba.cuda import int32

sig = (int32[:, ::1],)


@cuda.jit(sig)
def sequential_rows(M):
    col = cuda.grid(1)
    g = cuda.cg.this_grid()

    rows = M.shape[0]
    cols = M.shape[1]

    for row in range(1, rows):
        opposite = cols - col - 1
        # Each row's elements are one greater than the previous row
        M[row, col] = M[row - 1, opposite] + 1
        # Wait until all threads have written their column element,
        # and that the write is visible to all other threads
        g.sync()


# magictoken.ex_grid_sync_kernel.end
