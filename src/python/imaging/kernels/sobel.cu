// Sobel gradient magnitude of a single-channel float image.
//
// extern "C" keeps the entry name unmangled ("sobel_magnitude"), so the runtime
// finds it by name without name expressions. Rows are `pitch` elements apart
// (pitch >= width), which allows padded allocations. Border pixels use
// replicate (clamp-to-edge) addressing. Launch 2-D, e.g. block (16, 16),
// grid (ceil(width / 16), ceil(height / 16)).

__device__ __forceinline__ int clamp_index(int i, int n) {
    return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

__device__ __forceinline__ float pixel(const float* __restrict__ img, int x, int y,
                                       int width, int height, int pitch) {
    return img[clamp_index(y, height) * pitch + clamp_index(x, width)];
}

extern "C" __global__ void sobel_magnitude(const float* __restrict__ src,
                                           float* __restrict__ dst,
                                           int width, int height, int pitch) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) {
        return;
    }
    const float p00 = pixel(src, x - 1, y - 1, width, height, pitch);
    const float p01 = pixel(src, x,     y - 1, width, height, pitch);
    const float p02 = pixel(src, x + 1, y - 1, width, height, pitch);
    const float p10 = pixel(src, x - 1, y,     width, height, pitch);
    const float p12 = pixel(src, x + 1, y,     width, height, pitch);
    const float p20 = pixel(src, x - 1, y + 1, width, height, pitch);
    const float p21 = pixel(src, x,     y + 1, width, height, pitch);
    const float p22 = pixel(src, x + 1, y + 1, width, height, pitch);

    const float gx = (p02 + 2.0f * p12 + p22) - (p00 + 2.0f * p10 + p20);
    const float gy = (p20 + 2.0f * p21 + p22) - (p00 + 2.0f * p01 + p02);
    dst[y * pitch + x] = sqrtf(gx * gx + gy * gy);
}
