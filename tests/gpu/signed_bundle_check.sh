#!/usr/bin/env bash
# Signed bundles on the H200 (sm_90, driver 580), with the device's own python3. Build the bundle
# signed on the build machine, with a key kept outside the repo, and copy it over as built:
#
#   openssl genpkey -algorithm ed25519 -out ~/.config/gpu_build/bundle.pem     # once
#   PANTS_GPU_BUNDLE_SIGNING_KEY_FILE=~/.config/gpu_build/bundle.pem \
#     ./pants package src/python/imaging:imaging_h200
#   tests/gpu/signed_bundle_check.sh dist/imaging_h200                          # on the H200
#
# 1. the bundle is signed and its public key is pinned into app.pex (gpu_bundle_pinned_keys.py);
# 2. `python -m gpu_runtime verify` from the PEX: every file and the signature check out;
# 3. the app runs with its key pinned (pipeline vs numpy, then the self-test);
# 4. one cubin replaced by another real cubin and its sha256 fixed in manifest.json: the app
#    refuses the bundle before loading any kernel (its error, exit 2), naming the bundle and the
#    key id; verify refuses it too (exit 1);
# 5. the signature deleted: refused as unsigned (exit 2).
# Prints each step's output; exits non-zero if any step does not behave as stated.
set -u
bundle=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CUDA_CACHE_DISABLE=1 PYTHONUNBUFFERED=1
failed=0
step() { printf '\n=== %s\n' "$*"; }
must() { "$@" || { echo "FAILED (rc=$?): $*"; failed=1; }; }
# expect RC TEXT CMD...: the command exits RC and its output contains TEXT.
expect() {
  local rc_want=$1 text=$2 out rc
  shift 2
  out=$("$@" 2>&1); rc=$?
  printf '%s\n' "$out" | tail -n 5
  [ "$rc" = "$rc_want" ] || { echo "FAILED: expected rc=$rc_want, got rc=$rc: $*"; failed=1; }
  grep -qF -- "$text" <<<"$out" || { echo "FAILED: output lacks '$text': $*"; failed=1; }
}

python3 --version
step "1. signed, key pinned into app.pex"
cat "$bundle/cache/manifest.json.sig" || failed=1
python3 - "$bundle/app.pex" <<'PY' || failed=1
import os, sys, zipfile
name, pex = "gpu_bundle_pinned_keys.py", sys.argv[1]
if os.path.isdir(pex):  # packed (deploy_bundle's default app_layout)
    keys = open(os.path.join(pex, name)).read()
else:
    keys = zipfile.ZipFile(pex).read(name).decode()
print("pinned:", keys)
PY

step "2. verify from the PEX: expect OK ... signed by trusted key"
expect 0 "signed by trusted key" env PEX_MODULE=gpu_runtime python3 "$bundle/app.pex" verify "$bundle"

step "3. the app with its key pinned: runs"
must python3 "$bundle/app.pex" -v
must python3 "$bundle/app.pex" --self-test --modes cubin

step "4. one cubin swapped for another and re-hashed in the manifest: refused (exit 2)"
cp -r "$bundle" "$work/tampered"
python3 - "$work/tampered/cache" <<'PY'
import hashlib, json, os, sys
cache = sys.argv[1]
path = os.path.join(cache, "manifest.json")
manifest = json.load(open(path))
cubins = sorted(p for p in manifest["files"] if p.endswith(".cubin"))
victim, donor = cubins[0], cubins[1]
data = open(os.path.join(cache, donor), "rb").read()
open(os.path.join(cache, victim), "wb").write(data)
manifest["files"][victim] = hashlib.sha256(data).hexdigest()
json.dump(manifest, open(path, "w"), indent=2, sort_keys=True)
print(f"replaced {victim} with the bytes of {donor}, sha256 updated in manifest.json")
PY
kid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["key_id"])' "$bundle/cache/manifest.json.sig")
expect 2 "does not match its manifest" python3 "$work/tampered/app.pex" -v
expect 2 "$kid" python3 "$work/tampered/app.pex" -v
expect 1 "REFUSED" env PEX_MODULE=gpu_runtime python3 "$work/tampered/app.pex" verify "$work/tampered"

step "5. signature removed: refused as unsigned (exit 2)"
cp -r "$bundle" "$work/unsigned" && rm "$work/unsigned/cache/manifest.json.sig"
expect 2 "is not signed" python3 "$work/unsigned/app.pex" -v

echo
[ "$failed" = 0 ] && echo "signed bundle checks: all passed" || echo "signed bundle checks: FAILED"
exit "$failed"
