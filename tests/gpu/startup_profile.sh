#!/usr/bin/env bash
# Where a bundle's start-up goes on the device (issue 11, first launch): median of 5 of
#  - python3 itself, python3 + cuInit + primary context;
#  - the PEX reaching user code (PEX_INTERPRETER, `-c pass`), and the same with gpu_runtime imported;
#  - process start to the first saxpy (tests/gpu/jit_first_launch.py inside the PEX);
# then the 15 slowest imports of that last run (PYTHONPROFILEIMPORTTIME, which survives the
# PEX's re-exec into its venv).
#   tests/gpu/startup_profile.sh dist/imaging_h200
set -u
bundle=$1
export CUDA_CACHE_DISABLE=1
ms() { python3 -c 'import sys,time; print(round((time.time_ns()-int(sys.argv[1]))/1e6))' "$1"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
t() { for i in 1 2 3 4 5; do s=$(date +%s%N); "$@" >/dev/null 2>&1; ms "$s"; done | median; }
env -u PYTHONPATH PEX_INTERPRETER=1 python3 "$bundle/app.pex" -c pass  # unpack once
printf '%-44s %s\n' "python3 -c pass" "$(t python3 -c pass)"
printf '%-44s %s\n' "python3 + cuInit + primary context" "$(t python3 -c 'from cuda.bindings import driver as d; d.cuInit(0); d.cuDevicePrimaryCtxRetain(d.cuDeviceGet(0)[1])')"
printf '%-44s %s\n' "app.pex to user code (-c pass)" "$(t env PEX_INTERPRETER=1 python3 "$bundle/app.pex" -c pass)"
printf '%-44s %s\n' "app.pex + import gpu_runtime" "$(t env PEX_INTERPRETER=1 python3 "$bundle/app.pex" -c 'import gpu_runtime')"
printf '%-44s %s\n' "app.pex + import numpy" "$(t env PEX_INTERPRETER=1 python3 "$bundle/app.pex" -c 'import numpy')"
printf '%-44s %s\n' "app.pex + context" "$(t env PEX_INTERPRETER=1 python3 "$bundle/app.pex" -c 'from cuda.bindings import driver as d; d.cuInit(0); d.cuDevicePrimaryCtxRetain(d.cuDeviceGet(0)[1])')"
first() { START_NS=$(date +%s%N) PEX_INTERPRETER=1 python3 "$bundle/app.pex" tests/gpu/jit_first_launch.py | sed -n 's/^first-launch-ms //p'; }
printf '%-44s %s\n' "app.pex to first saxpy (launched, synced)" "$(for i in 1 2 3 4 5; do first; done | median)"
echo "slowest imports (cumulative us) in the PEX run to the first saxpy:"
START_NS=$(date +%s%N) PYTHONPROFILEIMPORTTIME=1 PEX_INTERPRETER=1 python3 "$bundle/app.pex" tests/gpu/jit_first_launch.py 2>&1 >/dev/null \
  | awk -F'|' '/import time:/ && $2+0 > 0 {print $2+0, $3}' | sort -rn | head -15
