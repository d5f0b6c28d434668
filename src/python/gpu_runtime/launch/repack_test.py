"""The repeat-launch path: generated repack, DeviceArray entries, last launch shape, streams."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import gpu_runtime
from gpu_runtime.conftest import FakeBackend, FakeDeviceArray
from gpu_runtime.driver import devarray
from gpu_runtime.driver.devarray import DeviceArray
from gpu_runtime.driver.device import CudaBackend
from gpu_runtime.errors import DispatchError
from gpu_runtime.launch.abi import pack_args
from gpu_runtime.launch.dtype_json import dtype_to_json
from gpu_runtime.launch.plan import build_plan, pattern_key
from gpu_runtime_testutil.fake_driver import FakeDriver
from gpu_runtime_testutil.launch_cases import (
    C_CASES,
    NUMBA_CASES,
    PTR,
    A,
    P,
    S,
    c_kernel,
    numba_kernel,
)


@pytest.fixture
def driver(monkeypatch):
    d = FakeDriver()
    monkeypatch.setattr(devarray, "driver_api", lambda: d)
    monkeypatch.setattr(devarray, "_ensure_context", lambda device: 0 if device is None else device)
    return d


def dev(shape, dtype="float32"):
    return DeviceArray(shape, dtype)


def plan_of(kernel, args):
    return build_plan("f", kernel, args, pack_args(kernel, args))


@pytest.mark.parametrize("specs,args", NUMBA_CASES)
def test_numba_repack_image_equals_checked_image(specs, args):
    k = numba_kernel(specs)
    assert plan_of(k, args).repack(args).image() == pack_args(k, args).image


@pytest.mark.parametrize("params,args", C_CASES)
def test_c_repack_image_equals_checked_image(params, args):
    k = c_kernel(params)
    assert plan_of(k, args).repack(args).image() == pack_args(k, args).image


def test_device_arrays_repack_their_own_values(driver):
    k = numba_kernel([A("float32", 2), S("float32"), A("float32", 1)])
    a, b = dev((3, 5)), dev((7,))
    plan = plan_of(k, [a, np.float32(1), b])
    for args in ([a, np.float32(2), b], [dev((4, 2)), np.float32(3), dev((9,))]):
        assert plan.repack(args).image() == pack_args(k, args).image
    c = c_kernel(["u64", "u64", "u32"])
    cplan = plan_of(c, [a, b, 7])  # ints of 3 bits: one pattern
    for args in ([a, b, 4], [dev((2, 2)), dev((9,)), 5]):
        assert cplan.repack(args).image() == pack_args(c, args).image
    assert cplan.repack([b, a, 4]) is None  # another pattern: ndim tells C arrays apart too


def test_two_arrays_are_never_confused(driver):
    """Each array's kept entry is its own, also when one is freed and another allocated."""
    k = numba_kernel([A("float32", 1)])
    first = dev((8,))
    plan = plan_of(k, [first])
    seen = set()
    for _ in range(20):
        a = dev((8,))
        assert plan.repack([a]).image() == pack_args(k, [a]).image
        seen.add(plan.repack([a]).image())
        a.free()
    assert len(seen) == 20  # the fake driver never hands out an address twice while live
    first.free()
    assert first._launch is None
    with pytest.raises(ValueError, match="freed"):
        plan.repack([first])


def test_arrays_kept_in_the_buffer_only_while_they_are_the_same(driver):
    """A repack with the arrays the buffer already holds rewrites the scalars alone."""
    k = numba_kernel([A("float32", 1), S("float32"), A("float32", 2)])
    a, b, m, n = dev((4,)), dev((6,)), dev((2, 3)), dev((5, 3))
    plan = plan_of(k, [a, np.float32(0), m])
    sequence = [(a, m), (a, m), (b, m), (b, m), (a, n), (a, m), (a, m)]
    for i, (x, y) in enumerate(sequence):
        args = [x, np.float32(i), y]
        assert plan.repack(args).image() == pack_args(k, args).image, i
    buf = plan.buffer()
    assert buf.arrays is not None and buf.arrays[0] is a._launch and buf.arrays[1] is m._launch
    other = [b, np.float32(9), n]
    plan.pack(other, pattern_key(other)[1])  # the key path writes the whole image
    assert buf.arrays is None
    args = [a, np.float32(10), m]
    assert plan.repack(args).image() == pack_args(k, args).image


