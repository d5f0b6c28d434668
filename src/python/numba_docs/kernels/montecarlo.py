"""numba-cuda's documentation example ``ex_montecarlo`` (tests/doc_examples/test_montecarlo.py
in NVIDIA/numba-cuda): Monte Carlo integration of 1/x with numba.cuda.random's xoroshiro128p
generator; the integral over [1, 2] is ln 2 = 0.69315 (the docs' mc_integrate multiplies the
sum of ``out`` by (upper - lower) / (nsamps - 1)).

The RNG states argument is an array of records (xoroshiro128p_dtype: two uint64 fields), which
the AOT ABI records as a record dtype; the states themselves are made on the host (the docs'
create_xoroshiro128p_states; gpu_runtime has an equivalent that needs no numba).

Changes from the original, for the AOT convention: the kernel is at module level; ``func``
(``@numba.jit``, which the docs define after the kernel and numba resolves when it compiles) is
defined before it; the host-side ``sum_reduce`` (``@cuda.reduce``) and ``mc_integrate`` are not
here (they launch, they are not kernels); the signature is listed in AOT_SIGNATURES with numba
type objects, as the record type has no short string form (the docs pass ints 1 and 2 as the
limits: int64).
"""

# ex_montecarlo.import.begin
import numba
import numpy as np  # noqa: F401  (imported by the original example)
from numba import cuda
from numba.cuda.random import (  # noqa: F401  (create_... is host-side, imported by the docs)
    create_xoroshiro128p_states,
    xoroshiro128p_uniform_float32,
)

# ex_montecarlo.import.end

from numba.cuda import float32, int64
from numba.cuda.random import xoroshiro128p_type

# ex_montecarlo.define.begin
# number of samples, higher will lead to a more accurate answer
nsamps = 1000000
# ex_montecarlo.define.end


# define a function to integrate
@numba.jit
def func(x):
    return 1.0 / x


# ex_montecarlo.kernel.begin
@cuda.jit
def mc_integrator_kernel(out, rng_states, lower_lim, upper_lim):
    """
    kernel to draw random samples and evaluate the function to
    be integrated at those sample values
    """
    size = len(out)

    gid = cuda.grid(1)
    if gid < size:
        # draw a sample between 0 and 1 on this thread
        samp = xoroshiro128p_uniform_float32(rng_states, gid)

        # normalize this sample to the limit range
        samp = samp * (upper_lim - lower_lim) + lower_lim

        # evaluate the function to be
        # integrated at the normalized
        # value of the sample
        y = func(samp)
        out[gid] = y


# ex_montecarlo.kernel.end

AOT_SIGNATURES = {
    "mc_integrator_kernel": [(float32[::1], xoroshiro128p_type[::1], int64, int64)],
}
