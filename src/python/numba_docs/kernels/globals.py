"""numba-cuda's documentation example ``ex_globals_constant_capture``
(tests/doc_examples/test_globals.py in NVIDIA/numba-cuda): global scalars and numpy arrays are
captured as constants when the kernel is compiled; expected totals [10.8, 54, 16.2, 64.8, 162]
for quantities [1, 2, 3, 4, 5].

Changes from the original, for the AOT convention: the kernel is at module level and its
signature (float64 vectors, as in the docs) is listed in AOT_SIGNATURES. The docs' second example
(``ex_globals_device_array_capture``: a global ``cuda.to_device`` array captured by pointer) is
not here: it bakes the address of a device allocation made at import into the code, which cannot
exist ahead of time on a machine without a GPU (importing it needs the driver and fails the
build with that reason).
"""

# magictoken.ex_globals_constant_capture.begin
import numpy as np
from numba import cuda

TAX_RATE = 0.08
PRICES = np.array([10.0, 25.0, 5.0, 15.0, 30.0], dtype=np.float64)


@cuda.jit
def compute_totals(quantities, totals):
    i = cuda.grid(1)
    if i < totals.size:
        totals[i] = quantities[i] * PRICES[i] * (1 + TAX_RATE)


# magictoken.ex_globals_constant_capture.end

AOT_SIGNATURES = {"compute_totals": ["void(float64[::1], float64[::1])"]}
