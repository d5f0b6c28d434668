// Kernels at the edges of the occupancy arithmetic, for tests/gpu/resources_check.py on a GPU:
// user constant memory in its own bank (`coeffs`, `lut`: 320 bytes), a shared tile, no shared
// memory at all, 28160 bytes of static shared memory (8 blocks of 128 threads fit an sm_90 SM
// if the 1 KiB per-block reservation is counted once, 7 if twice), and a register-heavy kernel.
__constant__ float coeffs[64];
__constant__ int lut[16];
extern "C" __global__ void tile(const float* in, float* out, int n) {
    __shared__ float t[18][18];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    t[threadIdx.y][threadIdx.x] = in[i] * coeffs[i & 63] + lut[i & 15];
    __syncthreads();
    if (i < n) out[i] = t[threadIdx.x % 18][threadIdx.y % 18];
}
extern "C" __global__ void plain(float* out) { out[threadIdx.x] = coeffs[threadIdx.x & 63]; }
extern "C" __global__ void nothing(float* out) { out[threadIdx.x] = 1.0f; }
extern "C" __global__ void bigsmem(const float* in, float* out) {
    __shared__ float s[7040];   // 28160 bytes
    for (int j = threadIdx.x; j < 7040; j += blockDim.x) s[j] = in[j];
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x * 7) % 7040];
}
extern "C" __global__ void heavy(const float* in, float* out) {
    float a[96];
#pragma unroll
    for (int j = 0; j < 96; j++) a[j] = in[threadIdx.x + j * 1024];
    float s = 0;
#pragma unroll
    for (int j = 0; j < 96; j++) s += a[j] * a[(j * 7) % 96];
    out[threadIdx.x] = s;
}
