"""The occupancy calculator against figures worked out by hand from cuda_occupancy.h's rules."""

from __future__ import annotations

import pytest

from gpu_spec.capabilities import CAPABILITIES
from gpu_spec.errors import SpecError
from gpu_spec.resources.occupancy import (
    best_block_size,
    describe_resources,
    max_threads_per_block,
    occupancy,
    sm_limits,
)


def test_every_capability_has_limits() -> None:
    for cap in CAPABILITIES:
        lim = sm_limits(cap)
        assert lim.capability == cap and lim.registers_per_sm == 65536
        assert lim.max_warps_per_sm * lim.warp_size == lim.max_threads_per_sm
        assert lim.max_shared_per_block <= lim.max_shared_per_block_optin < lim.shared_per_sm + 1
    assert sm_limits("sm_75").reserved_shared_per_block == 0
    assert sm_limits("sm_90").reserved_shared_per_block == 1024
    assert sm_limits("sm_90").shared_per_sm == 228 * 1024
    assert sm_limits("sm_86").max_threads_per_sm == 1536


def test_an_unknown_capability_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(SpecError, match="sm_91.*sm_75, sm_80"):
        sm_limits("sm_91")
    with pytest.raises(SpecError, match="sm_90a"):
        occupancy("sm_90a", registers=32, shared_bytes=0, block_size=256)


def test_a_light_kernel_fills_the_sm() -> None:
    # sm_90, 32 registers, no shared memory, 256 threads: 8 warps a block; warps allow 64/8 = 8
    # blocks, registers 1024 a warp -> 16 warps per sub-partition -> 64 warps -> 8 blocks.
    occ = occupancy("sm_90", registers=32, shared_bytes=0, block_size=256)
    assert (occ.active_blocks, occ.active_warps, occ.occupancy) == (8, 64, 1.0)
    assert occ.limiter == "warps"
    assert occ.to_dict() == {
        "capability": "sm_90",
        "block_size": 256,
        "active_blocks": 8,
        "active_warps": 64,
        "occupancy": 1.0,
        "limiter": "warps",
    }


def test_registers_limit() -> None:
    # 128 registers: 4096 a warp -> 4 warps per sub-partition -> 16 warps -> 2 blocks of 8.
    occ = occupancy("sm_90", registers=128, shared_bytes=0, block_size=256)
    assert (occ.active_blocks, occ.occupancy, occ.limiter) == (2, 0.25, "registers")


def test_registers_are_allocated_per_warp_in_units_of_256() -> None:
    # 33 registers: 1056 -> 1280 a warp -> 12 warps per sub-partition -> 48 warps -> 6 blocks.
    occ = occupancy("sm_90", registers=33, shared_bytes=0, block_size=256)
    assert (occ.active_blocks, occ.occupancy, occ.limiter) == (6, 0.75, "registers")
    # 25..32 registers all take 1024 a warp.
    assert occupancy("sm_90", registers=25, shared_bytes=0, block_size=256).active_blocks == 8


def test_shared_memory_limits_with_the_per_block_reservation() -> None:
    # sm_90: 28160 + 1024 reserved = 29184 a block -> 233472 // 29184 = 8 blocks of 4 warps.
    occ = occupancy("sm_90", registers=16, shared_bytes=28160, block_size=128)
    assert (occ.active_blocks, occ.active_warps, occ.occupancy) == (8, 32, 0.5)
    assert occ.limiter == "shared"
    # One byte more: 29185 -> 29312 (units of 128) -> 7 blocks.
    assert occupancy("sm_90", registers=16, shared_bytes=28161, block_size=128).active_blocks == 7
    # sm_75 reserves nothing, allocates in 256s and has 64 KiB: 65536 // 28160 = 2 blocks.
    occ = occupancy("sm_75", registers=16, shared_bytes=28160, block_size=128)
    assert (occ.active_blocks, occ.occupancy, occ.limiter) == (2, 0.25, "shared")


def test_dynamic_shared_memory_counts_and_the_opt_in_maximum_bounds_it() -> None:
    # 100 KiB dynamic + 1 KiB reserved = 103424 -> 2 blocks on sm_90.
    two = occupancy(
        "sm_90", registers=32, shared_bytes=0, block_size=128, dynamic_shared_bytes=102400
    )
    assert (two.active_blocks, two.limiter) == (2, "shared")
    most = 227 * 1024  # the opt-in maximum per block: exactly one block
    one = occupancy(
        "sm_90", registers=32, shared_bytes=0, block_size=128, dynamic_shared_bytes=most
    )
    assert one.active_blocks == 1
    over = occupancy(
        "sm_90", registers=32, shared_bytes=0, block_size=128, dynamic_shared_bytes=most + 1
    )
    assert (over.active_blocks, over.occupancy, over.limiter) == (0, 0.0, "shared")


