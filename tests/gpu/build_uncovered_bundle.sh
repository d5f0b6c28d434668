#!/usr/bin/env bash
# Builds, on the build machine, the two bundles tests/gpu/uncovered_bundle_check.sh runs on the
# H200, both of the example app compiled for sm_80 only, a GPU the H200 (sm_90) is not:
# - dist/imaging_sm80_signed/: signed by a throwaway key (what the check proves never compiles);
# - dist/imaging_sm80_jit/: its unsigned twin with `jit_fallback=True` (the kernels' sources in
#   the app), the control: the same app, cache and compiler do JIT-compile when trust allows it.
# (`pants package` refuses `jit_fallback` on a signed bundle, hence two bundles.) The targets live
# in a BUILD file made here and removed again, so `pants package ::` never builds them.
#
#   tests/gpu/build_uncovered_bundle.sh        # -> dist/imaging_sm80_signed/, dist/imaging_sm80_jit/
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=tests/gpu/uncovered
key=$(mktemp -d)/bundle.pem
trap 'rm -rf "$dir" "$(dirname "$key")"' EXIT
openssl genpkey -algorithm ed25519 -out "$key"
mkdir -p "$dir"
bundle() {  # bundle <name> <jit_fallback>
  cat <<BUILD
deploy_bundle(
    name="$1",
    binary="src/python/imaging:app",
    kernels=[
        "src/python/imaging/kernels:saxpy",
        "src/python/imaging/kernels:blur",
        "src/python/imaging/kernels:histogram",
        "src/python/imaging/kernels:sobel",
        "src/python/imaging/kernels:matmul",
    ],
    capabilities=["sm_80"],
    toolchain="cuda13",
    driver_version="13.0",
    jit_fallback=$2,
    complete_platforms=["3rdparty/platforms:h200_x86_64_cp312"],
)
BUILD
}
{ bundle imaging_sm80_signed False; bundle imaging_sm80_jit True; } > "$dir/BUILD"
PANTS_GPU_BUNDLE_SIGNING_KEY_FILE="$key" ./pants package "$dir:imaging_sm80_signed"
./pants package "$dir:imaging_sm80_jit"
