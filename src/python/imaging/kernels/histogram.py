"""Reductions with atomics: a 256-bin histogram and a float32 sum.

``histogram_256`` gives each block a private shared-memory histogram (cheap
shared atomics), then merges it into the global ``bins`` with one global
atomic per bin per block. ``bins`` must be zeroed before the launch; pass a
flattened (1-D) view of the image. Launch 1-D with ``blockDim.x == 256`` (the
merge assumes one thread per bin); a grid-stride loop covers any image size.

``sum_f32`` does a block-level tree reduction in shared memory and one
``cuda.atomic.add`` per block into ``out[0]`` (zeroed before the launch);
``blockDim.x`` must be 256. Float atomics make the summation order, and so the
last bits of the result, depend on scheduling.
"""

from numba import cuda, float32, uint32

BINS = 256
BLOCK = 256


@cuda.jit
def histogram_256(image, bins):
    local = cuda.shared.array(shape=BINS, dtype=uint32)
    t = cuda.threadIdx.x
    local[t] = 0
    cuda.syncthreads()

    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < image.size:
        cuda.atomic.add(local, image[i], 1)
        i += stride
    cuda.syncthreads()

    if local[t] != 0:
        cuda.atomic.add(bins, t, local[t])


@cuda.jit
def sum_f32(values, out):
    partial = cuda.shared.array(shape=BLOCK, dtype=float32)
    t = cuda.threadIdx.x
    acc = float32(0.0)
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < values.size:
        acc += values[i]
        i += stride
    partial[t] = acc
    cuda.syncthreads()

    step = BLOCK // 2
    while step > 0:
        if t < step:
            partial[t] += partial[t + step]
        cuda.syncthreads()
        step //= 2

    if t == 0:
        cuda.atomic.add(out, 0, partial[0])


AOT_SIGNATURES = {
    "histogram_256": [
        # Contiguous pixels, and any 1-D strided view (e.g. one channel).
        "void(uint8[::1], uint32[::1])",
        "void(uint8[:], uint32[::1])",
    ],
    "sum_f32": ["void(float32[::1], float32[::1])"],
}
