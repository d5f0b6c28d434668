#!/usr/bin/env bash
# GPU acceptance checks of the device bundles, run on the H200 machine (sm_90, driver 580) with
# its own python3, against bundles built on the build machine and copied over as built:
#
#   tests/gpu/h200_checks.sh dist/imaging_h200 dist/imaging_orin/cache
#
# 1. the H200 bundle's app (pipeline vs numpy) and its self-test (every kernel and signature of
#    the manifest, from cubin and from PTX, against numpy; --strict: a kernel without a
#    reference fails), with the kernels that need CUDA's own headers (half_stats.cu: cuda_fp16.h,
#    cuda_bf16.h, CUB, cooperative groups; haxpy.py, bf16_axpy.py: numba's fp16/bf16) named among
#    the passed from each mode; the same app through the bundle's
#    launcher (`app`: a venv of app.pex made on the first run, used as it is on the second),
#    and a child forked after the launcher or the app started CUDA (the error that says so);
# 2. the same bundle with every cubin deleted: it runs from PTX (driver JIT);
# 3. a cache holding only sm_87 cubins (the Orin bundle's, PTX deleted): the clear error;
#    the Orin cache as built (sm_87 cubin + PTX ISA 8.5) runs on sm_90 from its PTX;
# 4. a tampered cubin: refused (3a and 4: the app's message and exit status 2).
# Prints each step's output; exits non-zero if a step that must pass fails.
set -u
bundle=$1 orin_cache=$2
work=$(mktemp -d)
export CUDA_CACHE_DISABLE=1 PYTHONUNBUFFERED=1
failed=0
step() { printf '\n=== %s\n' "$*"; }
must() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
# The app reports a gpu_runtime error (no variant, tampered file...) as its message, exit 2.
refused() {
  "$@"; rc=$?
  [ "$rc" = 2 ] || { echo "FAILED: expected the app's error exit 2, got rc=$rc: $*"; failed=1; }
}

nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
python3 --version
step "1a. H200 bundle app (cubin)"
must python3 "$bundle/app.pex" -v
step "1b. self-test: every kernel, cubin and PTX"
must python3 "$bundle/app.pex" --self-test --modes cubin,ptx --strict --json "$work/selftest.json"
step "1b'. CUDA's headers and half precision: each kernel passed from its cubin and its PTX"
must python3 - "$work/selftest.json" <<'PY'
import json, sys
records = json.load(open(sys.argv[1]))["records"]
missing = []
for kernel in ("half_gain_stats", "bf16_offset_to_half", "haxpy", "bf16_axpy"):
    for mode in ("cubin", "ptx"):
        hits = [r["what"] for r in records if r["status"] == "passed"
                and r["what"].startswith("[%s] %s " % (mode, mode)) and ".%s(" % kernel in r["what"]]
        print("%-20s %-5s %s" % (kernel, mode, hits[0] if hits else "NOT PASSED"))
        missing += [] if hits else ["%s from %s" % (kernel, mode)]
sys.exit("not passed: %s" % ", ".join(missing) if missing else 0)
PY

step "1c. the bundle's launcher: first run makes the venv, the second starts from it"
must env GPU_BUNDLE_VENVS="$work/venvs" "$bundle/app"
must env GPU_BUNDLE_VENVS="$work/venvs" "$bundle/app" --self-test
ls "$work/venvs"
step "1d. the launcher starts CUDA before the app: a forked child is told why it cannot use it"
fork_check=$(dirname "$0")/fork_check.py
must env GPU_BUNDLE_VENVS="$work/venvs" PEX_INTERPRETER=1 "$bundle/app" "$fork_check" launcher-started
must env GPU_BUNDLE_VENVS="$work/venvs" PEX_INTERPRETER=1 GPU_BUNDLE_INIT_CUDA=0 \
  "$bundle/app" "$fork_check" parent-used
must env GPU_BUNDLE_VENVS="$work/venvs" PEX_INTERPRETER=1 GPU_BUNDLE_INIT_CUDA=0 \
  "$bundle/app" "$fork_check" none

step "2. cubins removed: runs from PTX"
cp -r "$bundle" "$work/ptx_only" && find "$work/ptx_only/cache" -name '*.cubin' -delete
must python3 "$work/ptx_only/app.pex" -v

step "3a. cache with only sm_87 cubins: expect the clear error (exit 2)"
cp -r "$orin_cache" "$work/sm87" && find "$work/sm87" -name '*.ptx' -delete
refused env GPU_RUNTIME_CACHE="$work/sm87" python3 "$bundle/app.pex"
step "3b. the Orin cache as built (sm_87 cubin + PTX 8.5) on sm_90: runs from PTX"
must env GPU_RUNTIME_CACHE="$orin_cache" python3 "$bundle/app.pex" -v

step "4. tampered cubin: expect refusal (exit 2)"
cp -r "$bundle" "$work/tampered"
printf 'x' >> "$(find "$work/tampered/cache" -name 'saxpy__0.cubin')"
refused python3 "$work/tampered/app.pex"

rm -rf "$work"
echo
[ "$failed" = 0 ] && echo "all H200 checks passed" || echo "some H200 checks FAILED"
exit "$failed"
