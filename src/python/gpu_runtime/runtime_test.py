"""KernelCache/Kernel through a fake GPU: lookup, dispatch, lazy thread-safe loading, logging."""

from __future__ import annotations

import json
import logging
import os
import struct
import threading

import numpy as np
import pytest

import gpu_runtime
from gpu_runtime.conftest import SAXPY2, FakeBackend, FakeDeviceArray, library_specs, write_bundle
from gpu_runtime.errors import (
    DispatchError,
    GpuRuntimeError,
    KernelNotFoundError,
    NoCompatibleVariantError,
)
from gpu_spec.manifest.model import MANIFEST_NAME

PTR = 0x7F00_0000_0000


def vec(n, dtype="float32", ptr=PTR, strides=None):
    return FakeDeviceArray((n,), dtype, ptr, strides)


@pytest.fixture
def cache(bundle, fake_backend):
    return gpu_runtime.open_cache(bundle, backend=fake_backend)


# ---------------------------------------------------------------------------------------------
# names


def test_lookup_by_kernel_name_and_qualified(cache):
    assert cache.kernel("saxpy").qualified_name == "saxpy.saxpy"
    assert cache.kernel("saxpy.saxpy") is cache.kernel("saxpy")
    assert cache.kernel("sum_f32", library="histogram").qualified_name == "histogram.sum_f32"
    assert cache.kernel("matmul<float, 16>").library == "matmul"
    assert cache.kernel("matmul.matmul<double, 16>").name == "matmul<double, 16>"


def test_unknown_kernel_lists_candidates(cache):
    with pytest.raises(KernelNotFoundError) as e:
        cache.kernel("saxpi")
    msg = str(e.value)
    assert "no kernel 'saxpi'" in msg and "did you mean saxpy" in msg and "histogram.sum_f32" in msg
    with pytest.raises(KernelNotFoundError, match="no library 'nope'"):
        cache.kernel("saxpy", library="nope")
    with pytest.raises(KernelNotFoundError, match="library 'sobel' has no kernel 'saxpy'"):
        cache.kernel("saxpy", library="sobel")


def test_ambiguous_name_lists_qualified_candidates(tmp_path):
    specs = library_specs(
        ["saxpy", "saxpy64"], extra={"saxpy64": ("k/saxpy64.py", "numba", SAXPY2)}
    )
    c = gpu_runtime.open_cache(write_bundle(str(tmp_path), specs), backend=FakeBackend())
    with pytest.raises(
        KernelNotFoundError, match="ambiguous .* use one of saxpy.saxpy, saxpy64.saxpy"
    ):
        c.kernel("saxpy")
    assert c.kernel("saxpy64.saxpy").library == "saxpy64"


def test_describe_prints_qualified_names_that_kernel_accepts(tmp_path):
    """Every kernel line of describe() starts with "library.kernel:", which `kernel()` takes
    as is, also where a bare name is ambiguous (two libraries define saxpy)."""
    specs = library_specs(
        ["saxpy", "saxpy64", "matmul"], extra={"saxpy64": ("k/saxpy64.py", "numba", SAXPY2)}
    )
    c = gpu_runtime.open_cache(write_bundle(str(tmp_path), specs), backend=FakeBackend())
    printed = [
        line.strip().split(": ", 1)[0]
        for line in c.describe().splitlines()
        if line.startswith("    ") and not line.startswith("      ")
    ]
    assert (
        printed
        == c.kernel_names()
        == [
            "matmul.matmul<float, 16>",
            "matmul.matmul<double, 16>",
            "saxpy.saxpy",
            "saxpy64.saxpy",
        ]
    )
    for q in printed:
        assert c.kernel(q).qualified_name == q
    with pytest.raises(KernelNotFoundError, match="use one of saxpy.saxpy, saxpy64.saxpy"):
        c.kernel("saxpy")


def test_signatures_and_describe_need_no_gpu(bundle):
    class NoGpu(FakeBackend):
        def device_info(self):
            raise AssertionError("GPU touched")

    c = gpu_runtime.open_cache(bundle, backend=NoGpu())
    assert c.kernel("histogram_256").signatures == [
        "histogram_256(uint8[::1], uint32[::1])",
        "histogram_256(uint8[:], uint32[::1])",
    ]
    described = c.describe()
    # declared C types where the manifest has them, PTX types for older manifests
    assert (
        "matmul<float, 16>: matmul<float, 16>(const float*, const float*, float*, int, int, int)"
    ) in described
    assert "matmul<double, 16>: matmul<double, 16>(u64, u64, u64, u32, u32, u32)" in described
    assert c.kernel("matmul<float, 16>").signatures == [
        "matmul<float, 16>(const float*, const float*, float*, int, int, int)"
    ]


