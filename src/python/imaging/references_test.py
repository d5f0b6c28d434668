"""The example's numpy references and the cases its self-test builds from them."""

from __future__ import annotations

import numpy as np

from gpu_runtime.selftest.inputs import Memory
from gpu_spec.manifest.model import ArgSpec, KernelSpec
from imaging import references
from imaging.references import REFERENCES, box_blur_ref, cdiv, sobel_ref

# Every kernel name the example's BUILD compiles (kernels/*.py, *.cu and matmul.cu's name
# expressions).
EXAMPLE_KERNELS = [
    "saxpy",
    "box_blur_3x3",
    "histogram_256",
    "sum_f32",
    "sobel_magnitude",
    "matmul<float, 16>",
    "matmul<double, 16>",
    "matmul_ld<float, 16>",
    "matmul_ld<double, 16>",
    "half_gain_stats",
    "bf16_offset_to_half",
    "haxpy",
    "bf16_axpy",
]


def test_every_example_kernel_has_a_reference():
    assert all(REFERENCES.lookup(name) is not None for name in EXAMPLE_KERNELS)
    assert REFERENCES.lookup("matmul<double, 32>") is references.ref_matmul
    assert REFERENCES.lookup("matmul_ld<float, 32>") is references.ref_matmul_ld
    assert REFERENCES.lookup("nope") is None
    assert REFERENCES.probe == "saxpy"


def test_histogram_cases_fit_each_signature():
    mem = Memory(host=True)
    for layout in ("C", "A"):
        spec = KernelSpec(
            name="histogram_256",
            entry="e",
            abi="numba",
            args=(ArgSpec("array", "uint8", 1, layout), ArgSpec("array", "uint32", 1, "C")),
        )
        case = references.ref_histogram_256(spec, mem, np.random.default_rng(0))
        view = case.args[0].__cuda_array_interface__
        assert (view["strides"] is None) == (layout == "C")
        # the host read-back of a strided view is what the kernel would see
        host = mem.to_host(case.args[0])
        assert np.array_equal(np.bincount(host, minlength=256), case.expected[1])


def test_matmul_case_follows_the_template_arguments():
    spec = KernelSpec(
        name="matmul<double, 32>",
        entry="e",
        abi="c",
        params=("u64", "u64", "u64", "u32", "u32", "u32"),
    )
    case = references.ref_matmul(spec, Memory(host=True), np.random.default_rng(0))
    assert case.block == (32, 32) and case.grid == (cdiv(33, 32), cdiv(70, 32))
    assert case.expected[2].dtype == np.float64


def test_references_agree_with_independent_formulas():
    rng = np.random.default_rng(1)
    img = rng.random((5, 7), dtype=np.float32)
    blur = box_blur_ref(img)
    assert blur.dtype == np.float32
    # interior pixel: plain 3x3 mean
    assert np.isclose(blur[2, 3], img[1:4, 2:5].mean(), rtol=1e-6)
    # corner: clamp-to-edge replicates the border
    p = np.pad(img, 1, mode="edge")
    assert np.isclose(blur[0, 0], p[0:3, 0:3].mean(), rtol=1e-6)
    sob = sobel_ref(img)
    gx = (img[1, 4] + 2 * img[2, 4] + img[3, 4]) - (img[1, 2] + 2 * img[2, 2] + img[3, 2])
    gy = (img[3, 2] + 2 * img[3, 3] + img[3, 4]) - (img[1, 2] + 2 * img[1, 3] + img[1, 4])
    assert np.isclose(sob[2, 3], np.hypot(gx, gy), rtol=1e-5)
    assert cdiv(10, 4) == 3 and cdiv(8, 4) == 2


def test_every_case_builds_on_host_memory():
    mem = Memory(host=True)
    specs = {
        "saxpy": KernelSpec(name="saxpy", entry="e", abi="numba"),
        "box_blur_3x3": KernelSpec(name="box_blur_3x3", entry="e", abi="numba"),
        "sum_f32": KernelSpec(name="sum_f32", entry="e", abi="numba"),
        "sobel_magnitude": KernelSpec(name="sobel_magnitude", entry="e", abi="c"),
        "matmul<float, 16>": KernelSpec(name="matmul<float, 16>", entry="e", abi="c"),
    }
    for name, spec in specs.items():
        build = REFERENCES.lookup(name)
        assert build is not None, name
        case = build(spec, mem, np.random.default_rng(0))
        for idx, want in case.expected.items():
            got = mem.to_host(case.args[idx])
            assert (got.shape, got.dtype) == (want.shape, want.dtype), name
