"""The launch fast path: pattern keys, plan packing byte for byte, per-thread buffers, graphs."""

from __future__ import annotations

import itertools
import struct
import threading
from typing import Any, List, Tuple

import numpy as np
import pytest

import gpu_runtime
from gpu_runtime.conftest import FakeBackend, FakeDeviceArray
from gpu_runtime.errors import DeviceError, DispatchError
from gpu_runtime.launch.abi import pack_args
from gpu_runtime.launch.arrays import c_strides, contiguity
from gpu_runtime.launch.plan import build_plan, pattern_key
from gpu_runtime_testutil.launch_cases import (
    C_CASES,
    NUMBA_CASES,
    PTR,
    A,
    S,
    arr,
    c_kernel,
    numba_kernel,
)
from gpu_spec.manifest.model import KernelSpec


def fast_image(kernel, args):
    """Pack `args` the way a later launch of the same pattern does."""
    packed = pack_args(kernel, args)
    plan = build_plan("f", kernel, args, packed)
    assert plan.fast
    key, cais = pattern_key(args)
    assert key is not None
    return plan.pack(args, cais).image(), packed.image


# ---------------------------------------------------------------------------------------------
# byte for byte against the checked path


@pytest.mark.parametrize("specs,args", NUMBA_CASES)
def test_numba_plan_image_equals_checked_image(specs, args):
    got, want = fast_image(numba_kernel(specs), args)
    assert got == want


@pytest.mark.parametrize("params,args", C_CASES)
def test_c_plan_image_equals_checked_image(params, args):
    got, want = fast_image(c_kernel(params), args)
    assert got == want


def test_c_plan_packs_declared_signed_ints_signed():
    """`int` is `.u32` in PTX: a plan packs it signed, so a negative value takes the fast path
    and one above 2**31 - 1 is refused there as the checked path refuses it."""
    k = KernelSpec(
        name="c", entry="c", abi="c", params=("u32", "u32"), c_types=("int", "unsigned int")
    )
    got, want = fast_image(k, [-5, 5])
    assert got == want == struct.pack("<iI", -5, 5)
    plan = build_plan("f", k, [-5, 5], pack_args(k, [-5, 5]))
    for args in ([-(2**31) - 1, 5], [np.int64(2**31), 5]):
        with pytest.raises(struct.error):
            plan.pack(args, pattern_key(args)[1])
        with pytest.raises(DispatchError, match="does not fit in int"):
            pack_args(k, args)


def test_c_pointer_from_a_handle_attribute():
    class Buf:  # like a cuda.core Buffer
        handle = PTR + 8

    got, want = fast_image(c_kernel(["u64", "u32"]), [Buf(), 3])
    assert got == want == struct.pack("<QI", PTR + 8, 3)


def test_same_pattern_new_pointers_shapes_and_scalars_repack():
    k = numba_kernel([A("float32", 2, "A"), S("int32")])
    first = [arr((3, 5), strides=(40, 8)), 64]
    plan = build_plan("f", k, first, pack_args(k, first))
    later = [arr((6, 2), ptr=PTR + 4096, strides=(16, 8)), 99]
    assert pattern_key(first)[0] == pattern_key(later)[0]
    got = plan.pack(later, pattern_key(later)[1]).image()
    assert got == pack_args(k, later).image


def test_values_only_the_checked_path_takes_make_pack_raise():
    k = c_kernel(["u32", "f32"])
    first = [1, 1.0]
    plan = build_plan("f", k, first, pack_args(k, first))
    for args in ([-1, 1.0], [1, 1e300]):  # the C ABI wraps -1; float32 overflow gives inf
        with pytest.raises((struct.error, OverflowError)):
            plan.pack(args, pattern_key(args)[1])


def test_float16_complex_and_structs_are_not_fast():
    cases: List[Tuple[KernelSpec, List[Any]]] = [
        (numba_kernel([S("float16")]), [1.5]),
        (numba_kernel([S("complex64")]), [1 + 2j]),
        (c_kernel(["align 8 b8[16]"]), [b"\0" * 16]),
    ]
    for kernel, args in cases:
        assert not build_plan("f", kernel, args, pack_args(kernel, args)).fast


# ---------------------------------------------------------------------------------------------
# pattern keys


def test_pattern_keys_split_what_dispatch_and_packing_tell_apart():
    keys = [
        pattern_key([arr((4,))])[0],
        pattern_key([arr((4,), "float64")])[0],
        pattern_key([arr((4, 1))])[0],
        pattern_key([arr((4, 3))])[0],  # C only; (4, 1) is C and F
        pattern_key([arr((4,), strides=(8,))])[0],
        pattern_key([arr((3, 4), strides=(4, 12))])[0],  # F
        pattern_key([np.float32(1)])[0],
        pattern_key([1.0])[0],
        pattern_key([1])[0],
        pattern_key([2**31])[0],
        pattern_key([-1])[0],
        pattern_key([True])[0],
    ]
    assert len(set(keys)) == len(keys)
    assert pattern_key([arr((4,), ptr=1)])[0] == pattern_key([arr((9,), ptr=2)])[0]
    assert pattern_key([5])[0] == pattern_key([6])[0]


