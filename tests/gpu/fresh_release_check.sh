#!/usr/bin/env bash
# The first run of a freshly deployed release on the H200, as `pants experimental-deploy` leaves
# it: the release's launcher run once with GPU_BUNDLE_PREPARE_ONLY=1 before the switch (the app's
# venv made under an empty PEX_ROOT), then the app's first run. Process start to the first saxpy
# launch (tests/gpu/jit_first_launch.py), against a warm run and a python3 that only creates the
# CUDA context, each the median of 3 (the first run: 3 fresh PEX_ROOTs).
#
#   tests/gpu/fresh_release_check.sh dist/imaging_h200
set -u
bundle=$1
export CUDA_CACHE_DISABLE=1 PYTHONUNBUFFERED=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "-")}'; }
first_ms() {  # first_ms <command...>: its first-launch-ms, process start included
  START_NS=$(date +%s%N) "$@" 2>"$work/err" | sed -n 's/^first-launch-ms //p'
}
launch() { PEX_INTERPRETER=1 "$bundle/app" tests/gpu/jit_first_launch.py; }
ctx() { python3 -c '
import os, time
from cuda.bindings import driver as d
d.cuInit(0); d.cuDevicePrimaryCtxRetain(d.cuDeviceGet(0)[1])
print("first-launch-ms %.0f" % ((time.time() - int(os.environ["START_NS"]) / 1e9) * 1e3))'; }

prep=() fresh=() warm=()
for i in 1 2 3; do
  export PEX_ROOT="$work/pex_root$i" GPU_BUNDLE_VENVS="$work/venvs$i"
  t0=$(date +%s%N)
  GPU_BUNDLE_PREPARE_ONLY=1 "$bundle/app" || { echo "FAILED: prepare"; cat "$work/err"; exit 1; }
  prep+=("$(( ($(date +%s%N) - t0) / 1000000 ))")
  fresh+=("$(first_ms launch)")
  warm+=("$(first_ms launch)")
done
ctx_ms=$(for i in 1 2 3; do first_ms ctx; done | median)
prep_ms=$(printf '%s\n' "${prep[@]}" | median)
fresh_ms=$(printf '%s\n' "${fresh[@]}" | median)
warm_ms=$(printf '%s\n' "${warm[@]}" | median)
du -sm "$work/pex_root1" | awk '{print "PEX_ROOT after the prepare and runs: " $1 " MB"}'
printf '%-58s %s\n' "process start -> first saxpy launch" "ms (median of 3)" \
  "(c) python3 creating the CUDA context, nothing else" "$ctx_ms" \
  "(a) first run of a freshly prepared release (launcher)" "$fresh_ms" \
  "(b) warm run (launcher)" "$warm_ms" \
  "deploy-time prepare (GPU_BUNDLE_PREPARE_ONLY=1, empty PEX_ROOT)" "$prep_ms"
ok=1
for v in "$fresh_ms" "$warm_ms"; do
  [ "$v" -le $((ctx_ms + 100)) ] 2>/dev/null || ok=0
done
[ "$ok" = 1 ] && echo "goal met: (a) and (b) within 100 ms of (c)" || echo "goal NOT met: (a) or (b) more than 100 ms over (c)"
