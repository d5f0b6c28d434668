#!/usr/bin/env bash
# numba-cuda's documentation kernels on the H200, from the numba_docs_h200 bundle built on the
# build machine (`./pants package src/python/numba_docs:numba_docs_h200`), with the device's
# own python3:
#
#   tests/gpu/numba_docs_check.sh dist/numba_docs_h200 [numpy-2.4.6-cp312-....whl]
#
# 1. every documentation kernel from the bundle as built (cubins), checked against numpy:
#    the table kernel | built | ran | max error | ok | variant | note;
# 2. the same with every cubin deleted: PTX only (driver JIT; the cooperative kernels' PTX
#    linked with libcudadevrt by the driver's linker, ffi's with the PTX of functions.cu);
# 3. with the numpy wheel given (numba-cuda 0.30.4 on the device needs numpy < 2.5): numba's
#    own create_xoroshiro128p_states on this GPU against gpu_runtime's, bit for bit.
# Exits non-zero if a step fails.
set -u
bundle=$1 numpy_whl=${2:-}
work=$(mktemp -d)
export CUDA_CACHE_DISABLE=1 PYTHONUNBUFFERED=1
failed=0
step() { printf '\n=== %s\n' "$*"; }
must() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }

nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
step "1. documentation kernels from the bundle (cubin)"
must python3 "$bundle/check.pex"

step "2. cubins deleted: PTX only"
cp -r "$bundle" "$work/ptx_only" && find "$work/ptx_only/cache" -name '*.cubin' -delete
must env GPU_RUNTIME_PREFER=ptx python3 "$work/ptx_only/check.pex" --prefer ptx

if [ -n "$numpy_whl" ]; then
  step "3. xoroshiro128p states: numba's on this GPU vs gpu_runtime's (numpy)"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/np" "$numpy_whl" || failed=1
  # gpu_runtime from the bundle's own PEX (its venv site-packages), numba from the device.
  must env PYTHONPATH="$work/np:$(dirname "$0")/../../src/python:$(dirname "$0")/../../src/spec" \
    python3 - <<'PY'
import time
import numpy as np
from numba.cuda.random import create_xoroshiro128p_states as numba_states
from gpu_runtime.numba_compat.xoroshiro import xoroshiro128p_states
for n, seed, sub in [(1, 0, 0), (1000, 42, 3), (1000000, 42, 0), (4097, 2**63 - 1, 5)]:
    t = time.perf_counter()
    ours = xoroshiro128p_states(n, seed, sub)
    dt = time.perf_counter() - t
    theirs = numba_states(n, seed, sub).copy_to_host()
    same = ours.tobytes() == theirs.tobytes()
    print(f"n={n} seed={seed} sub={sub}: equal={same} (gpu_runtime {dt * 1e3:.0f} ms)")
    assert same
PY
fi

rm -rf "$work"
echo
[ "$failed" = 0 ] && echo "all numba docs checks passed" || echo "some numba docs checks FAILED"
exit "$failed"
