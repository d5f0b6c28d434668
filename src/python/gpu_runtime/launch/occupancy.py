"""What the driver's occupancy calculator decides for a launch: cooperative grids and `forall`.

A kernel that synchronises its whole grid (`cuda.cg.this_grid().sync()`) must be launched
cooperatively, and every block of its grid must be resident at once, or the launch fails (or,
launched the ordinary way, hangs). The limit is
`cuOccupancyMaxActiveBlocksPerMultiprocessor(func, block threads, dynamic shared memory)` times
the number of SMs; `check_cooperative_grid` refuses a larger grid before launching, naming the
kernel, the grid and the limit.

`forall(n)` (numba's `kernel.forall(n)(*args)`) launches n threads in blocks of the size
`cuOccupancyMaxPotentialBlockSize` suggests for the kernel (numba-cuda 0.30.4 itself takes the
kernel's maximum threads per block instead): `forall_config` gives (grid, block).

The backend answers the two questions (`max_active_blocks_per_sm`, `multiprocessor_count`,
`max_potential_block_size`); each `Kernel` remembers the answers per (function, block,
shared memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Tuple

from gpu_runtime.errors import LaunchError

if TYPE_CHECKING:  # typing only: the runtime imports no more than it uses
    from gpu_runtime.driver.backend import Backend

Memo = Dict[Tuple[Any, ...], Any]  # per Kernel: its functions live as long as it does
_MAX_REMEMBERED = 256


def _remember(memo: Memo, key: Tuple[Any, ...], value: Any) -> Any:
    if len(memo) >= _MAX_REMEMBERED:
        memo.clear()
    memo[key] = value
    return value


def cooperative_limit(
    backend: Backend, memo: Memo, func: Any, block_threads: int, shared_mem: int
) -> Tuple[int, int]:
    """(blocks per SM, SMs) for `func` launched with `block_threads` threads per block."""
    key = ("coop", id(func), block_threads, shared_mem)
    found = memo.get(key)
    if found is None:
        per_sm = int(backend.max_active_blocks_per_sm(func, block_threads, shared_mem))
        found = _remember(memo, key, (per_sm, int(backend.multiprocessor_count())))
    return found


def check_cooperative_grid(
    backend: Backend, memo: Memo, func: Any, name: str, dims: Tuple[int, ...], shared_mem: int
) -> None:
    """LaunchError if the grid of `dims` (gx, gy, gz, bx, by, bz) cannot be co-resident."""
    gx, gy, gz, bx, by, bz = dims
    blocks, threads = gx * gy * gz, bx * by * bz
    per_sm, sms = cooperative_limit(backend, memo, func, threads, shared_mem)
    limit = per_sm * sms
    if blocks <= limit:
        return
    if per_sm == 0:
        why = (
            f"not even one block of {threads} threads ({shared_mem} bytes of dynamic shared "
            f"memory) fits on an SM: use smaller blocks"
        )
    else:
        why = (
            f"at most {limit} blocks of {threads} threads can be resident at once "
            f"({per_sm} per SM by cuOccupancyMaxActiveBlocksPerMultiprocessor x {sms} SMs, "
            f"{shared_mem} bytes of dynamic shared memory): launch at most {limit} blocks "
            f"(kernel.max_cooperative_grid_blocks(block) tells) and loop over the rest inside "
            f"the kernel"
        )
    raise LaunchError(
        f"kernel {name} synchronises its whole grid (a cooperative launch), but its grid "
        f"{(gx, gy, gz)} has {blocks} blocks; {why}"
    )


def forall_config(
    backend: Backend, memo: Memo, func: Any, ntasks: int, threads_per_block: int, shared_mem: int
) -> Tuple[int, int]:
    """(grid, block) that cover `ntasks` threads; block from the occupancy calculator unless
    `threads_per_block` is given (as numba's ForAll)."""
    block = int(threads_per_block)
    if block <= 0:
        key = ("forall", id(func), shared_mem)
        block = memo.get(key) or 0
        if not block:
            block = int(backend.max_potential_block_size(func, shared_mem, 1024))
            if block <= 0:
                raise LaunchError(f"the occupancy calculator suggests {block} threads per block")
            _remember(memo, key, block)
    return ((ntasks + block - 1) // block, block)