def test_c_kernel_arguments_are_checked_against_the_declared_types(cache, fake_backend):
    k = cache.kernel("matmul<float, 16>")
    f32, f64 = vec(256, ptr=PTR), vec(256, "float64", ptr=PTR + 4096)
    with pytest.raises(
        DispatchError,
        match=r"argument 1 of matmul<float, 16> \(const float\*\): got a device array of "
        r"dtype float64, not float32; pass an array of float32, or its address as an int",
    ):
        k.launch((1, 1), (16, 16), f32, f64, f32, 16, 16, 16)
    k.launch((1, 1), (16, 16), f32, f64.ptr, f32, 16, 16, 16)  # an address: reinterpreted
    k.launch((1, 1), (16, 16), f32, f32, f32, -1, 16, 16)  # int: negative is the kernel's business
    with pytest.raises(DispatchError, match=r"2147483648 does not fit in int \(int32\)"):
        k.launch((1, 1), (16, 16), f32, f32, f32, 2**31, 16, 16)
    # the repeat-launch path checks as the first launch did
    for bad in (vec(8, "float64"), vec(8, "int32")):
        with pytest.raises(DispatchError, match="got a device array of dtype"):
            k.launch((1, 1), (16, 16), f32, f32, bad, 16, 16, 16)
    with pytest.raises(DispatchError, match="does not fit in int"):
        k.launch((1, 1), (16, 16), f32, f32, f32, 16, np.int64(2**31), 16)
    # no declared types recorded (an older manifest): the PTX types alone, as before
    cache.kernel("matmul<double, 16>").launch((1, 1), (16, 16), f32, f64, f32, 2**31, 16, 16)


# ---------------------------------------------------------------------------------------------
# dispatch


def test_dispatch_on_contiguity(cache, fake_backend):
    h = cache.kernel("histogram_256")
    bins = vec(256, "uint32", PTR + 0x10000)
    assert h.resolve(vec(100, "uint8"), bins)[0].name == "histogram_256__0"
    assert h.resolve(vec(100, "uint8", strides=(3,)), bins)[0].name == "histogram_256__1"
    h.launch(2, 256, vec(100, "uint8", strides=(3,)), bins)
    func = fake_backend.launches[-1][0]
    assert func == ("func", "histogram/histogram_256__1", "_Zhist1")


def test_dispatch_error_lists_signatures(cache):
    h = cache.kernel("histogram_256")
    with pytest.raises(DispatchError) as e:
        h.launch(1, 256, vec(100, "float32"), vec(256, "uint32"))
    msg = str(e.value)
    assert (
        "no signature of kernel 'histogram.histogram_256' matches the arguments "
        "(float32[::1] device array, uint32[::1] device array)" in msg
    )
    assert (
        "histogram_256(uint8[::1], uint32[::1]): argument 0 is float32[::1] device array, "
        "not uint8[::1]" in msg
    )
    assert (
        "histogram_256(uint8[:], uint32[::1]): argument 0 is float32[::1] device array, "
        "not uint8[:]" in msg
    )
    with pytest.raises(DispatchError, match="takes 2 arguments, got 1"):
        h.launch(1, 256, vec(100, "uint8"))


def test_dispatch_on_scalar_types():
    from gpu_runtime.launch.dispatch import select_overload
    from gpu_spec.manifest.model import ArgSpec, KernelSpec

    def k(dtype):
        return KernelSpec(
            name="f",
            entry=dtype,
            abi="numba",
            signature=f"void({dtype})",
            args=(ArgSpec("scalar", dtype),),
        )

    ks = [k("int32"), k("int64"), k("float32"), k("float64"), k("complex128"), k("bool")]
    pick = lambda v: select_overload(ks, [v]).entry  # noqa: E731
    assert pick(1) == "int64"
    assert pick(2**40) == "int64"
    assert pick(np.int32(1)) == "int32"
    assert pick(np.int16(1)) == "int32"  # same kind, safe cast, first listed
    assert pick(1.0) == "float64"
    assert pick(np.float32(1.0)) == "float32"
    assert pick(1j) == "complex128"
    assert pick(True) == "bool"
    assert pick(np.bool_(False)) == "bool"
    with pytest.raises(DispatchError, match="argument 0 is str, not int32"):
        pick("x")


