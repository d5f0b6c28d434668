"""xoroshiro128+ states as numba-cuda's `create_xoroshiro128p_states` makes them, with numpy only.

numba-cuda seeds state 0 with SplitMix64(seed), jumps it `subsequence_start` times, and makes
state i by jumping state i-1 once (`init_xoroshiro128p_states_cpu`); each jump is 128 steps of
the generator, XOR-accumulated (`xoroshiro128p_jump`). Done that way in Python, 10^6 states cost
minutes. But a step of xoroshiro128+ is linear over GF(2) on the 128-bit state, and so is the
jump: it is a 128x128 bit matrix J, and state i is J^(subsequence_start + i) applied to the
seeded state. So:

- J is read off by jumping the 128 unit vectors at once (numpy, 128 vectorised jumps);
- J^(2^k) by repeated squaring (k < 64 covers any uint64 `subsequence_start`);
- a matrix is applied to many states through 16 byte-indexed tables of 256 entries (one per
  byte of the state: the XOR of the columns that byte's bits select), i.e. 16 gathers + XORs;
- the states are made by doubling: states[m:2m] = J^m states[0:m], so each state is computed
  once and the whole array costs 16 gathers per state.

The result is bit for bit numba's (checked against `init_xoroshiro128p_states_cpu` by
`xoroshiro_test.py`).
"""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

_MASK64 = (1 << 64) - 1
_JUMP = (0xBEAC0467EBA5FACB, 0xD86B048B86AA9922)

# numba-cuda's `numba.cuda.random.xoroshiro128p_dtype` (aligned: its Record type says so too).
xoroshiro128p_dtype = np.dtype([("s0", np.uint64), ("s1", np.uint64)], align=True)


def splitmix64(seed: int) -> int:
    """numba-cuda's `init_xoroshiro128p_state`: both words of state 0 are this value."""
    z = (int(seed) + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _rotl(x: np.ndarray, k: int) -> np.ndarray:
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


def _step(s0: np.ndarray, s1: np.ndarray) -> None:
    """One `xoroshiro128p_next`, in place, on arrays of states."""
    s1 ^= s0
    new0 = _rotl(s0, 55) ^ s1 ^ (s1 << np.uint64(14))
    s1[:] = _rotl(s1, 36)
    s0[:] = new0


def jump_states(states: np.ndarray) -> np.ndarray:
    """`xoroshiro128p_jump` of every row of an (N, 2) uint64 array, as numba writes it."""
    s0 = states[:, 0].copy()
    s1 = states[:, 1].copy()
    a0 = np.zeros_like(s0)
    a1 = np.zeros_like(s1)
    for word in _JUMP:
        for b in range(64):
            if word >> b & 1:
                a0 ^= s0
                a1 ^= s1
            _step(s0, s1)
    return np.stack([a0, a1], axis=1)


def _jump_matrix() -> np.ndarray:
    """J as its 128 columns (128, 2) uint64: column i is the jump of unit vector e_i (bit i of
    the state: bit i of s0 for i < 64, bit i-64 of s1 after)."""
    eye = np.zeros((128, 2), dtype=np.uint64)
    bits = np.uint64(1) << np.arange(64, dtype=np.uint64)
    eye[:64, 0] = bits
    eye[64:, 1] = bits
    return jump_states(eye)


def _tables(cols: np.ndarray) -> np.ndarray:
    """(16, 256, 2) uint64: tables[j, b] = XOR of the columns 8j+t for the bits t set in b."""
    tables = np.zeros((16, 256, 2), dtype=np.uint64)
    byte = np.arange(256)
    grouped = cols.reshape(16, 8, 2)
    for t in range(8):
        sel = ((byte >> t) & 1).astype(bool)
        tables[:, sel, :] ^= grouped[:, t, None, :]
    return tables


def _apply(tables: np.ndarray, vecs: np.ndarray) -> np.ndarray:
    """The matrix of `tables` applied to each row of `vecs` ((N, 2) uint64, C-contiguous)."""
    data = np.ascontiguousarray(vecs, dtype="<u8").view(np.uint8).reshape(-1, 16)
    # np.take, not fancy indexing: several times faster for row gathers like these
    out = np.take(tables[0], data[:, 0], axis=0)
    part = np.empty_like(out)
    for j in range(1, 16):
        np.take(tables[j], data[:, j], axis=0, out=part)
        out ^= part
    return out


class _Powers:
    """The tables of J^(2^k), computed once per process on first use, squaring as needed."""

    def __init__(self) -> None:
        self._cols: List[np.ndarray] = []
        self._tables: List[np.ndarray] = []

    def tables(self, k: int) -> np.ndarray:
        if not self._cols:
            cols = _jump_matrix()
            self._cols.append(cols)
            self._tables.append(_tables(cols))
        while len(self._tables) <= k:
            cols = _apply(self._tables[-1], self._cols[-1])  # M @ M, column by column
            self._cols.append(cols)
            self._tables.append(_tables(cols))
        return self._tables[k]


_POWERS = _Powers()


def xoroshiro128p_states(n: int, seed: int, subsequence_start: int = 0) -> np.ndarray:
    """The host array numba-cuda's `create_xoroshiro128p_states(n, seed, subsequence_start)`
    copies to the device: `n` states of `xoroshiro128p_dtype`, bit for bit."""
    n = int(n)
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    start = int(subsequence_start)
    if not 0 <= start <= _MASK64:
        raise ValueError(f"subsequence_start must fit in uint64, not {subsequence_start}")
    flat = np.empty((n, 2), dtype=np.uint64)
    if n:
        z = splitmix64(int(seed) & _MASK64)
        first = np.array([[z, z]], dtype=np.uint64)
        for k in range(start.bit_length()):
            if start >> k & 1:
                first = _apply(_POWERS.tables(k), first)
        flat[0] = first[0]
        m, k = 1, 0
        while m < n:
            take = min(m, n - m)
            flat[m : m + take] = _apply(_POWERS.tables(k), flat[:take])
            m += take
            k += 1
    return flat.view(xoroshiro128p_dtype).reshape(n)


def create_xoroshiro128p_states(
    n: int, seed: int, subsequence_start: int = 0, stream: Any = None, device: Optional[int] = None
) -> Any:
    """A `DeviceArray` of `n` xoroshiro128+ states, equal to numba-cuda's
    `create_xoroshiro128p_states(n, seed, subsequence_start)`; pass it to a kernel taking
    `xoroshiro128p_type[::1]` (an array of records)."""
    from gpu_runtime.driver.devarray import DeviceArray

    return DeviceArray.from_numpy(
        xoroshiro128p_states(n, seed, subsequence_start), stream=stream, device=device
    )
