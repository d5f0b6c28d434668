#!/usr/bin/env bash
# JIT mode on the H200 with the device's own python3 (numba-cuda and NVIDIA's compiler wheels),
# from a checkout: the example pipeline compiled on first use from an empty cache, again warm,
# and from its bundle; the results must be identical, and a table gives process start to the
# first saxpy launch for each, beside a process that only creates the CUDA context.
#
#   ./pants export-codegen src/python/imaging/kernels::     # on the build machine: the index
#   tests/gpu/jit_mode_check.sh dist/imaging_h200 numpy-2.4.6-cp312-....whl
set -u
bundle=$1 numpy_whl=$2
work=$(mktemp -d)
export CUDA_CACHE_DISABLE=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/np" "$numpy_whl" || exit 1
checkout="$work/np:src/python:src/spec:dist/codegen/src/python"
export GPU_RUNTIME_JIT_CACHE="$work/jit"
failed=0

one() {  # one <label> <command...>: a run's stdout to $work/<label>.out, its first-launch ms
  local label=$1; shift
  START_NS=$(date +%s%N) "$@" > "$work/$label.out" 2> "$work/$label.err" || {
    echo "FAILED: $label"; tail -30 "$work/$label.err"; failed=1; }
  sed -n 's/^first-launch-ms //p' "$work/$label.out"
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "-")}'; }

jit() { env PYTHONPATH="$checkout" python3 tests/gpu/jit_first_launch.py; }
pex() { env -u PYTHONPATH PEX_INTERPRETER=1 python3 "$bundle/app.pex" tests/gpu/jit_first_launch.py; }
ctx() { python3 -c '
import os, time
from cuda.bindings import driver as d
d.cuInit(0); d.cuDevicePrimaryCtxRetain(d.cuDeviceGet(0)[1])
print("first-launch-ms %.0f" % ((time.time() - int(os.environ["START_NS"]) / 1e9) * 1e3))'; }

cold=$(one jit_cold jit)
warm=$(for i in 1 2 3; do one jit_warm jit; done | median)
pex_first=$(one pex_first pex)
bundle_ms=$(for i in 1 2 3; do one pex pex; done | median)
ctx_ms=$(for i in 1 2 3; do one ctx ctx; done | median)

for label in jit_cold jit_warm pex; do
  grep '^result' "$work/$label.out" > "$work/$label.results"
  echo "== $label"; cat "$work/$label.results"; grep -E '^      from ' "$work/$label.out" | sort | uniq -c
done
for label in jit_warm pex; do
  if cmp -s "$work/jit_cold.results" "$work/$label.results"; then echo "results jit_cold == $label: identical"
  else echo "FAILED: results of jit_cold and $label differ"; diff "$work/jit_cold.results" "$work/$label.results"; failed=1; fi
done
grep -c '^result ok' "$work/jit_cold.results" | sed 's/^/stages ok: /'
printf '\n%-34s %s\n' "process start -> first saxpy launch" "ms (median of 3; cold: 1 run)"
printf '%-34s %s\n' "context only (python3)" "$ctx_ms" "JIT, empty cache (compiles)" "$cold" \
  "JIT, warm cache" "$warm" "bundle app.pex, first run (unpack)" "$pex_first" "bundle app.pex" "$bundle_ms"
echo "== JIT mode: a child forked right after open_cache() (CUDA started early) is told why; with"
echo "   GPU_BUNDLE_INIT_CUDA=0 one forked before any kernel runs saxpy"
fork_check=$(dirname "$0")/fork_check.py
timeout 60 env PYTHONPATH="$checkout" python3 "$fork_check" launcher-started || { echo "FAILED: fork after the early start"; failed=1; }
timeout 60 env PYTHONPATH="$checkout" GPU_BUNDLE_INIT_CUDA=0 python3 "$fork_check" none || { echo "FAILED: fork with GPU_BUNDLE_INIT_CUDA=0"; failed=1; }
echo; PYTHONPATH="$checkout" python3 -m gpu_runtime cache list
[ "$failed" = 0 ] && echo "jit mode check passed" || { echo "jit mode check FAILED"; exit 1; }