def test_dispatch_on_dtype_and_ndim():
    from gpu_runtime.launch.dispatch import select_overload
    from gpu_spec.manifest.model import ArgSpec, KernelSpec

    ks = [
        KernelSpec(name="f", entry=e, abi="numba", args=(ArgSpec("array", d, n, layout),))
        for e, d, n, layout in [
            ("f1C", "float32", 1, "C"),
            ("f2C", "float32", 2, "C"),
            ("d2A", "float64", 2, "A"),
            ("d2C", "float64", 2, "C"),
        ]
    ]
    assert select_overload(ks, [FakeDeviceArray((3,), "f4")]).entry == "f1C"
    assert select_overload(ks, [FakeDeviceArray((3, 4), "f4")]).entry == "f2C"
    assert (
        select_overload(ks, [FakeDeviceArray((3, 4), "f8")]).entry == "d2C"
    )  # exact layout beats "A"
    assert select_overload(ks, [FakeDeviceArray((3, 4), "f8", strides=(64, 8))]).entry == "d2A"
    with pytest.raises(DispatchError, match=r"f\(float32\[:, ::1\]\)|argument 0 is"):
        select_overload(ks, [FakeDeviceArray((3, 4, 5), "f4")])


# ---------------------------------------------------------------------------------------------
# launching


def test_launch_passes_packed_numba_args(cache, fake_backend):
    out, x, y = vec(8, ptr=PTR), vec(8, ptr=PTR + 64), vec(8, ptr=PTR + 128)
    cache.kernel("saxpy").launch((1, 1, 1), 32, out, 2.5, x, y, stream=7, shared_mem=0)
    func, grid, block, stream, shmem, args = fake_backend.launches[0]
    assert func[0] == "func" and func[2].startswith("_ZN6cudapy5saxpy")
    assert (grid, block, stream, shmem) == ((1, 1, 1), (32, 1, 1), 7, 0)
    raw = b"".join(args)
    arr = lambda p: struct.pack("<7q", 0, 0, 8, 4, p, 8, 4)  # noqa: E731
    assert raw == arr(PTR) + struct.pack("<f", 2.5) + arr(PTR + 64) + arr(PTR + 128)


def test_numba_style_launch(cache, fake_backend):
    out = vec(8)
    cache.kernel("saxpy")[4, 64](out, np.float32(1), out, out)
    cache.kernel("saxpy")[4, 64, "s", 128](out, np.float32(1), out, out)
    assert [launch[1:5] for launch in fake_backend.launches] == [
        ((4, 1, 1), (64, 1, 1), 0, 0),
        ((4, 1, 1), (64, 1, 1), "s", 128),
    ]
    with pytest.raises(DispatchError, match="kernel\\[grid, block\\]"):
        cache.kernel("saxpy")[4]


def test_launch_c_kernel(cache, fake_backend):
    a, b, c = vec(256, ptr=PTR), vec(256, ptr=PTR + 1024), vec(256, ptr=PTR + 2048)
    cache.kernel("matmul<float, 16>").launch((1, 1), (16, 16), a, b, c, 16, 16, 16)
    args = fake_backend.launches[0][5]
    assert b"".join(args) == struct.pack("<QQQIII", PTR, PTR + 1024, PTR + 2048, 16, 16, 16)


def test_pack_for_debugging(cache):
    p = cache.kernel("sobel_magnitude").pack(vec(4), vec(4, ptr=PTR + 16), 2, 2, 2)
    assert p.image == struct.pack("<QQIII", PTR, PTR + 16, 2, 2, 2)


# ---------------------------------------------------------------------------------------------
# loading: lazy, once, thread-safe, logged


def test_nothing_loads_until_first_launch(cache, fake_backend):
    k = cache.kernel("saxpy")
    assert fake_backend.loads == []
    out = vec(8)
    k.launch(1, 8, out, 1.0, out, out)
    k.launch(1, 8, out, 1.0, out, out)
    assert [(kind, name) for kind, _, name in fake_backend.loads] == [("cubin", "saxpy/saxpy__0")]
    assert fake_backend.loads[0][1].startswith(b"// fake cubin of saxpy/saxpy__0 for sm_90")
    assert len(fake_backend.launches) == 2


