"""The numba-cuda front end: a kernel module imported under the sandbox, its signatures
found, each kernel lowered to PTX with numba's ABI recorded."""