def test_a_block_over_the_limits_fits_zero_times() -> None:
    occ = occupancy("sm_90", registers=16, shared_bytes=0, block_size=1025)
    assert (occ.active_blocks, occ.occupancy, occ.limiter) == (0, 0.0, "warps")
    # 255 registers: 8192 a warp, 32 warps need 256 K registers > 64 K a block.
    occ = occupancy("sm_90", registers=255, shared_bytes=0, block_size=1024)
    assert (occ.active_blocks, occ.limiter) == (0, "registers")
    assert occupancy("sm_90", registers=256, shared_bytes=0, block_size=32).active_blocks == 0


def test_small_blocks_hit_the_block_limit() -> None:
    # sm_86: 16 blocks of one warp = 16 of 48 warps.
    occ = occupancy("sm_86", registers=16, shared_bytes=0, block_size=32)
    assert (occ.active_blocks, occ.limiter) == (16, "blocks")
    assert occ.occupancy == pytest.approx(16 / 48)


def test_best_block_size_takes_the_smallest_of_the_best() -> None:
    best = best_block_size("sm_90", registers=32, shared_bytes=0)
    assert (best.block_size, best.active_blocks, best.occupancy) == (64, 32, 1.0)
    # sm_86: 16 blocks and 48 warps: 3-warp blocks are the smallest that fill it.
    assert best_block_size("sm_86", registers=32, shared_bytes=0).block_size == 96
    # 128 registers: 16 warps at most, whatever the block: 32 threads is enough.
    best = best_block_size("sm_90", registers=128, shared_bytes=0)
    assert (best.block_size, best.occupancy) == (32, 0.25)


@pytest.mark.parametrize(
    "registers, threads", [(16, 1024), (32, 1024), (64, 1024), (80, 768), (128, 512), (255, 256)]
)
def test_max_threads_per_block_from_registers(registers: int, threads: int) -> None:
    # 80 registers: 2560 a warp -> 25 warps fit 64 K, rounded down to 4 sub-partitions: 24.
    assert max_threads_per_block("sm_90", registers=registers) == threads
    assert max_threads_per_block("sm_75", registers=registers) == threads


def test_a_launch_bound_caps_the_largest_block() -> None:
    # half_stats.cu's half_gain_stats (__launch_bounds__(256), 19 registers): the driver's
    # MAX_THREADS_PER_BLOCK on an sm_90 GPU is 256, not 1024.
    assert max_threads_per_block("sm_90", registers=19, launch_bound_threads=256) == 256
    # The registers' limit still holds under a looser bound.
    assert max_threads_per_block("sm_90", registers=255, launch_bound_threads=512) == 256
    # No block size over the bound is a candidate.
    assert (
        best_block_size("sm_90", registers=19, shared_bytes=0, launch_bound_threads=32).block_size
        == 32
    )


def test_bad_figures_are_refused() -> None:
    with pytest.raises(SpecError, match="registers"):
        occupancy("sm_90", registers=-1, shared_bytes=0, block_size=32)
    with pytest.raises(SpecError, match="block_size"):
        occupancy("sm_90", registers=1, shared_bytes=0, block_size=0)


def test_describe_resources_in_one_line() -> None:
    line = describe_resources(
        "sm_90",
        {"registers": 32, "shared_bytes": 0, "local_bytes": 8, "spill_stores": 4, "spill_loads": 4},
    )
    assert line == (
        "registers 32, spills 4/4 B (stores/loads), shared 0 B, local 8 B, const 0 B; "
        "occupancy 100% at 64 threads per block (32 blocks, limited by warps)"
    )
    assert describe_resources("sm_90", {}) == ""


def test_no_shared_memory_on_sm_75_is_no_limit() -> None:
    # sm_75 reserves no shared memory per block: 0 bytes used must not divide by zero.
    got = occupancy("sm_75", registers=16, shared_bytes=0, block_size=256)
    assert got.active_blocks == 4 and got.limiter == "warps"