def test_the_same_scalar_objects_are_not_written_again(driver):
    """Beside the same arrays, the very scalar objects the buffer holds are not rewritten (they
    are immutable); another object is, whatever its value."""
    k = numba_kernel([A("float32", 1), S("float32"), S("int32"), A("float32", 1)])
    a, b = dev((4,)), dev((6,))
    f, i = np.float32(2), np.int32(7)
    plan = plan_of(k, [a, f, i, b])
    buf = plan.repack([a, f, i, b])
    offset = pack_args(k, [a, f, i, b]).offsets[7]  # the float32 (after 7 of the array)
    buf.data[offset : offset + 4] = b"\xff" * 4  # what a skipped write would leave
    assert plan.repack([a, f, i, b]).image()[offset : offset + 4] == b"\xff" * 4
    for args in ([a, np.float32(2), i, b], [a, np.float32(3), i, b], [b, f, i, a]):
        assert plan.repack(args).image() == pack_args(k, args).image, args
    assert buf.scalars is not None and buf.scalars[0] is f  # the last launch's, written whole
    b.free()  # the buffer holds its entry: a freed array must still be refused
    with pytest.raises(ValueError, match="freed"):
        plan.repack([a, f, i, b])
    assert plan.repack([FakeDeviceArray((4,), "float32", PTR), f, i, a]) is None


def test_a_scalar_that_fails_alone_leaves_a_correct_buffer(driver):
    k = numba_kernel([A("float32", 1), S("float32")])
    a = dev((4,))
    plan = plan_of(k, [a, np.float64(1)])
    plan.repack([a, np.float64(1)])
    with pytest.raises(OverflowError):
        plan.repack([a, np.float64(1e300)])  # float32 overflow: the checked path's to refuse
    assert plan.repack([a, np.float64(2)]).image() == pack_args(k, [a, np.float64(2)]).image


def test_repack_refuses_every_other_pattern(driver):
    k = numba_kernel([A("float32", 1), S("float32"), S("int64")])
    plan = plan_of(k, [dev((4,)), np.float32(1), 5])
    others = [
        [dev((4,), "float64"), np.float32(1), 5],
        [dev((4, 1)), np.float32(1), 5],
        [FakeDeviceArray((4,), "float32", PTR), np.float32(1), 5],
        [dev((4,)), 1.0, 5],
        [dev((4,)), np.float32(1), 2**40],
        [dev((4,)), np.float32(1), -5],
        [dev((4,)), np.float32(1)],
        [dev((4,)), np.float32(1), 5, 6],
    ]
    for args in others:
        assert plan.repack(args) is None, args


def test_record_and_pointer_arguments_repack_their_own_values(driver):
    rec = np.dtype([("s0", "<u8"), ("s1", "<u8")], align=True)
    k = numba_kernel(
        [A(dtype_to_json(rec), 1), P("float32"), P("void"), A("float64", 0)],
    )
    states, out, z = dev((8,), rec), dev((8,)), dev((), "float64")
    assert pattern_key([states])[0] is not None
    plan = plan_of(k, [states, out, 0x1000, z])
    for args in ([dev((3,), rec), dev((2,)), 0x1800, dev((), "float64")], [states, out, 0x1FFF, z]):
        buf = plan.repack(args)
        assert buf is not None and buf.image() == pack_args(k, args).image
    swapped = [states, 0x30, out, z]  # an int for the typed pointer: another pattern
    assert plan.repack(swapped) is None
    assert plan_of(k, swapped).repack(swapped).image() == pack_args(k, swapped).image
    other = dev((8,), np.dtype([("a", "<u8"), ("b", "<u8")]))  # same bytes, other names
    assert plan.repack([other, out, 0, z]) is None
    with pytest.raises(DispatchError, match="record"):
        pack_args(k, [other, out, 0, z])


def test_plans_without_steps_fit_nothing():
    k = numba_kernel([S("float16")])
    assert plan_of(k, [1.5]).repack([1.5]) is None


# ---------------------------------------------------------------------------------------------
# through Kernel.launch


@pytest.fixture
def cache(bundle, fake_backend):
    return gpu_runtime.open_cache(bundle, backend=fake_backend)


def params(packed):
    return [packed.image[o : o + n] for o, n in zip(packed.offsets, packed.sizes)]


