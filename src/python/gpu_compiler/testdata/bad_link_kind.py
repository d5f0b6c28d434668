from numba import cuda

mul = cuda.declare_device("mul", "float32(float32, float32)", link="helpers.o")


@cuda.jit("void(float32[::1])")
def k(x):
    x[0] = mul(x[0], x[0])
