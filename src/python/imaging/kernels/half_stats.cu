// Half-precision image statistics with CUDA's own headers: cuda_fp16.h / cuda_bf16.h for the
// types and math, CUB for a block-wide sum, cooperative groups for a warp-tile reduction. None
// of them is in the repo: the compile gets them from the pinned toolchain (NVIDIA's wheels).
//
// half_gain_stats: y = x * gain on pairs of pixels (__half2 math, two per thread), and the sum
// (stats[0], cub::BlockReduce) and sum of squares (stats[1], cg::reduce over a 32-thread tile)
// of the scaled image, in float. Launch 1-D with blockDim.x == 256 (the CUB block size),
// grid covering n2 pairs; zero stats first.
//
// bf16_offset_to_half: y = half(float(x) + float(bias)): bfloat16 in, half out.

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cub/block/block_reduce.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace cg = cooperative_groups;

constexpr int kBlock = 256;

extern "C" __global__ void __launch_bounds__(kBlock)
    half_gain_stats(const __half2* __restrict__ x, __half2* __restrict__ y, __half2 gain,
                    int n2, float* __restrict__ stats) {
    using BlockReduce = cub::BlockReduce<float, kBlock>;
    __shared__ typename BlockReduce::TempStorage scratch;

    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float sum = 0.0f, squares = 0.0f;
    if (i < n2) {
        const __half2 v = __hmul2(x[i], gain);
        y[i] = v;
        const float2 f = __half22float2(v);
        sum = f.x + f.y;
        squares = f.x * f.x + f.y * f.y;
    }
    const float block_sum = BlockReduce(scratch).Sum(sum);
    const cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    const float tile_squares = cg::reduce(tile, squares, cg::plus<float>());
    if (threadIdx.x == 0) {
        atomicAdd(&stats[0], block_sum);
    }
    if (tile.thread_rank() == 0) {
        atomicAdd(&stats[1], tile_squares);
    }
}

extern "C" __global__ void bf16_offset_to_half(const __nv_bfloat16* __restrict__ x,
                                               __nv_bfloat16 bias, __half* __restrict__ y,
                                               int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = __float2half(__bfloat162float(x[i]) + __bfloat162float(bias));
    }
}
