#!/usr/bin/env bash
# A signed bundle on a GPU it does not cover, with a compiler present: it must refuse to load,
# never JIT-compile code that no signature covers (issue 21). On the H200 (sm_90), with the
# device's python3 and numba-cuda as the compiler, from a checkout (the repo's src/):
#
#   tests/gpu/build_uncovered_bundle.sh                 # on the build machine (sm_80, signed)
#   tests/gpu/uncovered_bundle_check.sh dist/imaging_sm80_signed numpy-2.4.6-cp312-....whl
#
# 1. the compiler is really there: `python3 -m gpu_compiler versions` through the same
#    $GPU_RUNTIME_TOOLCHAIN the app is given;
# 2. the app, with that compiler, exits 2 with the one-line refusal ("never JIT-compiled"),
#    and the JIT cache it was given stays empty.
set -u
bundle=$1 numpy_whl=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CUDA_CACHE_DISABLE=1 PYTHONUNBUFFERED=1
failed=0
python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/np" "$numpy_whl" || exit 1
compiler_path="$work/np:$PWD/src/python:$PWD/src/spec"

echo "=== 1. the compiler the app is given works"
env PYTHONPATH="$compiler_path" python3 -m gpu_compiler versions || failed=1

echo "=== 2. signed sm_80 bundle on sm_90 with that compiler: refused, nothing compiled"
out=$(env GPU_RUNTIME_TOOLCHAIN="$(command -v python3)" PYTHONPATH="$compiler_path" \
  GPU_RUNTIME_JIT_CACHE="$work/jit" python3 "$bundle/app.pex" 2>&1); rc=$?
printf '%s\n' "$out" | tail -n 4
[ "$rc" = 2 ] || { echo "FAILED: expected the app's error exit 2, got $rc"; failed=1; }
grep -qF "never JIT-compiled" <<<"$out" || { echo "FAILED: no 'never JIT-compiled' refusal"; failed=1; }
entries=$(find "$work/jit" -name '*.cubin' 2>/dev/null | wc -l)
echo "JIT cache cubins: $entries"
[ "$entries" = 0 ] || { echo "FAILED: the JIT cache holds compiled code"; failed=1; }

[ "$failed" = 0 ] && echo "uncovered bundle check passed" || echo "uncovered bundle check FAILED"
exit "$failed"
