#!/usr/bin/env bash
# A signed bundle on a GPU it does not cover, with a compiler present: it must refuse to load,
# never JIT-compile code that no signature covers (issue 21), whether its key is trusted on the
# device or not. On the H200 (sm_90), with the device's python3 and numba-cuda as the compiler,
# from a checkout (the repo's src/):
#
#   tests/gpu/build_uncovered_bundle.sh          # on the build machine: sm_80 only, two bundles
#   tests/gpu/uncovered_bundle_check.sh dist/imaging_sm80_signed dist/imaging_sm80_jit numpy-2.4.6-cp312-....whl
#
# (numba-cuda needs numpy < 2.5: the wheel, or a directory holding an unpacked numpy 2.4.)
#
# The bundles' sm_80 PTX would run on sm_90 through the driver (signed code: that is allowed),
# so the app is limited to cubins (GPU_RUNTIME_PREFER=cubin): an sm_80 cubin does not load on
# sm_90, and nothing either bundle holds covers this GPU.
# 1. the compiler is really there: gpu_compiler through the same $GPU_RUNTIME_TOOLCHAIN;
# 2. control: the unsigned twin (`jit_fallback=True`: the kernels' sources in its app), the same
#    compiler: the app JIT-compiles what the bundle lacks for sm_90 and runs, so the compiler
#    would be used if trust allowed it;
# 3. the signed bundle, its key trusted: exit 2, the one-line refusal ("never JIT-compiled"),
#    and the JIT cache it was given holds no compiled code;
# 4. the signed bundle, no key trusted on the device: the same refusal, nothing compiled.
set -u
signed=$1 control=$2 numpy_whl=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CUDA_CACHE_DISABLE=1 PYTHONUNBUFFERED=1
failed=0
if [ -d "$numpy_whl" ]; then  # an unpacked numpy (e.g. the app PEX's own .deps/numpy-*.whl)
  np=$numpy_whl
else
  np=$work/np
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$np" "$numpy_whl" || exit 1
fi
compiler_path="$np:$PWD/src/python:$PWD/src/spec"
key=$(python3 - "$signed/app.pex" <<'PY'
import os, re, sys, zipfile
pex = sys.argv[1]
name = "gpu_bundle_pinned_keys.py"
if os.path.isdir(pex):  # packed layout (the default): the app's modules are files
    with open(os.path.join(pex, name)) as f:
        text = f.read()
else:
    with zipfile.ZipFile(pex) as z:
        text = z.read(name).decode()
print(re.search(r"[0-9a-f]{64}", text).group(0))
PY
) || { echo "FAILED: no pinned key in $signed/app.pex"; exit 1; }
echo "bundle key: $key"
run_app() {  # run_app <bundle> <jit cache dir> [env...]: the bundle's app on its cache
  local bundle=$1 jit=$2; shift 2
  env "$@" GPU_RUNTIME_CACHE="$bundle/cache" GPU_RUNTIME_PREFER=cubin \
    GPU_RUNTIME_TOOLCHAIN="$(command -v python3)" \
    PYTHONPATH="$compiler_path" GPU_RUNTIME_JIT_CACHE="$jit" python3 "$bundle/app.pex" 2>&1
}
cubins() { find "$1" -name '*.cubin' 2>/dev/null | wc -l; }
refused() {  # refused <label> <jit cache dir> <output> <rc>
  printf '%s\n' "$3" | tail -n 3
  [ "$4" = 2 ] || { echo "FAILED ($1): expected the app's error exit 2, got $4"; failed=1; }
  grep -qF "never JIT-compiled" <<<"$3" || { echo "FAILED ($1): no 'never JIT-compiled' refusal"; failed=1; }
  local n; n=$(cubins "$2"); echo "JIT cache cubins ($1): $n"
  [ "$n" = 0 ] || { echo "FAILED ($1): the JIT cache holds compiled code"; failed=1; }
}

echo "=== 1. the compiler the app is given works"
env PYTHONPATH="$compiler_path" python3 -m gpu_compiler versions || failed=1

echo "=== 2. control: the unsigned twin with its sources: JIT-compiles for sm_90 and runs"
out=$(run_app "$control" "$work/jit-control"); rc=$?
printf '%s\n' "$out" | tail -n 3
[ "$rc" = 0 ] || { echo "FAILED: the control run exited $rc"; failed=1; }
n=$(cubins "$work/jit-control"); echo "JIT cache cubins (control): $n"
[ "$n" -gt 0 ] || { echo "FAILED: the control compiled nothing: the check would prove nothing"; failed=1; }

echo "=== 3. the signed bundle, its key trusted: refused, nothing compiled"
out=$(run_app "$signed" "$work/jit-trusted" GPU_RUNTIME_TRUSTED_KEYS="$key"); rc=$?
refused trusted "$work/jit-trusted" "$out" "$rc"

echo "=== 4. the signed bundle, no key trusted here: refused, nothing compiled"
out=$(run_app "$signed" "$work/jit-unchecked"); rc=$?
refused "not checked" "$work/jit-unchecked" "$out" "$rc"

[ "$failed" = 0 ] && echo "uncovered bundle check passed" || echo "uncovered bundle check FAILED"
exit "$failed"
