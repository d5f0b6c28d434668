from numba import cuda

mul = cuda.declare_device("mul_f32_f32", "float32(float32, float32)")  # no link=


@cuda.jit("void(float32[::1])")
def k(x):
    x[0] = mul(x[0], x[0])
