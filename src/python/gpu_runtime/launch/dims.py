"""Grid and block shapes as the driver takes them: (gx, gy, gz, bx, by, bz), checked."""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from gpu_runtime.errors import DispatchError


def _dim3(value: Any, what: str) -> Tuple[int, int, int]:
    dims = value if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(dims) <= 3:
        raise DispatchError(f"{what} must be an int or 1 to 3 ints, not {value!r}")
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 1 <= d < 1 << 32:
            raise DispatchError(f"{what} must hold positive integers below 2**32, not {value!r}")
        out.append(int(d))
    while len(out) < 3:
        out.append(1)
    return (out[0], out[1], out[2])


def launch_dims(grid: Any, block: Any) -> Tuple[int, int, int, int, int, int]:
    """(gx, gy, gz, bx, by, bz) of `grid` and `block` (an int or a tuple/list of 1 to 3)."""
    return _dim3(grid, "grid") + _dim3(block, "block")
