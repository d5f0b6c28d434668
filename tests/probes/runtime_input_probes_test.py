"""Runtime input probes: the values, files and arguments a running app hands the runtime.

A launch argument the kernel's ABI cannot take is refused in one line (a DispatchError) and a
value it can take launches (a NaN scalar); a bundle file, signature or JIT index that is not a
regular file of sane size and nesting is refused in one line naming it, never read forever or
parsed into a RecursionError. Bundles are written with gpu_spec's fixtures and a fake GPU
(`FakeBackend`), which records each launch's parameter bytes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import tempfile
from typing import Callable, Iterator, List, Tuple

import numpy as np
import pytest

import gpu_runtime
from gpu_runtime.conftest import FakeBackend, FakeDeviceArray, library_specs, write_bundle
from gpu_runtime.errors import GpuRuntimeError
from gpu_spec.signature import PINNED_KEYS_ENV, TRUSTED_KEYS_ENV
from probe_table import findings, held, run_probes

PTR = 0x7F00_0000_0000


@contextlib.contextmanager
def bundle(libraries=("saxpy",)) -> Iterator[Tuple[str, FakeBackend]]:
    """A fresh unsigned bundle (no key trusted) of `libraries` for sm_90, and a fake GPU."""
    tmp = tempfile.mkdtemp(prefix="input_probe_")
    try:
        with pytest.MonkeyPatch.context() as mp:
            for var in (PINNED_KEYS_ENV, TRUSTED_KEYS_ENV, "GPU_RUNTIME_STRICT"):
                mp.delenv(var, raising=False)
            mp.setenv("GPU_RUNTIME_JIT_CACHE", os.path.join(tmp, "jit"))
            yield write_bundle(
                os.path.join(tmp, "b"), library_specs(list(libraries), ("sm_90",))
            ), (FakeBackend())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def vec(n: int, dtype: str = "float32", ptr: int = PTR) -> FakeDeviceArray:
    return FakeDeviceArray((n,), dtype, ptr, None)


# -- launch values -----------------------------------------------------------------------------
def nan_scalar(value: object) -> Callable[[], str]:
    """saxpy(out, a: float32, x, y) launched first with a NaN `a`, then again (the plan's path)."""

    def probe() -> str:
        with bundle() as (cache_dir, backend):
            k = gpu_runtime.open_cache(cache_dir, backend=backend).kernel("saxpy")
            out, x = vec(8), vec(8, ptr=PTR + 64)
            try:
                for _ in range(2):
                    k.launch(1, 32, out, value, x, x)
            except GpuRuntimeError as e:
                return f"FINDING: a NaN scalar was refused: {e}"
            params = backend.launches[-1][5]
            floats = [p for p in params if len(p) == 4]
            if (
                len(backend.launches) != 2
                or not floats
                or not np.isnan(struct.unpack("<f", floats[0])[0])
            ):
                return f"FINDING: launched {len(backend.launches)} times, a = {floats[:1]}"
            return held("a NaN scalar launches, first and later launches, as NaN bits")

    return probe


PROBES: List[Tuple[str, Callable[[], str]]] = [
    ("numba float32 scalar NaN (Python float)", nan_scalar(float("nan"))),
    ("numba float32 scalar NaN (np.float32)", nan_scalar(np.float32("nan"))),
]


def test_runtime_input_probes() -> None:
    rows = run_probes("runtime-inputs", PROBES)
    assert findings(rows) == []
