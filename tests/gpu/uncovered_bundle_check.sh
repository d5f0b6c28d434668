#!/usr/bin/env bash
# A signed bundle on a GPU it does not cover, with a compiler present: it must refuse to load,
# never JIT-compile code that no signature covers (issue 21). On the H200 (sm_90), with the
# device's python3 and numba-cuda as the compiler, from a checkout (the repo's src/):
#
#   tests/gpu/build_uncovered_bundle.sh          # on the build machine: sm_80 only, signed
#   tests/gpu/uncovered_bundle_check.sh dist/imaging_sm80_signed numpy-2.4.6-cp312-....whl [APP]
#
# APP (default: the bundle's own app.pex) may be another bundle's app.pex of the same app: the
# cache is then named by $GPU_RUNTIME_CACHE and the bundle's key trusted on the device
# ($GPU_RUNTIME_TRUSTED_KEYS, read from the bundle's pinned-keys module), the same trust path.
# 1. the compiler is really there: gpu_compiler through the same $GPU_RUNTIME_TOOLCHAIN;
# The bundle's sm_80 PTX would run on sm_90 through the driver (signed code: that is allowed),
# so the app is limited to cubins (GPU_RUNTIME_PREFER=cubin): an sm_80 cubin does not load on
# sm_90, and nothing the bundle holds covers this GPU.
# 2. control: the cache with no key trusted, the same compiler: the app JIT-compiles what the
#    bundle lacks for sm_90 and runs (so the compiler would be used if trust allowed it);
# 3. with the key trusted: exit 2, the one-line refusal ("never JIT-compiled"), and the JIT
#    cache it was given holds no compiled code.
set -u
bundle=$1 numpy_whl=$2 app=${3:-$1/app.pex}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CUDA_CACHE_DISABLE=1 PYTHONUNBUFFERED=1
failed=0
python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/np" "$numpy_whl" || exit 1
compiler_path="$work/np:$PWD/src/python:$PWD/src/spec"
key=${BUNDLE_KEY:-}  # the bundle's public key; read from its app.pex when not given
[ -n "$key" ] || key=$(python3 - "$bundle/app.pex" <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    text = z.read("gpu_bundle_pinned_keys.py").decode()
print(re.search(r"[0-9a-f]{64}", text).group(0))
PY
) || { echo "FAILED: no pinned key in $bundle/app.pex"; exit 1; }
echo "bundle key: $key"
run_app() {  # run_app <jit cache dir> [env...]: the app on the bundle's cache with the compiler
  local jit=$1; shift
  env "$@" GPU_RUNTIME_CACHE="$bundle/cache" GPU_RUNTIME_PREFER=cubin \
    GPU_RUNTIME_TOOLCHAIN="$(command -v python3)" \
    PYTHONPATH="$compiler_path" GPU_RUNTIME_JIT_CACHE="$jit" python3 "$app" 2>&1
}
cubins() { find "$1" -name '*.cubin' 2>/dev/null | wc -l; }

echo "=== 1. the compiler the app is given works"
env PYTHONPATH="$compiler_path" python3 -m gpu_compiler versions || failed=1

echo "=== 2. control: no key trusted: JIT-compiles for sm_90 and runs"
out=$(run_app "$work/jit-control"); rc=$?
printf '%s\n' "$out" | tail -n 3
[ "$rc" = 0 ] || { echo "FAILED: the control run exited $rc"; failed=1; }
n=$(cubins "$work/jit-control"); echo "JIT cache cubins (control): $n"
[ "$n" -gt 0 ] || { echo "FAILED: the control compiled nothing: the check would prove nothing"; failed=1; }

echo "=== 3. the bundle's key trusted: refused, nothing compiled"
out=$(run_app "$work/jit" GPU_RUNTIME_TRUSTED_KEYS="$key"); rc=$?
printf '%s\n' "$out" | tail -n 3
[ "$rc" = 2 ] || { echo "FAILED: expected the app's error exit 2, got $rc"; failed=1; }
grep -qF "never JIT-compiled" <<<"$out" || { echo "FAILED: no 'never JIT-compiled' refusal"; failed=1; }
n=$(cubins "$work/jit"); echo "JIT cache cubins (trusted): $n"
[ "$n" = 0 ] || { echo "FAILED: the JIT cache holds compiled code"; failed=1; }

[ "$failed" = 0 ] && echo "uncovered bundle check passed" || echo "uncovered bundle check FAILED"
exit "$failed"
