"""numpy references of the example's kernels: what app.py checks its pipeline against, and the
reference table its `--self-test` hands to gpu_runtime's runner (one builder per kernel name).

Add a builder here when a kernel is added to src/python/imaging/kernels; without one the
self-test reports the kernel as skipped (or failed, with --strict).
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np

from gpu_runtime.selftest.inputs import Case, Memory, ReferenceTable
from gpu_spec.manifest.model import KernelSpec


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def box_blur_ref(src: np.ndarray) -> np.ndarray:
    """3x3 mean with clamp-to-edge, summed and scaled in float32 in the kernel's order."""
    p = np.pad(src, 1, mode="edge")
    h, w = src.shape
    acc = np.zeros((h, w), np.float32)
    for dy in range(3):
        for dx in range(3):
            acc += p[dy : dy + h, dx : dx + w]
    return acc * np.float32(1.0 / 9.0)


def sobel_ref(img: np.ndarray) -> np.ndarray:
    """Sobel gradient magnitude with clamp-to-edge, in float64."""
    p = np.pad(img, 1, mode="edge").astype(np.float64)
    h, w = img.shape

    def at(dy: int, dx: int) -> np.ndarray:
        return p[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w]

    gx = (at(-1, 1) + 2 * at(0, 1) + at(1, 1)) - (at(-1, -1) + 2 * at(0, -1) + at(1, -1))
    gy = (at(1, -1) + 2 * at(1, 0) + at(1, 1)) - (at(-1, -1) + 2 * at(-1, 0) + at(-1, 1))
    return np.sqrt(gx * gx + gy * gy)


