// Fixture: a CUDA C++ syntax error on line 5.
extern "C" __global__ void oops(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = 1.0f +;
    }
}
