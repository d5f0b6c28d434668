// Tiled matrix multiply C = A * B for row-major A (M x K), B (K x N), C (M x N).
//
// A template over the element type and tile size; the build instantiates the
// variants it needs through NVRTC name expressions, e.g. "matmul<float, 16>"
// and "matmul<double, 16>", and records each one's lowered (mangled) entry
// name. Launch with block (TILE, TILE) and grid (ceil(N / TILE), ceil(M / TILE)).

#include "matmul_tile.cuh"

template <typename T, int TILE>
__global__ void matmul(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,
                       int m, int n, int k) {
    __shared__ T tile_a[TILE][TILE];
    __shared__ T tile_b[TILE][TILE];

    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    T acc = T(0);

    for (int k0 = 0; k0 < k; k0 += TILE) {
        load_tile<T, TILE>(tile_a, a, m, k, blockIdx.y * TILE, k0);
        load_tile<T, TILE>(tile_b, b, k, n, k0, blockIdx.x * TILE);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < TILE; ++i) {
            acc += tile_a[threadIdx.y][i] * tile_b[i][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < m && col < n) {
        c[row * n + col] = acc;
    }
}
