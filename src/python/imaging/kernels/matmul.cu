// Tiled matrix multiply C = A * B for row-major A (M x K), B (K x N), C (M x N).
//
// A template over the element type and tile size; the build instantiates the
// variants it needs through NVRTC name expressions, e.g. "matmul<float, 16>"
// and "matmul<double, 16>", and records each one's lowered (mangled) entry
// name. Launch with block (TILE, TILE) and grid (ceil(N / TILE), ceil(M / TILE)).
//
// matmul_ld is BLAS's shape of the same product, C = alpha * A * B with leading
// dimensions: rows of A, B and C are lda, ldb and ldc elements apart, so each
// can be a block of a larger row-major matrix (pass its first element).

#include "matmul_tile.cuh"

// The shared tile loop: row `row`, column `col` of A * B for row-major A (m x k, rows lda
// apart) and B (k x n, rows ldb apart), every thread of the block loading its share of the tiles.
template <typename T, int TILE>
__device__ __forceinline__ T tiled_dot(const T* __restrict__ a, int lda, const T* __restrict__ b,
                                       int ldb, int m, int n, int k) {
    __shared__ T tile_a[TILE][TILE];
    __shared__ T tile_b[TILE][TILE];
    T acc = T(0);
    for (int k0 = 0; k0 < k; k0 += TILE) {
        load_tile<T, TILE>(tile_a, a, m, k, lda, blockIdx.y * TILE, k0);
        load_tile<T, TILE>(tile_b, b, k, n, ldb, k0, blockIdx.x * TILE);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < TILE; ++i) {
            acc += tile_a[threadIdx.y][i] * tile_b[i][threadIdx.x];
        }
        __syncthreads();
    }
    return acc;
}

template <typename T, int TILE>
__global__ void matmul(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,
                       int m, int n, int k) {
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const T acc = tiled_dot<T, TILE>(a, k, b, n, m, n, k);
    if (row < m && col < n) {
        c[row * n + col] = acc;
    }
}

template <typename T, int TILE>
__global__ void matmul_ld(const T* __restrict__ a, int lda, const T* __restrict__ b, int ldb,
                          T* __restrict__ c, int ldc, int m, int n, int k, T alpha) {
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const T acc = tiled_dot<T, TILE>(a, lda, b, ldb, m, n, k);
    if (row < m && col < n) {
        c[row * ldc + col] = alpha * acc;
    }
}
