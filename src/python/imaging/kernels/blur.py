"""3x3 box blur of a float32 image using a shared-memory tile with a halo.

Each 16x16 thread block loads an 18x18 tile (its pixels plus a one-pixel
border, clamped at the image edges) into shared memory, synchronizes, then
averages the 3x3 neighbourhood from shared memory. The tile size is a
compile-time constant so the shared array has a static size.

Launch: ``block = (16, 16)``, ``grid = (ceil(width / 16), ceil(height / 16))``;
``x`` indexes columns and ``y`` rows of C-contiguous ``(height, width)`` arrays.
"""

from numba import cuda, float32

from imaging.kernels._stencil import clamp

TILE = 16
HALO = 1
SPAN = TILE + 2 * HALO  # 18


@cuda.jit
def box_blur_3x3(src, dst):
    height, width = src.shape
    tile = cuda.shared.array(shape=(SPAN, SPAN), dtype=float32)

    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    x0 = cuda.blockIdx.x * TILE - HALO
    y0 = cuda.blockIdx.y * TILE - HALO

    # Cooperative load of the SPAN x SPAN tile: each thread loads up to
    # ceil(SPAN^2 / TILE^2) = 2 elements, striding over the flattened tile.
    k = ty * TILE + tx
    while k < SPAN * SPAN:
        ly = k // SPAN
        lx = k - ly * SPAN
        gy = clamp(y0 + ly, height)
        gx = clamp(x0 + lx, width)
        tile[ly, lx] = src[gy, gx]
        k += TILE * TILE
    cuda.syncthreads()

    x = cuda.blockIdx.x * TILE + tx
    y = cuda.blockIdx.y * TILE + ty
    if x < width and y < height:
        acc = float32(0.0)
        for dy in range(3):
            for dx in range(3):
                acc += tile[ty + dy, tx + dx]
        dst[y, x] = acc * float32(1.0 / 9.0)


AOT_SIGNATURES = {
    "box_blur_3x3": ["void(float32[:, ::1], float32[:, ::1])"],
}
