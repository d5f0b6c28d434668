"""numba-cuda's documentation example ``ex_from_buffer`` (tests/doc_examples/test_ffi.py in
NVIDIA/numba-cuda): a kernel passing an array to the CUDA C++ function ``sum_reduce`` of
ffi/functions.cu as a raw pointer, through cffi's ``ffi.from_buffer(array)``, and writing the
sum to a 0-d array (``result[()]``). cffi is needed only to compile (numba types
``ffi.from_buffer`` as the array's data pointer); the device gets a plain pointer. The docs
launch it ``[1, 1]`` on x = arange(10, float32) and assert_allclose the sum, 45.

Changes from the original, for the AOT convention: the declaration, the ``cffi.FFI()`` and the
kernel are at module level instead of in the test method, ``functions_cu`` is found beside this
file (as in ffi.py: the test's ``ffi/functions.cu`` beside it), and the signature (the docs'
0-d float32 result and float32 vector, C-contiguous) is listed in AOT_SIGNATURES with numba
type objects.
"""

from numba import cuda
import os

basedir = os.path.dirname(os.path.abspath(__file__))
functions_cu = os.path.join(basedir, "ffi", "functions.cu")

# magictoken.ex_from_buffer_decl.begin
signature = "float32(CPointer(float32), int32)"
sum_reduce = cuda.declare_device("sum_reduce", signature, link=functions_cu)
# magictoken.ex_from_buffer_decl.end

# magictoken.ex_from_buffer_kernel.begin
import cffi  # noqa: E402

ffi = cffi.FFI()


@cuda.jit
def reduction_caller(result, array):
    array_ptr = ffi.from_buffer(array)
    result[()] = sum_reduce(array_ptr, len(array))


# magictoken.ex_from_buffer_kernel.end

from numba.cuda import float32, types  # noqa: E402

# A 0-d array has no string form numba parses ("float32[()]" is how it prints): a type object.
AOT_SIGNATURES = {"reduction_caller": [(types.Array(float32, 0, "C"), float32[::1])]}
