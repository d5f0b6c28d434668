"""gpu_runtime's xoroshiro128+ states equal numba-cuda's, bit for bit.

`create_xoroshiro128p_states(n, seed, subsequence_start)` in numba-cuda 0.30.4 is a device
array filled from `init_xoroshiro128p_states_cpu(states, seed, subsequence_start)` (numba's CPU
JIT), which is what is compared here; the copy to the device changes no bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numba.cuda.random import init_xoroshiro128p_states_cpu as _init_cpu
from numba.cuda.random import xoroshiro128p_dtype

from gpu_runtime.numba_compat.xoroshiro import xoroshiro128p_dtype as runtime_dtype
from gpu_runtime.numba_compat.xoroshiro import xoroshiro128p_states

init_xoroshiro128p_states_cpu: Any = _init_cpu  # a numba CPU dispatcher: untyped for mypy


def numba_states(n: int, seed: int, subsequence_start: int) -> Any:
    states = np.empty(n, dtype=xoroshiro128p_dtype)
    # numba types a Python int above 2**63 as nothing it can take: give it a uint64
    init_xoroshiro128p_states_cpu(states, np.uint64(seed % 2**64), np.uint64(subsequence_start))
    return states


@pytest.mark.parametrize(
    "n,seed,subsequence_start",
    [
        (1, 0, 0),
        (2, 1, 0),
        (7, 42, 0),
        (1000, 42, 3),
        (257, 2**64 - 1, 0),
        (33, 12345, 300),
        (64, -5, 1),
        (4096, 20260101, 17),
        (0, 3, 0),
    ],
)
def test_states_equal_numbas(n, seed, subsequence_start):
    ours: Any = xoroshiro128p_states(n, seed, subsequence_start)
    theirs = numba_states(n, seed, subsequence_start)
    assert ours.dtype == theirs.dtype == runtime_dtype
    assert ours.tobytes() == theirs.tobytes()
