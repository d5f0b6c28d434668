"""numba-cuda's documentation example `ex_extra_search_paths` (doc_examples/test_ffi.py, test
`test_ex_extra_includes`), moved to module level as a user would write it.

A device function declared with `cuda.declare_device(..., link=saxpy.cu)`, whose `#include <...>`
headers are found through numba's `config.CUDA_NVRTC_EXTRA_SEARCH_PATHS`, set as the docs set
it. Changed from the docs: the test body's code is at module level, the two include directories
are computed from this file (the docs reach numba's own test data, `tests/data/include`, here
`data/include` beside this file), and `AOT_SIGNATURES` gives the kernel's signature for the
ahead-of-time build (the docs compile it lazily on the first launch).
"""

import os

from numba import cuda
from numba.cuda import config

basedir = os.path.dirname(os.path.abspath(__file__))
mul_dir = os.path.join(basedir, "ffi", "include")
saxpy_cu = os.path.join(basedir, "ffi", "saxpy.cu")
add_dir = os.path.join(basedir, "data", "include")

# magictoken.ex_extra_search_paths.begin
includedir = ":".join([mul_dir, add_dir])
config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = includedir
# magictoken.ex_extra_search_paths.end

# magictoken.ex_extra_search_paths_kernel.begin
sig = "float32(float32, float32, float32)"
saxpy = cuda.declare_device("saxpy", sig=sig, link=saxpy_cu)


@cuda.jit
def vector_saxpy(a, x, y, res):
    i = cuda.grid(1)
    if i < len(res):
        res[i] = saxpy(a, x[i], y[i])


# magictoken.ex_extra_search_paths_kernel.end

AOT_SIGNATURES = {
    "vector_saxpy": ["void(float32, float32[::1], float32[::1], float32[::1])"],
}