def ref_saxpy(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # saxpy.py: out[i] = a * x[i] + y[i]; n not a multiple of the block
    n = 10_007
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a = np.float32(2.5)
    out = mem.zeros(n, np.float32)
    want = (a * x + y).astype(np.float32)
    args = [out, a, mem.array(x), mem.array(y)]
    return Case(args, cdiv(n, 256), 256, {0: want}, rtol=1e-6, atol=1e-6)


def ref_box_blur_3x3(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # blur.py: 16x16 blocks + shared tile; sizes not multiples of 16
    h, w = 37, 53
    src = rng.random((h, w), dtype=np.float32)
    dst = mem.zeros((h, w), np.float32)
    grid = (cdiv(w, 16), cdiv(h, 16))
    return Case([mem.array(src), dst], grid, (16, 16), {1: box_blur_ref(src)}, rtol=1e-5, atol=1e-6)


def ref_histogram_256(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # histogram.py: 256 bins of a uint8 image; bins zeroed first; blockDim.x must be 256.
    # Signature "uint8[::1]": contiguous; "uint8[:]": a strided view (every 3rd pixel).
    n = 100_003
    layout = spec.args[0].layout if spec.args else "C"
    if layout == "C":
        img = rng.integers(0, 256, n, dtype=np.uint8)
        image, expected = mem.array(img), np.bincount(img, minlength=256)
        note = "contiguous image"
    else:
        base = rng.integers(0, 256, 3 * n, dtype=np.uint8)
        image = mem.strided(mem.array(base), (n,), (3,), offset=1)
        expected = np.bincount(base[1::3], minlength=256)
        note = "strided view image[1::3]"
    bins = mem.zeros(256, np.uint32)
    return Case([image, bins], 64, 256, {1: expected.astype(np.uint32)}, note=note)


def ref_sum_f32(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # histogram.py: float32 sum with one atomic per block into out[0] (zeroed); blockDim.x 256
    n = 1 << 20
    v = rng.random(n, dtype=np.float32)
    out = mem.zeros(1, np.float32)
    expected = np.array([v.astype(np.float64).sum()], np.float32)
    return Case([mem.array(v), out], 120, 256, {1: expected}, rtol=1e-4)


def ref_sobel_magnitude(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # sobel.cu: (src, dst, width, height, pitch), rows `pitch` elements apart, clamp borders
    h, w, pitch = 29, 45, 48
    img = rng.random((h, w), dtype=np.float32)
    src = np.zeros((h, pitch), np.float32)
    src[:, :w] = img
    expected = np.zeros((h, pitch), np.float32)
    expected[:, :w] = sobel_ref(img)
    dst = mem.zeros((h, pitch), np.float32)
    return Case(
        [mem.array(src), dst, w, h, pitch],
        (cdiv(w, 16), cdiv(h, 16)),
        (16, 16),
        {1: expected},
        rtol=1e-5,
        atol=1e-5,
        note=f"pitch {pitch} > width {w}",
    )


MATMUL_NAME = r"matmul<\s*(float|double)\s*,\s*(\d+)\s*>"


def _template_args(pattern: str, spec: KernelSpec) -> tuple:
    """(numpy dtype, tile) of a `name<float|double, TILE>` instantiation."""
    match = re.fullmatch(pattern, spec.name)
    if match is None:
        raise LookupError(spec.name)
    return (np.float32 if match.group(1) == "float" else np.float64), int(match.group(2))


def ref_matmul(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # matmul.cu: matmul<T, TILE>(a, b, c, m, n, k), row-major; block (TILE, TILE)
    dtype, tile = _template_args(MATMUL_NAME, spec)
    m, n, k = 70, 33, 45
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = mem.zeros((m, n), dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype)
    grid = (cdiv(n, tile), cdiv(m, tile))
    args = [mem.array(a), mem.array(b), c, m, n, k]
    return Case(args, grid, (tile, tile), {2: want}, rtol=tol, atol=tol)


MATMUL_LD_NAME = r"matmul_ld<\s*(float|double)\s*,\s*(\d+)\s*>"


def ref_matmul_ld(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # matmul.cu: matmul_ld<T, TILE>(a, lda, b, ldb, c, ldc, m, n, k, alpha), C = alpha A B with
    # rows lda, ldb, ldc elements apart (wider than k, n, n): the padding columns stay untouched
    dtype, tile = _template_args(MATMUL_LD_NAME, spec)
    m, n, k, lda, ldb, ldc = 37, 21, 50, 53, 24, 29
    a = rng.standard_normal((m, lda)).astype(dtype)
    b = rng.standard_normal((k, ldb)).astype(dtype)
    c = rng.standard_normal((m, ldc)).astype(dtype)
    alpha = dtype(0.5)
    want = c.copy()
    want[:, :n] = (alpha * (a[:, :k].astype(np.float64) @ b[:, :n].astype(np.float64))).astype(
        dtype
    )
    tol = 1e-4 if dtype == np.float32 else 1e-10
    grid = (cdiv(n, tile), cdiv(m, tile))
    args = [mem.array(a), lda, mem.array(b), ldb, mem.array(c), ldc, m, n, k, alpha]
    return Case(args, grid, (tile, tile), {4: want}, rtol=tol, atol=tol, note="lda > k, ldb > n")


BF16 = np.dtype(ml_dtypes.bfloat16)


def ref_half_gain_stats(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # half_stats.cu: y = x * gain in __half2 pairs (one rounding, as numpy's float16 multiply),
    # stats = (sum, sum of squares) of y in float; blockDim.x must be 256 (CUB's block size)
    n2 = 5_003  # pairs; not a multiple of the block
    x = rng.standard_normal(2 * n2).astype(np.float16)
    gain = np.float16(0.75)
    y = (x * gain).astype(np.float16)
    wide = y.astype(np.float64)
    stats = np.array([wide.sum(), (wide * wide).sum()], np.float32)
    out, acc = mem.zeros(2 * n2, np.float16), mem.zeros(2, np.float32)
    args = [mem.array(x), out, (gain, gain), n2, acc]
    return Case(args, cdiv(n2, 256), 256, {1: y, 4: stats}, rtol=1e-4, atol=1e-3)


def ref_bf16_offset_to_half(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # half_stats.cu: y = half(float(x) + float(bias)), x and bias bfloat16
    n = 4_099
    x = rng.standard_normal(n).astype(BF16)
    bias = np.array(0.5, BF16)[()]
    want = (x.astype(np.float32) + np.float32(bias)).astype(np.float16)
    out = mem.zeros(n, np.float16)
    return Case([mem.array(x), bias, out, n], cdiv(n, 128), 128, {2: want}, rtol=0, atol=0)


def ref_haxpy(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # haxpy.py: out = fma(a, x, y) in float16, one rounding (float64 is exact for the product)
    n = 10_007
    x = rng.standard_normal(n).astype(np.float16)
    y = rng.standard_normal(n).astype(np.float16)
    a = np.float16(1.25)
    want = (np.float64(a) * x.astype(np.float64) + y.astype(np.float64)).astype(np.float16)
    out = mem.zeros(n, np.float16)
    args = [out, a, mem.array(x), mem.array(y)]
    return Case(args, cdiv(n, 256), 256, {0: want}, rtol=1e-3, atol=1e-3)


def ref_bf16_axpy(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # bf16_axpy.py: out = fma(a, x, y) in bfloat16, one rounding; a a Python float
    n = 10_007
    x = rng.standard_normal(n).astype(BF16)
    y = rng.standard_normal(n).astype(BF16)
    a = 1.5
    want = (a * x.astype(np.float64) + y.astype(np.float64)).astype(np.float32).astype(BF16)
    out = mem.zeros(n, BF16)
    args = [out, a, mem.array(x), mem.array(y)]
    return Case(args, cdiv(n, 256), 256, {0: want}, rtol=1e-2, atol=1e-2)


REFERENCES = ReferenceTable(
    {
        "saxpy": ref_saxpy,
        "box_blur_3x3": ref_box_blur_3x3,
        "histogram_256": ref_histogram_256,
        "sum_f32": ref_sum_f32,
        "sobel_magnitude": ref_sobel_magnitude,
        "half_gain_stats": ref_half_gain_stats,
        "bf16_offset_to_half": ref_bf16_offset_to_half,
        "haxpy": ref_haxpy,
        "bf16_axpy": ref_bf16_axpy,
    },
    patterns=[(MATMUL_NAME, ref_matmul), (MATMUL_LD_NAME, ref_matmul_ld)],
    probe="saxpy",
)
