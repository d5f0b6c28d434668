// gpu_compiler's resources test: user constant memory (`__constant__`, one module-wide bank) and
// a static shared tile, so the recorded `const_bytes` and `shared_bytes` can be checked.
__constant__ float coeffs[64];  // 256 bytes
__constant__ int lut[16];       //  64 bytes: 320 in all, every kernel of the module

extern "C" __global__ void tile(const float* in, float* out, int n) {
    __shared__ float t[18][18];  // 1296 bytes
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    t[threadIdx.y][threadIdx.x] = in[i] * coeffs[i & 63] + lut[i & 15];
    __syncthreads();
    if (i < n) out[i] = t[threadIdx.x % 18][threadIdx.y % 18];
}

extern "C" __global__ void nothing(float* out) { out[threadIdx.x] = 1.0f; }
