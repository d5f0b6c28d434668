// Shared-memory tile helpers for matmul.cu.
//
// A separate header so the build has a real header dependency: matmul.cu
// includes it with a quoted include, found next to the source file.
#pragma once

// Load one TILE x TILE tile of a row-major (rows x cols) matrix whose rows are
// `ld` elements apart, starting at (row0, col0), into shared memory, padding
// out-of-range elements with zero so the inner product loop needs no bounds checks.
template <typename T, int TILE>
__device__ __forceinline__ void load_tile(T (&tile)[TILE][TILE], const T* __restrict__ m,
                                          int rows, int cols, int ld, int row0, int col0) {
    const int r = row0 + threadIdx.y;
    const int c = col0 + threadIdx.x;
    tile[threadIdx.y][threadIdx.x] = (r < rows && c < cols) ? m[r * ld + c] : T(0);
}
