"""A child forked after CUDA started is told why it cannot use CUDA; one forked before can.

Run through the bundle's launcher, as the app's interpreter (H200 checks, step 1d):

    PEX_INTERPRETER=1 dist/imaging_h200/app tests/gpu/fork_check.py MODE

MODE says what the parent does before it forks and what the child must see:
- `launcher-started`: nothing; the launcher started CUDA (GPU_BUNDLE_INIT_CUDA unset), or, run
  by plain python3 in JIT mode (tests/gpu/jit_mode_check.sh), gpu_runtime did when the app
  reached for `open_cache`: the child's first kernel use raises gpu_runtime's DeviceError naming
  the fork and the fix (and does not hang: the fork waits for a start in flight);
- `parent-used` (with GPU_BUNDLE_INIT_CUDA=0): the parent launches saxpy first: the same error;
- `none` (with GPU_BUNDLE_INIT_CUDA=0): nothing started anywhere: the child's saxpy is right.
Exits 0 when the child saw what its mode expects.
"""

import os
import sys

import numpy as np

import gpu_runtime
from gpu_runtime import DeviceArray


def saxpy(cache) -> bool:
    x = DeviceArray.from_numpy(np.ones(1024, np.float32))
    out = DeviceArray.empty(1024, np.float32)
    cache.kernel("saxpy").launch(4, 256, out, np.float32(2.0), x, x)
    return bool((out.to_numpy() == 3.0).all())


mode = sys.argv[1]
cache = gpu_runtime.open_cache()
if mode == "parent-used":
    print(f"parent: saxpy correct={saxpy(cache)}")
pid = os.fork()
if pid == 0:
    code = 1
    try:
        ok = saxpy(cache)
        print(f"child: saxpy ran, correct={ok}")
        code = 0 if ok and mode == "none" else 1
    except gpu_runtime.DeviceError as e:
        print(f"child: DeviceError: {e}")
        code = 0 if mode != "none" and "forked from process" in str(e) else 1
    finally:
        sys.stdout.flush()
        os._exit(code)
_, status = os.waitpid(pid, 0)
print(f"parent ({mode}): the child exited {os.waitstatus_to_exitcode(status)}")
sys.exit(os.waitstatus_to_exitcode(status))