def test_int_keys_tell_apart_every_integer_range():
    bounds = [v for b in (8, 16, 32, 64) for v in (-(2 ** (b - 1)), 2 ** (b - 1) - 1, 2**b - 1)]
    values = sorted({v + d for v in bounds for d in (-1, 0, 1)})
    ranges = [(-(2 ** (b - 1)), 2 ** (b - 1) - 1) for b in (8, 16, 32, 64)]
    ranges += [(0, 2**b - 1) for b in (8, 16, 32, 64)]
    for a, b in itertools.combinations(values, 2):
        if pattern_key([a])[0] == pattern_key([b])[0]:
            assert [lo <= a <= hi for lo, hi in ranges] == [lo <= b <= hi for lo, hi in ranges]


def test_strides_none_flags_match_the_general_rule():
    for shape in [(), (0,), (5,), (1, 5), (5, 1), (3, 4), (1, 1, 7), (2, 1, 3), (0, 3)]:
        keys, _ = pattern_key([arr(shape)])
        assert keys is not None
        key = keys[0]
        strides = None
        assert key[3] == contiguity(shape, strides or c_strides(shape, 4), 4), shape


def test_uncacheable_arguments_have_no_key():
    class Weird(int):
        pass

    for a in [np.zeros(()), np.datetime64("2020-01-01"), Weird(3), b"ab"]:
        assert pattern_key([a])[0] is None


class RecordArray(FakeDeviceArray):
    """A device array of records that exports "descr" (as DeviceArray and CuPy do)."""

    @property
    def __cuda_array_interface__(self):
        return dict(super().__cuda_array_interface__, descr=self.dtype.descr)


def test_record_arrays_are_told_apart_by_descr():
    ab = np.dtype([("a", "<f4"), ("b", "<f4")])
    ba = np.dtype([("b", "<f4"), ("a", "<f4")])
    key = pattern_key([RecordArray((4,), ab)])[0]
    assert key is not None and key == pattern_key([RecordArray((9,), ab)])[0]
    assert key != pattern_key([RecordArray((4,), ba)])[0]  # same typestr |V8
    assert key != pattern_key([FakeDeviceArray((4,), ab)])[0]  # no descr (numba's arrays)


# ---------------------------------------------------------------------------------------------
# through Kernel.launch with a fake GPU


@pytest.fixture
def cache(bundle, fake_backend):
    return gpu_runtime.open_cache(bundle, backend=fake_backend)


def vec(n, dtype="float32", ptr=PTR, strides=None):
    return FakeDeviceArray((n,), dtype, ptr, strides)


def params(packed):
    """Each parameter's bytes of the checked path's image."""
    return [packed.image[o : o + n] for o, n in zip(packed.offsets, packed.sizes)]


def test_repeated_launches_use_one_plan_and_see_new_pointers(cache, fake_backend):
    k = cache.kernel("saxpy")
    for i in range(3):
        out, x = vec(8 + i, ptr=PTR + 4096 * i), vec(8 + i, ptr=PTR + 64)
        k.launch(1, 32, out, np.float32(i), x, x)
        assert fake_backend.launches[-1][5] == params(k.pack(out, np.float32(i), x, x))
    assert len(k._plans) == 1


def test_dispatch_on_contiguity_after_caching(cache, fake_backend):
    h = cache.kernel("histogram_256")
    bins = vec(256, "uint32", PTR + 0x10000)
    for strides in [None, (3,), None, (3,)]:
        h.launch(2, 256, vec(100, "uint8", strides=strides), bins)
        want = "_Zhist0" if strides is None else "_Zhist1"
        assert fake_backend.launches[-1][0][2] == want
    assert len(h._plans) == 2


def test_wrong_arguments_raise_on_first_and_later_launches(cache):
    k = cache.kernel("saxpy")
    out = vec(8)
    for _ in range(2):
        with pytest.raises(DispatchError, match="takes 4 arguments, got 3"):
            k.launch(1, 8, out, 1.0, out)
        with pytest.raises(DispatchError, match="dtype float64, not float32"):
            k.launch(1, 8, vec(8, "float64"), 1.0, out, out)
        with pytest.raises(DispatchError, match="expected a real number"):
            k.launch(1, 8, out, "2", out, out)
        with pytest.raises(DispatchError, match="host \\(numpy\\) array"):
            k.launch(1, 8, out, 1.0, np.zeros(8, np.float32), out)
        k.launch(1, 8, out, 1.0, out, out)  # a good launch in between caches its pattern
    m = cache.kernel("sobel_magnitude")
    m.launch(1, 8, out, out, 1, 2, 3)
    with pytest.raises(DispatchError, match="does not fit in 32 bits"):
        m.launch(1, 8, out, out, 2**33, 2, 3)


