"""Cooperative launches, `forall`, PTX linked by the driver, records and pointers: fake GPU."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

import gpu_runtime
from gpu_runtime.conftest import (
    FakeBackend,
    FakeDeviceArray,
    file_bytes,
    library_specs,
    write_bundle,
)
from gpu_runtime.driver import devarray
from gpu_runtime.driver.devarray import DeviceArray
from gpu_runtime.errors import DispatchError, IntegrityError, LaunchError
from gpu_runtime.numba_compat.xoroshiro import xoroshiro128p_dtype
from gpu_runtime_testutil.fake_driver import FakeDriver

PTR = 0x7F00_0000_0000


def vec(n, dtype="float32", ptr=PTR):
    return FakeDeviceArray((n,), dtype, ptr)


@pytest.fixture
def docs(tmp_path):
    return write_bundle(str(tmp_path / "docs"), library_specs(["optional_entries"], caps=["sm_90"]))


def open_docs(root, backend, prefer=None):
    return gpu_runtime.open_cache(root, backend=backend, prefer=prefer)


# ---------------------------------------------------------------------------------------------
# cooperative kernels


def test_cooperative_kernel_is_launched_cooperatively(docs, fake_backend):
    k = open_docs(docs, fake_backend).kernel("solve_heat_equation")
    fake_backend.active_blocks[("_Zlaplace", 256, 0)] = 3
    for _ in range(2):  # the checked path, then the plan's repack
        k[396, 256](vec(1000), 5, np.float32(0.25))  # 3 x 132 SMs: exactly co-resident
    assert fake_backend.launches == []
    assert [c[1:3] for c in fake_backend.cooperative_launches] == [((396, 1, 1), (256, 1, 1))] * 2
    assert fake_backend.cooperative_launches[0][5][-2:] == [
        struct.pack("<q", 5),
        struct.pack("<f", 0.25),
    ]
    # the occupancy is asked once per (block, shared memory)
    assert fake_backend.occupancy_queries == [("active", "_Zlaplace", 256, 0)]
    assert k.max_cooperative_grid_blocks(256) == 396


def test_cooperative_grid_too_large_is_refused_before_launching(docs, fake_backend):
    k = open_docs(docs, fake_backend).kernel("solve_heat_equation")
    fake_backend.active_blocks[("_Zlaplace", 1024, 4096)] = 1
    with pytest.raises(LaunchError) as e:
        k.launch((20, 7), 1024, vec(1000), 5, np.float32(0.25), shared_mem=4096)
    msg = str(e.value)
    assert "kernel optional_entries.solve_heat_equation synchronises its whole grid" in msg
    assert "grid (20, 7, 1) has 140 blocks" in msg
    assert "at most 132 blocks of 1024 threads" in msg
    assert "1 per SM by cuOccupancyMaxActiveBlocksPerMultiprocessor x 132 SMs" in msg
    assert "4096 bytes of dynamic shared memory" in msg
    assert fake_backend.cooperative_launches == [] and fake_backend.launches == []
    fake_backend.active_blocks[("_Zlaplace", 32, 0)] = 0
    with pytest.raises(LaunchError, match="not even one block of 32 threads"):
        k[1, 32](vec(10), 5, np.float32(0.25))


def test_other_kernels_launch_as_before(docs, fake_backend):
    k = open_docs(docs, fake_backend).kernel("compute_pi")
    k[1, 32](FakeDeviceArray((64,), xoroshiro128p_dtype, PTR), vec(64, ptr=PTR + 4096))
    assert len(fake_backend.launches) == 1 and fake_backend.cooperative_launches == []


# ---------------------------------------------------------------------------------------------
# forall


def test_forall_takes_the_block_size_of_the_occupancy_calculator(bundle, fake_backend):
    k = gpu_runtime.open_cache(bundle, backend=fake_backend).kernel("saxpy")
    x = vec(10_000)
    k.forall(10_000)(x, np.float32(2), x, x)
    k.forall(10_000)(x, np.float32(2), x, x)
    (_, grid, block, *_), _ = fake_backend.launches
    assert block == (768, 1, 1) and grid == (14, 1, 1)  # ceil(10000 / 768)
    (query,) = fake_backend.occupancy_queries  # asked once per (function, shared memory)
    assert (
        query[0] == "potential"
        and query[1].startswith("_ZN6cudapy5saxpy")
        and query[2:] == (0, 1024)
    )


def test_forall_with_threads_per_block_and_edge_counts(bundle, fake_backend):
    k = gpu_runtime.open_cache(bundle, backend=fake_backend).kernel("saxpy")
    x = vec(100)
    k.forall(100, tpb=32, stream=7, sharedmem=16)(x, np.float32(2), x, x)
    (_, grid, block, stream, shared, _) = fake_backend.launches[0]
    assert (grid, block, stream, shared) == ((4, 1, 1), (32, 1, 1), 7, 16)
    k.forall(0)(x, np.float32(2), x, x)  # nothing to do: no launch, no occupancy query
    assert len(fake_backend.launches) == 1 and fake_backend.occupancy_queries == []
    with pytest.raises(ValueError, match="negative task count"):
        k.forall(-1)
    assert k.forall_config(1, (x, np.float32(2), x, x)) == (1, 768)


# ---------------------------------------------------------------------------------------------
# PTX with ptx_link: the driver's linker


def test_ptx_variant_links_its_parts_verified(docs):
    backend = FakeBackend()
    c = open_docs(docs, backend, prefer="ptx")
    c.kernel("solve_heat_equation").load()
    ((name, inputs),) = backend.links
    assert name == "optional_entries/laplace__0"
    assert [k for k, _ in inputs] == [
        "CU_JIT_INPUT_PTX",
        "CU_JIT_INPUT_LIBRARY",
        "CU_JIT_INPUT_PTX",
    ]
    assert inputs[1][1] == file_bytes("optional_entries", "libcudadevrt.a", "sm_90", "link")
    assert inputs[2][1] == file_bytes("optional_entries", "functions.ptx", "sm_90", "link")
    c.kernel("compute_pi").load()  # no ptx_link: a plain PTX load
    assert len(backend.links) == 1 and backend.loads[-1][0] == "ptx"
    assert any(p.endswith("functions.ptx") for p in c.verify())


def test_cubin_variant_needs_no_link(docs):
    backend = FakeBackend()
    open_docs(docs, backend).kernel("solve_heat_equation").load()
    assert backend.links == [] and backend.loads[0][0] == "cubin"


def test_tampered_link_file_is_refused(docs):
    path = os.path.join(docs, "optional_entries", "cuda13", "sm_90", "functions.ptx")
    with open(path, "ab") as f:
        f.write(b"// changed")
    with pytest.raises(IntegrityError, match="functions.ptx"):
        open_docs(docs, FakeBackend(), prefer="ptx").kernel("solve_heat_equation").load()


def test_missing_link_file_leaves_no_ptx_variant(docs, caplog):
    os.remove(os.path.join(docs, "optional_entries", "cuda13", "sm_90", "libcudadevrt.a"))
    for name in ("laplace__0", "rng__0", "cpointer__0"):
        os.remove(os.path.join(docs, "optional_entries", "cuda13", "sm_90", f"{name}.cubin"))
    with pytest.raises(gpu_runtime.NoCompatibleVariantError):
        open_docs(docs, FakeBackend()).kernel("solve_heat_equation").load()
    assert "libcudadevrt.a" in caplog.text


# ---------------------------------------------------------------------------------------------
# records, pointers and 0-d arrays through Kernel


def test_pointer_arguments_take_arrays_buffers_and_integers(docs, fake_backend):
    k = open_docs(docs, fake_backend).kernel("add_pointers")
    out0 = FakeDeviceArray((), "float32", PTR + 64)

    class Buffer:
        handle = PTR + 128

    k[1, 1](vec(4, ptr=PTR), Buffer(), out0)
    k[1, 1](np.uint64(PTR + 8), PTR + 16, out0)
    first, second = (launch[5] for launch in fake_backend.launches)
    assert first[:2] == [struct.pack("<Q", PTR), struct.pack("<Q", PTR + 128)]
    assert second[:2] == [struct.pack("<Q", PTR + 8), struct.pack("<Q", PTR + 16)]
    # the 0-d array: meminfo, parent, nitems 1, itemsize 4, data; no shape, no strides
    assert b"".join(first[2:]) == struct.pack("<qqqqQ", 0, 0, 1, 4, PTR + 64)


@pytest.fixture
def driver(monkeypatch):
    d = FakeDriver()
    monkeypatch.setattr(devarray, "driver_api", lambda: d)
    monkeypatch.setattr(devarray, "_ensure_context", lambda device: 0 if device is None else device)
    return d


def test_a_zero_d_device_array_from_numpy_launches_as_numba_passes_it(docs, fake_backend, driver):
    """`DeviceArray.from_numpy` of a numpy scalar is 0-d; the kernel typed
    `array(float32, 0d, C)` takes it on the checked path and on the repeat-launch path alike,
    and a 1-element 1-d array is refused in numba's spelling."""
    k = open_docs(docs, fake_backend).kernel("add_pointers")
    out0 = DeviceArray.from_numpy(np.float32(0))
    for _ in range(3):  # the first launch packs checked, later ones through the plan
        k[1, 1](PTR, PTR + 8, out0)
    assert fake_backend.bare_launches == 2
    zero_d = struct.pack("<qqqqQ", 0, 0, 1, 4, out0.ptr)
    assert [b"".join(launch[5][2:]) for launch in fake_backend.launches] == [zero_d] * 3
    with pytest.raises(
        DispatchError,
        match=r"expected array\(float32, 0d, C\), got float32\[::1\] \(1-D, not 0-D\)",
    ):
        k[1, 1](PTR, PTR + 8, DeviceArray.from_numpy(np.zeros(1, np.float32)))
    assert k.signatures == ["add_pointers(CPointer(float32), voidptr, array(float32, 0d, C))"]


@pytest.mark.parametrize(
    "args,match",
    [
        ((vec(4, "float64"), 0, None), "CPointer\\(float32\\) got a device array of dtype float64"),
        ((np.zeros(4, np.float32), 0, None), "host \\(numpy\\) array"),
        ((-1, 0, None), "not an address"),
        ((True, 0, None), "got a bool"),
        ((1.5, 0, None), "expected a device pointer"),
    ],
)
def test_pointer_argument_errors(docs, fake_backend, args, match):
    k = open_docs(docs, fake_backend).kernel("add_pointers")
    out0 = FakeDeviceArray((), "float32", PTR)
    with pytest.raises(DispatchError, match=match):
        k[1, 1](args[0], args[1], out0)


def test_record_array_of_another_layout_is_refused(docs, fake_backend):
    k = open_docs(docs, fake_backend).kernel("compute_pi")
    wrong = FakeDeviceArray((64,), np.dtype([("s0", "<u8")]), PTR)
    with pytest.raises(DispatchError, match="Record\\(s0:uint64@0, s1:uint64@8; 16 bytes\\)"):
        k[1, 32](wrong, vec(64))
