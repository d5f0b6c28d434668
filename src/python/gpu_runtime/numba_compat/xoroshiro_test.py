"""xoroshiro128+ states without numba: values numba-cuda gave, and the jump's algebra.

The comparison with numba-cuda itself, for many (n, seed, subsequence_start), is
`xoroshiro_numba_test.py` (cuda13 resolve, where numba is installed).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_runtime.numba_compat import xoroshiro
from gpu_runtime.numba_compat.xoroshiro import (
    jump_states,
    splitmix64,
    xoroshiro128p_dtype,
    xoroshiro128p_states,
)

# numba-cuda 0.30.4: init_xoroshiro128p_states_cpu(states(3), seed=42, subsequence_start=2)
NUMBA_42_2 = [
    (0xA67324E5ECCCB8DC, 0x4A81BBD6C315729E),
    (0xEF6261E44FD8ABC9, 0x0C6EBFA4759A0F22),
    (0x965712E7AC28B9B1, 0xC5FDD9C6A44F58A6),
]


def words(states):
    return [(int(s["s0"]), int(s["s1"])) for s in states]


def test_values_numba_gave():
    assert words(xoroshiro128p_states(3, 42, 2)) == NUMBA_42_2


def test_dtype_is_numbas_record():
    s = xoroshiro128p_states(4, 1)
    assert s.dtype == xoroshiro128p_dtype and s.dtype.isalignedstruct and s.shape == (4,)
    assert s.dtype.descr == [("s0", "<u8"), ("s1", "<u8")]


def test_state_zero_is_splitmix_of_the_seed():
    z = splitmix64(7)
    assert words(xoroshiro128p_states(1, 7)) == [(z, z)]
    assert words(xoroshiro128p_states(1, -1)) == words(xoroshiro128p_states(1, 2**64 - 1))


def test_matrix_path_equals_jumping_one_by_one():
    n, seed = 37, 123
    s = np.array([[splitmix64(seed)] * 2], dtype=np.uint64)
    expected = []
    for _ in range(n):
        expected.append(tuple(int(v) for v in s[0]))
        s = jump_states(s)
    assert words(xoroshiro128p_states(n, seed)) == expected


def test_subsequence_start_shifts_the_sequence():
    full = xoroshiro128p_states(70, 9)
    assert words(xoroshiro128p_states(10, 9, 60)) == words(full[60:])
    big = 2**40 + 3  # 2**40 jumps: only the matrix powers make this possible
    assert (
        words(xoroshiro128p_states(2, 9, big))[1] == words(xoroshiro128p_states(1, 9, big + 1))[0]
    )


def test_edges():
    assert xoroshiro128p_states(0, 1).shape == (0,)
    with pytest.raises(ValueError):
        xoroshiro128p_states(-1, 1)
    with pytest.raises(ValueError):
        xoroshiro128p_states(1, 1, 2**64)
    assert len(xoroshiro._POWERS._tables) <= 64  # powers are computed as needed, then kept
