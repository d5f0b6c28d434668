"""One run of the example pipeline in whatever mode open_cache() finds (bundle or JIT), for
tests/gpu/jit_mode_check.sh: prints the stage results, the origin of each kernel, and
`first-launch-ms N`, the time from $START_NS (the shell's clock before the process started) to
the first saxpy launch completed."""

from __future__ import annotations

import os
import time

T_START = int(os.environ["START_NS"]) / 1e9

import numpy as np  # noqa: E402

import gpu_runtime  # noqa: E402
from gpu_runtime import DeviceArray  # noqa: E402

cache = gpu_runtime.open_cache()
x = DeviceArray.from_numpy(np.ones(1024, np.float32))
out = DeviceArray.empty(1024, np.float32)
cache.kernel("saxpy")[4, 256](out, np.float32(2.0), x, x)
assert (out.to_numpy() == 3.0).all()  # to_numpy synchronises
first_ms = (time.time() - T_START) * 1e3

from imaging.app import run_pipeline  # noqa: E402

for name, ok, detail in run_pipeline(cache, 480, 640):
    print(f"result {'ok' if ok else 'FAIL'} {name}: {detail}")
print(cache.describe())
print(f"first-launch-ms {first_ms:.0f}")
