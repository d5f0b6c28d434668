"""numba-cuda's documentation example ``ex_laplace`` (tests/doc_examples/test_laplace.py in
NVIDIA/numba-cuda): the 1-D heat equation, one thread per point, a grid-wide sync
(cooperative groups) after each time step. Cooperative: the build links libcudadevrt and marks
the kernel "cooperative"; the runtime launches it cooperatively (the docs use
``solve_heat_equation.forall(len(data))``). With data[500] = 10000 in 1001 zeros, the sum stays
10000.

Changes from the original, for the AOT convention: the kernel is at module level and its
signature is listed in AOT_SIGNATURES (the docs' buffers are float64, ``niter`` an int, ``k``
0.25).
"""

# ex_laplace.import.begin
import numpy as np  # noqa: F401  (imported by the original example)
from numba import cuda

# ex_laplace.import.end


# ex_laplace.kernel.begin
@cuda.jit
def solve_heat_equation(buf_0, buf_1, timesteps, k):
    i = cuda.grid(1)

    # Don't continue if our index is outside the domain
    if i >= len(buf_0):
        return

    # Prepare to do a grid-wide synchronization later
    grid = cuda.cg.this_grid()

    for step in range(timesteps):
        # Select the buffer from the previous timestep
        if (step % 2) == 0:
            data = buf_0
            next_data = buf_1
        else:
            data = buf_1
            next_data = buf_0

        # Get the current temperature associated with this point
        curr_temp = data[i]

        # Apply formula from finite difference equation
        if i == 0:
            # Left wall is held at T = 0
            next_temp = curr_temp + k * (data[i + 1] - (2 * curr_temp))
        elif i == len(data) - 1:
            # Right wall is held at T = 0
            next_temp = curr_temp + k * (data[i - 1] - (2 * curr_temp))
        else:
            # Interior points are a weighted average of their neighbors
            next_temp = curr_temp + k * (data[i - 1] - (2 * curr_temp) + data[i + 1])

        # Write new value to the next buffer
        next_data[i] = next_temp

        # Wait for every thread to write before moving on
        grid.sync()


# ex_laplace.kernel.end

AOT_SIGNATURES = {
    "solve_heat_equation": ["void(float64[::1], float64[::1], int64, float64)"],
}