def test_concurrent_first_use_loads_once(bundle):
    backend = FakeBackend(load_delay=0.05)
    c = gpu_runtime.open_cache(bundle, backend=backend)
    k = c.kernel("saxpy")
    out = vec(8)
    errors = []

    def go():
        try:
            k.launch(1, 8, out, 1.0, out, out)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(backend.loads) == 1 and len(backend.functions) == 1
    assert len(backend.launches) == 16


def test_loaded_modules_and_driver_param_info(cache, fake_backend):
    out = vec(8)
    k = cache.kernel("saxpy")
    assert cache.loaded_modules() == []
    assert k.param_info(out, 1.0, out, out) is None  # this fake driver cannot tell
    assert cache.loaded_modules() == ["saxpy/saxpy__0"]
    (entry,) = [spec.entry for _, spec in k.overloads()]
    fake_backend.param_layouts[entry] = [(0, 8), (8, 4)]
    assert k.param_info(out, 1.0, out, out) == [(0, 8), (8, 4)]
    assert len(fake_backend.loads) == 1
    packed = k.pack(out, 1.0, out, out)
    assert packed.sizes == (8,) * 7 + (4,) + (8,) * 14
    assert packed.offsets[7:9] == (56, 64)


def test_load_is_logged(cache, caplog):
    caplog.set_level(logging.INFO, logger="gpu_runtime")
    cache.kernel("sobel_magnitude").load()
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "gpu_runtime")
    assert (
        "sobel: using cubin sm_90 (toolchain cuda13) on NVIDIA H200 (sm_90), driver supports "
        "CUDA 13.0: exact cubin for sm_90" in text
    )
    assert "sobel.sobel_magnitude: bundle cubin sm_90, " in text
    assert "sobel/cuda13/sm_90/sobel.cubin (sobel) loaded in " in text
    assert " ms (read+verify " in text
    assert "from bundle cubin, loaded in " in cache.describe()


def test_ptx_fallback_and_prefer(bundle, caplog):
    caplog.set_level(logging.INFO, logger="gpu_runtime")
    b = FakeBackend(capability=(10, 0), driver=(13, 0), name="B200")
    c = gpu_runtime.open_cache(bundle, backend=b)
    c.kernel("saxpy").load()
    assert b.loads[0][0] == "ptx" and b.loads[0][1].startswith(
        b"// fake ptx of saxpy/saxpy__0 for sm_90"
    )
    assert "JIT-compiling PTX sm_90" in caplog.text

    b2 = FakeBackend()
    gpu_runtime.open_cache(bundle, backend=b2, prefer="ptx").kernel("saxpy").load()
    assert b2.loads[0][0] == "ptx"
    with pytest.raises(ValueError, match="prefer must be"):
        gpu_runtime.open_cache(bundle, backend=b2, prefer="sass")


def test_prefer_from_environment(bundle, monkeypatch):
    monkeypatch.setenv("GPU_RUNTIME_PREFER", "ptx")
    b = FakeBackend()
    gpu_runtime.open_cache(bundle, backend=b).kernel("sum_f32").load()
    assert b.loads[0][0] == "ptx"


def test_no_compatible_variant_error_at_first_use(bundle):
    b = FakeBackend(capability=(7, 5), driver=(12, 4), name="Tesla T4")
    c = gpu_runtime.open_cache(bundle, backend=b)
    k = c.kernel("saxpy")  # lookup works without a compatible variant
    with pytest.raises(NoCompatibleVariantError) as e:
        k.load()
    msg = str(e.value)
    assert "library 'saxpy' in bundle 'imaging_h200'" in msg
    assert "device: Tesla T4 (sm_75), driver supports CUDA 12.4" in msg
    assert "add \"sm_75\" to the capabilities of the deploy_bundle 'imaging_h200'" in msg


def test_backend_load_failure_is_wrapped(bundle):
    c = gpu_runtime.open_cache(bundle, backend=FakeBackend(fail_load=True))
    with pytest.raises(
        GpuRuntimeError,
        match="loading cubin saxpy/cuda13/sm_90/saxpy__0.cubin failed: "
        "RuntimeError: CUDA_ERROR_INVALID_IMAGE",
    ):
        c.kernel("saxpy").load()


