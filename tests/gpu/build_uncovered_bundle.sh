#!/usr/bin/env bash
# Builds, on the build machine, the bundle tests/gpu/uncovered_bundle_check.sh runs on the H200:
# the example app signed by a throwaway key and compiled for sm_80 only, a GPU the H200 (sm_90)
# is not. The target lives in a BUILD file made here and removed again, so `pants package ::`
# never builds it.
#
#   tests/gpu/build_uncovered_bundle.sh        # -> dist/imaging_sm80_signed/
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=tests/gpu/uncovered
key=$(mktemp -d)/bundle.pem
trap 'rm -rf "$dir" "$(dirname "$key")"' EXIT
openssl genpkey -algorithm ed25519 -out "$key"
mkdir -p "$dir"
cat > "$dir/BUILD" <<'BUILD'
deploy_bundle(
    name="imaging_sm80_signed",
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
    complete_platforms=["3rdparty/platforms:h200_x86_64_cp312"],
)
BUILD
PANTS_GPU_BUNDLE_SIGNING_KEY_FILE="$key" ./pants package "$dir:imaging_sm80_signed"