def test_c_abi_values_the_fast_path_refuses_still_launch_exactly(cache, fake_backend):
    m = cache.kernel("sobel_magnitude")
    out = vec(8)
    m.launch(1, 8, out, out, 1, 2, 3)
    m.launch(1, 8, out, out, -1, 2, 3)  # same pattern (small int); the C ABI wraps -1
    assert fake_backend.launches[-1][5] == params(m.pack(out, out, -1, 2, 3))


def test_launch_config_checks(cache):
    k = cache.kernel("saxpy")
    out = vec(8)
    for grid, block in [(0, 8), (1, (8, 8, 8, 8)), (1.5, 8), (1, [8, -1])]:
        with pytest.raises(DispatchError, match="grid|block"):
            k.launch(grid, block, out, 1.0, out, out)
    with pytest.raises(DispatchError, match="shared_mem"):
        k.launch(1, 8, out, 1.0, out, out, shared_mem=-1)
    k.launch([2, 2], [8, 4], out, 1.0, out, out)  # lists are fine, just not cached


def test_threads_never_share_a_buffer(bundle):
    """Each thread's launch must carry its own pointers, read at launch time."""
    seen = []
    barrier = threading.Barrier(8, timeout=10)

    class Racing(FakeBackend):
        def launch(self, func, grid, block, stream, shared_mem, params):
            if stream is None or stream == 0:
                return
            barrier.wait()  # every thread has packed before any reads its parameters
            with self.lock:
                seen.append((stream, params.param_bytes()[4]))

    c = gpu_runtime.open_cache(bundle, backend=Racing())
    k = c.kernel("saxpy")
    k.launch(1, 8, vec(8), 1.0, vec(8), vec(8))  # the plan exists before the race

    def go(i):
        a = vec(8, ptr=PTR + 256 * i)
        k.launch(1, 8, a, 1.0, a, a, stream=i + 1)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == [(i + 1, struct.pack("<Q", PTR + 256 * i)) for i in range(8)]


# ---------------------------------------------------------------------------------------------
# graph capture


def test_capture_records_and_replays(cache, fake_backend):
    stream = object()
    out = vec(8)
    with cache.capture(stream) as graph:
        assert not graph.ready
        cache.kernel("saxpy").launch(1, 8, out, 1.0, out, out, stream=stream)
        with pytest.raises(DeviceError, match="not ready"):
            graph.launch()
    graph.launch()
    graph.replay(stream="other")
    graph.close()
    assert fake_backend.launches[-1][3] is stream
    assert fake_backend.captures == [
        ("begin", stream),
        ("end", stream),
        ("instantiate", ("graph", 2)),
        ("launch", ("exec", ("graph", 2)), stream),
        ("launch", ("exec", ("graph", 2)), "other"),
        ("destroy", ("graph", 2), ("exec", ("graph", 2))),
    ]


def test_capture_ends_and_discards_on_error(cache, fake_backend):
    with pytest.raises(ValueError):
        with cache.capture("s"):
            raise ValueError("boom")
    assert fake_backend.captures == [("begin", "s"), ("end", "s"), ("destroy", ("graph", 2), None)]
    with pytest.raises(DeviceError, match="legacy default stream"):
        with cache.capture(None):
            pass


@pytest.mark.parametrize("value", [float("nan"), np.float32("nan"), np.float64("-nan"), -0.0])
def test_nan_and_negative_zero_scalars_build_a_plan_and_launch(cache, fake_backend, value):
    """The plan is checked against the ABI's packing as bytes: NaN != NaN as a value."""
    k = cache.kernel("saxpy")
    out, x = vec(8), vec(8, ptr=PTR + 64)
    for _ in range(2):  # the first launch builds the plan, the second takes it
        k.launch(1, 32, out, value, x, x)
        assert fake_backend.launches[-1][5] == params(k.pack(out, value, x, x))
    assert len(k._plans) == 1
    got = struct.unpack("<f", fake_backend.launches[-1][5][7])[0]  # after 7 array params
    assert np.isnan(got) if np.isnan(value) else str(got) == "-0.0"


def test_plan_packing_check_compares_bytes():
    kernel = numba_kernel([S("float32")])
    packed = pack_args(kernel, [float("nan")])
    assert build_plan("f", kernel, [float("nan")], packed).fast