def test_preload_loads_every_selected_module(cache, fake_backend):
    cache.preload()
    assert sorted(name for _, _, name in fake_backend.loads) == [
        "histogram/histogram_256__0",
        "histogram/histogram_256__1",
        "histogram/sum_f32__0",
        "matmul/matmul",
        "saxpy/saxpy__0",
        "sobel/sobel",
    ]
    # matmul's two kernels share one module: loaded once, two functions
    assert sum(1 for n, _ in fake_backend.functions if n == "matmul/matmul") == 2


def test_lazy_public_names():
    assert gpu_runtime.DeviceArray.__name__ == "DeviceArray"
    assert gpu_runtime.select_variant.__name__ == "select_variant"
    with pytest.raises(AttributeError):
        gpu_runtime.nope  # noqa: B018


def test_warns_when_driver_is_older_than_the_bundle_target(bundle, caplog):
    caplog.set_level(logging.INFO, logger="gpu_runtime")
    b = FakeBackend(capability=(8, 0), driver=(12, 8), name="A100")
    c = gpu_runtime.open_cache(bundle, backend=b)
    with pytest.raises(NoCompatibleVariantError):
        c.kernel("saxpy").load()
    assert (
        "bundle 'imaging_h200' was built for a CUDA 13.0 driver; this device's driver "
        "supports CUDA 12.8" in caplog.text
    )


def test_library_accessor(cache):
    assert cache.library("saxpy").language == "numba"
    with pytest.raises(KernelNotFoundError, match="no library 'x'"):
        cache.library("x")


def test_removed_cubins_fall_back_to_ptx_with_a_warning(bundle, caplog):
    import glob
    import os

    for cubin in glob.glob(os.path.join(bundle, "**", "*.cubin"), recursive=True):
        os.remove(cubin)
    caplog.set_level(logging.INFO, logger="gpu_runtime")
    b = FakeBackend()
    gpu_runtime.open_cache(bundle, backend=b).kernel("saxpy").load()
    assert [kind for kind, _, _ in b.loads] == ["ptx"]
    assert "missing from" in caplog.text and "saxpy__0.cubin" in caplog.text


def test_removed_cubins_and_ptx_give_the_clear_error(bundle):
    import glob
    import os

    for path in glob.glob(os.path.join(bundle, "saxpy", "**", "*.*"), recursive=True):
        os.remove(path)
    with pytest.raises(gpu_runtime.IntegrityError, match="4 of 24 files missing"):
        gpu_runtime.open_cache(bundle, backend=FakeBackend()).kernel("saxpy").load()


@pytest.mark.parametrize("bad", [None, "", b"saxpy", 3, print])
def test_a_name_that_is_not_a_string_is_refused_in_one_line(cache, bad):
    with pytest.raises(KernelNotFoundError, match="must be a non-empty string") as e:
        cache.kernel(bad)
    assert "\n" not in str(e.value)
    with pytest.raises(KernelNotFoundError, match="library name must be a non-empty string"):
        cache.kernel("saxpy", library=bad if bad is not None else 0)
    with pytest.raises(KernelNotFoundError, match="library name must be a non-empty string"):
        cache.library(bad)


def test_describe_prints_each_variants_resources_and_occupancy(bundle):
    """Each kernel, per variant with recorded resources: registers, spills, shared, local, const
    and the occupancy at the best block size; a manifest without resources prints none."""
    described = gpu_runtime.open_cache(bundle, backend=FakeBackend()).describe()
    lines = [line.strip() for line in described.splitlines() if "occupancy" in line]
    assert lines and all(line.startswith("sm_") for line in lines)
    assert (
        "sm_90 (cuda13): registers 12, spills 0/0 B (stores/loads), shared 0 B, local 0 B, "
        "const 0 B; occupancy 100% at 64 threads per block (32 blocks, limited by warps)"
    ) in lines


def test_describe_reads_a_manifest_without_resources(tmp_path):
    cache = write_bundle(str(tmp_path), library_specs(["saxpy"]))
    path = os.path.join(cache, MANIFEST_NAME)
    with open(path) as f:
        manifest = json.load(f)
    for lib in manifest["libraries"]:
        for v in lib["variants"]:
            for m in v["modules"]:
                for k in m["kernels"]:
                    k.pop("resources", None)
    with open(path, "w") as f:
        json.dump(manifest, f)
    described = gpu_runtime.open_cache(cache, backend=FakeBackend()).describe()
    assert "saxpy.saxpy: " in described and "occupancy" not in described