def test_alternating_patterns_launch_exactly(cache, fake_backend, driver):
    k = cache.kernel("saxpy")
    h = cache.kernel("histogram_256")
    bins = dev((256,), "uint32")
    for i in range(4):
        out, x = dev((8 + i,)), dev((8 + i,))
        k.launch(1, 32, out, np.float32(i), x, x)
        assert fake_backend.launches[-1][5] == params(k.pack(out, np.float32(i), x, x))
        k.launch(1, 32, out, float(i), x, x)  # another pattern (a Python float): its own plan
        assert fake_backend.launches[-1][5] == params(k.pack(out, float(i), x, x))
        strided = FakeDeviceArray((100,), "uint8", PTR, (3,))
        arg = dev((100,), "uint8") if i % 2 else strided
        h.launch(2, 256, arg, bins)
        assert fake_backend.launches[-1][0][2] == ("_Zhist0" if i % 2 else "_Zhist1")
    assert len(k._plans) == 2


def test_repeat_launches_fire_the_bare_call_with_the_checked_bytes(cache, fake_backend, driver):
    """After a pattern's first (checked) launch, `fire` packs and calls cuLaunchKernel itself:
    the same bytes as the checked path, and `launch_raw` is not called again."""
    k = cache.kernel("saxpy")
    for i in range(5):
        out, x = (dev((8,)), dev((8,))) if i % 2 else (dev((16,)), dev((16,)))
        k.launch(2, 32, out, np.float32(i), x, x)
        assert fake_backend.launches[-1][5] == params(k.pack(out, np.float32(i), x, x))
        assert fake_backend.bare_launches == i  # the first launch was launch_raw's
    k[2, 32](out, np.float32(7), x, x)  # numba style: the same fire
    assert fake_backend.bare_launches == 5
    assert fake_backend.launches[-1][5] == params(k.pack(out, np.float32(7), x, x))


def test_a_refused_fire_launches_once_through_the_checked_path(bundle, driver):
    """A status other than success (no context on this thread, a bad launch) is handled by
    launch_raw, which retries or raises; the refused call launched nothing."""

    class RefusesOnce(FakeBackend):
        refused = 0

        def bare_launch(self, *call):
            if not self.refused:
                self.refused += 1
                return (object(),)
            return super().bare_launch(*call)

    backend = RefusesOnce()
    k = gpu_runtime.open_cache(bundle, backend=backend).kernel("saxpy")
    out = dev((8,))
    for i in range(3):
        k.launch(1, 8, out, np.float32(i), out, out)
        assert backend.launches[-1][5] == params(k.pack(out, np.float32(i), out, out))
    assert backend.refused == 1 and len(backend.launches) == 3
    assert backend.bare_launches == 1  # first: launch_raw; second: refused, then launch_raw


def test_a_configured_list_grid_is_read_on_every_call(cache, fake_backend, driver):
    k = cache.kernel("saxpy")
    out = dev((8,))
    grid = [2, 3]
    configured = k[grid, 8]
    configured(out, np.float32(1), out, out)
    grid[1] = 5
    configured(out, np.float32(1), out, out)
    assert [launch[1] for launch in fake_backend.launches] == [(2, 3, 1), (2, 5, 1)]
    with pytest.raises(DispatchError, match="shared_mem"):
        k[1, 8, None, -1]


def test_wrong_arguments_after_a_good_launch_still_raise(cache, driver):
    k = cache.kernel("saxpy")
    out = dev((8,))
    k.launch(1, 8, out, np.float32(1), out, out)
    with pytest.raises(DispatchError, match="dtype float64, not float32"):
        k.launch(1, 8, dev((8,), "float64"), np.float32(1), out, out)
    freed = dev((8,))
    freed.free()
    with pytest.raises(DispatchError, match="freed"):
        k.launch(1, 8, freed, np.float32(1), out, out)


def test_launch_shape_follows_the_values(cache, fake_backend, driver):
    k = cache.kernel("saxpy")
    out = dev((8,))
    grid = [2, 3]
    for g, b, want in [(4, 32, (4, 1, 1)), ((2, 2), (8, 4), (2, 2, 1)), (grid, 8, (2, 3, 1))]:
        k.launch(g, b, out, np.float32(1), out, out)
        assert fake_backend.launches[-1][1] == want
    grid[1] = 5  # a list is read again on every launch
    k.launch(grid, 8, out, np.float32(1), out, out)
    assert fake_backend.launches[-1][1] == (2, 5, 1)
    k.launch((2, 2), (8, 4), out, np.float32(1), out, out)
    assert fake_backend.launches[-1][1:3] == ((2, 2, 1), (8, 4, 1))


