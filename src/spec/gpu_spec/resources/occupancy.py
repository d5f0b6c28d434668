"""The CUDA occupancy calculator's arithmetic, from a per-capability table of SM limits.

Why here: the compiler records each kernel's registers and static shared memory per
capability; the plugin's budgets, its `gpu-resources` report and the runtime's `describe()` /
`verify` all turn those into an occupancy. Doing that in one place, with no GPU, means a
report and a build never disagree, and the one table below is what a device check compares
against the driver.

The arithmetic is that of CUDA 13.0's `cuda_occupancy.h` (`cudaOccMaxActiveBlocksPerMultiprocessor`,
the header the runtime's `cudaOccupancy*` calls and the driver's `cuOccupancyMaxActiveBlocks-
PerMultiprocessor` share), for a kernel with default attributes: the default shared-memory
carveout (the SM's full shared memory), no partitioned global caching (sm_75+ has none), one
block barrier (a limit only with more named barriers than resident blocks, which nothing here
records) and no virtual resources. Per block:

- warps: ``ceil(block_size / 32)``; blocks by warps = ``max_warps_per_sm // warps``;
  a block over ``max_threads_per_block`` fits 0 times.
- registers: allocated per warp, ``ceil(registers * 32 / 256) * 256``; the SM's registers are
  split over 4 sub-partitions, so blocks by registers = ``(65536 / 4 // per_warp) * 4 // warps``;
  a block whose warps, rounded up to a multiple of 4, need more than 64 K registers (the
  hardware's own check), or a kernel over 255 registers per thread, fits 0 times.
- shared memory: ``ceil((shared_bytes + dynamic_shared_bytes + reserved) / unit) * unit``
  (unit 256 bytes on sm_75, 128 on sm_80+; the driver reserves 1 KiB per block on sm_80+);
  blocks by shared memory = ``shared_per_sm // that``; a block over the per-block limit
  (48 KiB, or the opt-in maximum where static plus dynamic exceed 48 KiB: a launch asking for
  more must opt in with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, assumed done)
  fits 0 times.
- blocks: ``max_blocks_per_sm``.

`shared_bytes` is the kernel's static shared memory as the compiler records it, which is what
the driver's CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES gives (`gpu_spec.resources.cubin`: the cubin's
``.nv.shared.<kernel>`` section, less the 1 KiB reserved window an sm_90 cubin lays out at its
start). The driver's calculator adds the reservation on top of that attribute
(``attributes->sharedSizeBytes + reservedSharedMemPerBlock``), and so does `_shared_per_block`:
a kernel with 28160 bytes of static shared memory fits 8 blocks in an sm_90 SM's 228 KiB,
as the driver says on an sm_90 GPU (tests/gpu/resources_check.py, 2026-12-06).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Tuple

from gpu_spec.capabilities import CAPABILITIES
from gpu_spec.errors import SpecError

KIB = 1024


@dataclass(frozen=True)
class SmLimits:
    """One capability's per-SM and per-block limits (the CUDA C++ Programming Guide's
    "Technical Specifications per Compute Capability" and `cuda_occupancy.h`)."""

    capability: str
    warp_size: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_warps_per_sm: int
    registers_per_sm: int  # 32-bit registers
    max_registers_per_block: int
    max_registers_per_thread: int
    register_alloc_unit: int  # registers, allocated per warp
    shared_per_sm: int  # bytes, the largest carveout (what the default carveout gives)
    max_shared_per_block: int  # bytes, without opting in
    max_shared_per_block_optin: int  # bytes, with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    shared_alloc_unit: int  # bytes
    reserved_shared_per_block: int  # bytes the driver reserves per block (sm_80+)


# Registers are allocated per warp in each of the SM's 4 sub-partitions (sm_75 and up).
_SUB_PARTITIONS = 4


def _limits(
    capability: str,
    threads_per_sm: int,
    blocks_per_sm: int,
    shared_per_sm_kib: int,
    shared_optin_kib: int,
) -> SmLimits:
    turing = capability == "sm_75"
    return SmLimits(
        capability=capability,
        warp_size=32,
        max_threads_per_block=1024,
        max_threads_per_sm=threads_per_sm,
        max_blocks_per_sm=blocks_per_sm,
        max_warps_per_sm=threads_per_sm // 32,
        registers_per_sm=64 * KIB,
        max_registers_per_block=64 * KIB,
        max_registers_per_thread=255,
        register_alloc_unit=256,
        shared_per_sm=shared_per_sm_kib * KIB,
        max_shared_per_block=48 * KIB,
        max_shared_per_block_optin=shared_optin_kib * KIB,
        shared_alloc_unit=256 if turing else 128,
        reserved_shared_per_block=0 if turing else KIB,
    )


# capability: (threads/SM, blocks/SM, shared KiB/SM, opt-in shared KiB/block). Threads/SM and
# shared sizes from the Programming Guide's table (sm_75 1024 threads; sm_80/87 164 KiB;
# sm_86/89/12x 100 KiB and 1536 threads; sm_90/10x 228 KiB, 227 opt-in); blocks/SM and the
# largest carveout of each capability from CUDA 13.0's cuda_occupancy.h
# (cudaOccMaxBlocksPerMultiprocessor: 8.0 32, 8.9 24, other 8.x 16, 9.x 32, 11.0 24, 12.x 24;
# cudaOccAlignUpShmemSizeVoltaPlus: 8.0/8.7 164 KiB, other 8.x 100 KiB, 9.x/10.x/11.x 228 KiB,
# 12.x 100 KiB). sm_88 has no row in the guide: the header treats it as its "other 8.x"
# (sm_86-like), and so does this table. sm_110 (Thor, once sm_101) follows the header's 11.0
# row: 24 blocks, 228 KiB; 1536 threads as the guide gave sm_101.
_TABLE: Dict[str, Tuple[int, int, int, int]] = {
    "sm_75": (1024, 16, 64, 64),
    "sm_80": (2048, 32, 164, 163),
    "sm_86": (1536, 16, 100, 99),
    "sm_87": (1536, 16, 164, 163),
    "sm_88": (1536, 16, 100, 99),
    "sm_89": (1536, 24, 100, 99),
    "sm_90": (2048, 32, 228, 227),
    "sm_100": (2048, 32, 228, 227),
    "sm_103": (2048, 32, 228, 227),
    "sm_110": (1536, 24, 228, 227),
    "sm_120": (1536, 24, 100, 99),
    "sm_121": (1536, 24, 100, 99),
}

SM_LIMITS: Dict[str, SmLimits] = {cap: _limits(cap, *_TABLE[cap]) for cap in CAPABILITIES}


def sm_limits(capability: str) -> SmLimits:
    """The limits of `capability` (`"sm_90"`); a SpecError naming the known ones otherwise."""
    try:
        return SM_LIMITS[capability]
    except (KeyError, TypeError):
        raise SpecError(
            f"no SM limits for GPU capability {capability!r}: expected one of "
            f"{', '.join(SM_LIMITS)}"
        ) from None


@dataclass(frozen=True)
class Occupancy:
    """Theoretical occupancy of one kernel at one block size on one capability."""

    capability: str
    block_size: int
    active_blocks: int  # resident blocks per SM
    active_warps: int  # resident warps per SM
    occupancy: float  # active warps / max warps per SM, 0..1
    limiter: str  # what bounds active_blocks: "warps", "blocks", "registers" or "shared"

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def _check(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"{name} must be a whole number of 0 or more, got {value!r}")
    return value


def _register_bytes_per_warp(lim: SmLimits, registers: int) -> int:
    return _round_up(registers * lim.warp_size, lim.register_alloc_unit)


def _blocks_by_registers(lim: SmLimits, registers: int, warps: int) -> int:
    if registers > lim.max_registers_per_thread:
        return 0
    per_warp = _register_bytes_per_warp(lim, registers)
    if per_warp == 0:
        return lim.max_blocks_per_sm  # no registers: no limit (the header's INT_MAX)
    # The hardware checks a block as if it took registers in all sub-partitions at once.
    if per_warp * _round_up(warps, _SUB_PARTITIONS) > lim.max_registers_per_block:
        return 0
    warps_per_sub_partition = (lim.registers_per_sm // _SUB_PARTITIONS) // per_warp
    return warps_per_sub_partition * _SUB_PARTITIONS // warps


def _shared_per_block(lim: SmLimits, shared_bytes: int, dynamic_shared_bytes: int) -> int:
    # The driver adds the per-block reservation to CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, which
    # is what the compiler records (an sm_90 cubin's reserved window not included).
    return _round_up(
        shared_bytes + dynamic_shared_bytes + lim.reserved_shared_per_block,
        lim.shared_alloc_unit,
    )


def _blocks_by_shared(lim: SmLimits, shared_bytes: int, dynamic_shared_bytes: int) -> int:
    per_block = _shared_per_block(lim, shared_bytes, dynamic_shared_bytes)
    wanted = shared_bytes + dynamic_shared_bytes
    limit = (
        lim.max_shared_per_block
        if wanted <= lim.max_shared_per_block
        else (lim.max_shared_per_block_optin)
    )
    if per_block > limit + lim.reserved_shared_per_block:
        return 0
    if per_block == 0:
        return lim.max_blocks_per_sm  # no shared memory, no reservation (sm_75): no limit
    return lim.shared_per_sm // per_block


def occupancy(
    capability: str,
    *,
    registers: int,
    shared_bytes: int,
    block_size: int,
    dynamic_shared_bytes: int = 0,
) -> Occupancy:
    """Resident blocks and warps per SM of a kernel using `registers` per thread and
    `shared_bytes` of static shared memory (as the compiler records it: see the module's
    docstring) when launched with `block_size` threads and `dynamic_shared_bytes`."""
    lim = sm_limits(capability)
    _check("registers", registers)
    _check("shared_bytes", shared_bytes)
    _check("dynamic_shared_bytes", dynamic_shared_bytes)
    if _check("block_size", block_size) == 0:
        raise SpecError("block_size must be 1 or more threads")
    warps = -(-block_size // lim.warp_size)
    by_warps = 0 if block_size > lim.max_threads_per_block else lim.max_warps_per_sm // warps
    # Ties name the first in this order (the order the header tests its limiting factors).
    limits = (
        ("warps", by_warps),
        ("registers", _blocks_by_registers(lim, registers, warps)),
        ("shared", _blocks_by_shared(lim, shared_bytes, dynamic_shared_bytes)),
        ("blocks", lim.max_blocks_per_sm),
    )
    limiter, blocks = min(limits, key=lambda item: item[1])
    active_warps = blocks * warps
    return Occupancy(
        capability=capability,
        block_size=block_size,
        active_blocks=blocks,
        active_warps=active_warps,
        occupancy=active_warps / lim.max_warps_per_sm,
        limiter=limiter,
    )


def best_block_size(
    capability: str,
    *,
    registers: int,
    shared_bytes: int,
    dynamic_shared_bytes: int = 0,
    launch_bound_threads: int = 0,
) -> Occupancy:
    """The highest occupancy over block sizes 32, 64, ... up to the per-block maximum (and the
    kernel's launch bound, where it has one: a larger block does not launch); on a tie, the
    smallest block size."""
    lim = sm_limits(capability)
    largest = lim.max_threads_per_block
    if launch_bound_threads:
        largest = min(largest, max(lim.warp_size, launch_bound_threads))
    best = None
    for size in range(lim.warp_size, largest + 1, lim.warp_size):
        got = occupancy(
            capability,
            registers=registers,
            shared_bytes=shared_bytes,
            block_size=size,
            dynamic_shared_bytes=dynamic_shared_bytes,
        )
        if best is None or got.occupancy > best.occupancy:
            best = got
    assert best is not None
    return best


def max_threads_per_block(capability: str, *, registers: int, launch_bound_threads: int = 0) -> int:
    """What the driver's CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK gives: the largest block, in
    whole warps, whose registers pass the hardware's per-block check (warps rounded up to the 4
    sub-partitions), at most 1024 and at most the kernel's launch bound (0: none); 0 for a
    kernel over 255 registers."""
    lim = sm_limits(capability)
    _check("registers", registers)
    if registers > lim.max_registers_per_thread:
        return 0
    per_warp = _register_bytes_per_warp(lim, registers)
    max_warps = lim.max_threads_per_block // lim.warp_size
    if per_warp:
        warps = lim.max_registers_per_block // per_warp
        warps -= warps % _SUB_PARTITIONS
        max_warps = min(max_warps, warps)
    threads = max_warps * lim.warp_size
    return min(threads, launch_bound_threads) if launch_bound_threads else threads


def describe_resources(capability: str, resources: Mapping[str, Any]) -> str:
    """One kernel's recorded resources on `capability` and its occupancy at the best block
    size, in one line (the runtime's `describe()` and `verify` print it); "" where the manifest
    recorded none (older compilers). Keys a manifest lacks (`const_bytes` before it was
    recorded) count as 0."""
    if not resources:
        return ""

    def get(key: str) -> int:
        return int(resources.get(key, 0) or 0)

    text = (
        f"registers {get('registers')}, spills {get('spill_stores')}/{get('spill_loads')} B "
        f"(stores/loads), shared {get('shared_bytes')} B, local {get('local_bytes')} B, "
        f"const {get('const_bytes')} B"
    )
    if capability not in SM_LIMITS:
        return text
    best = best_block_size(
        capability,
        registers=get("registers"),
        shared_bytes=get("shared_bytes"),
        launch_bound_threads=get("launch_bound_threads"),
    )
    return (
        f"{text}; occupancy {best.occupancy:.0%} at {best.block_size} threads per block "
        f"({best.active_blocks} blocks, limited by {best.limiter})"
    )