def test_a_repeat_launch_is_the_plans_own_entry_with_every_check_behind_it(
    cache, fake_backend, driver
):
    """After a pattern's first launch, `kernel.launch` is that plan's generated entry (one
    frame to the bare call); a stream, shared memory, a new shape or pattern still launch
    exactly, and what the checked path refuses raises its own error, not one chained to ours."""
    k = cache.kernel("saxpy")
    out, x = dev((8,)), dev((8,))
    k.launch(1, 8, out, np.float32(1), x, x)
    assert k.launch.__code__.co_filename == "<gpu_runtime launch plan repack>"
    assert k.launch.__name__ == "launch" and "asynchronous like CUDA" in k.launch.__doc__
    stream = object()
    k.launch(1, 8, out, np.float32(2), x, x, stream=stream, shared_mem=64)
    assert fake_backend.launches[-1][3:5] == (stream, 64)
    k.launch(2, 16, out, np.float32(3), x, x)  # another shape: through Kernel.launch
    assert fake_backend.launches[-1][1:3] == ((2, 1, 1), (16, 1, 1))
    k.launch(2, 16, out, 3.0, x, x)  # another pattern: the checked path, then its own entry
    assert fake_backend.launches[-1][5] == params(k.pack(out, 3.0, x, x))
    assert fake_backend.bare_launches == 2  # the first launch of each pattern is launch_raw's
    with pytest.raises(DispatchError, match="shared_mem") as refused:
        k.launch(2, 16, out, 3.0, x, x, shared_mem=True)
    with pytest.raises(DispatchError) as wrong:
        k.launch(grid=2, block=16)  # keywords, as Kernel.launch takes them; no arguments
    assert refused.value.__context__ is None and wrong.value.__context__ is None
    assert len(fake_backend.launches) == 4


# ---------------------------------------------------------------------------------------------
# CudaBackend.launch_raw on a recording driver


class RecordingDriver:
    class CUstream:
        def __init__(self, h):
            self.h = h

    def __init__(self, ok):
        self.calls = []
        self.ok = ok

    def cuLaunchKernel(self, *a):
        self.calls.append(a)
        return (self.ok,)


def test_launch_raw_passes_streams_as_cuda_bindings_takes_them_fastest():
    ok = object()
    drv = RecordingDriver(ok)
    be = CudaBackend(0)
    be._drv, be._ok = drv, ok
    be.device = lambda: 0  # type: ignore[method-assign]
    buf = SimpleNamespace(address=1234)
    for stream in (0, 7, 7, 9):
        be.launch_raw("f", 1, 1, 1, 32, 1, 1, 0, stream, buf)
    streams = [c[8] for c in drv.calls]
    assert streams[0] is None
    assert [s.h for s in streams[1:]] == [7, 7, 9] and streams[1] is streams[2]
    assert all(c[9] == 1234 and c[10] == 0 for c in drv.calls)


def test_the_bare_launch_function_takes_streams_the_same_way():
    ok = object()
    drv = RecordingDriver(ok)
    be = CudaBackend(0)
    be._drv, be._ok = drv, ok
    be.device = lambda: 0  # type: ignore[method-assign]
    cu, status, cu_stream = be.launch_function()
    assert cu == drv.cuLaunchKernel and status is ok
    assert cu_stream(None) is None and cu_stream(0) is None
    assert cu_stream(7).h == 7 and cu_stream(7) is cu_stream(7)


def test_configured_kernels_are_reused_only_for_the_same_config(cache, fake_backend, driver):
    k = cache.kernel("saxpy")
    out = dev((8,))
    config = (2, 32)
    assert k[config] is k[config]
    equal = tuple([2, 32])
    assert k[equal] is not k[config]  # an equal tuple, another object: configured anew
    s = object()
    with_stream = (2, 32, s)
    assert k[with_stream] is not k[with_stream]  # never kept: it would hold on to the stream
    k[with_stream](out, np.float32(1), out, out)
    k[config](out, np.float32(1), out, out)
    assert [launch[1:4] for launch in fake_backend.launches] == [
        ((2, 1, 1), (32, 1, 1), s),
        ((2, 1, 1), (32, 1, 1), 0),
    ]
