"""The bundle's launcher: `<bundle>/app` runs `app.pex` from pex's own venv of it, directly.

Why: `python3 app.pex` (a venv-mode PEX) runs pex's bootstrap in one interpreter only to find
the venv pex installed under PEX_ROOT, then starts a second interpreter there, a delay before
the app's first line of the order of a CUDA context's start (figures:
docs/gpu-checks-and-benchmarks.md). Pex's own answer, `--sh-boot`, cannot help a bundle: for a
PEX built for complete platforms, with no interpreter constraints, pex keys the venv by the
interpreter that runs it (and by the build's PEX_PYTHON_PATH), which the build cannot know, so
the preamble never finds it.

The launcher is a POSIX sh script. On its first run it checks `app.pex` against the identity it
was built with (a zipapp's sha256; for a packed PEX directory, the sha256 of its files' sorted
`<path> <sha256>` lines: `PEX_DIGEST_SOURCE`, one formula for the build and the device), runs it
once the usual way (pex unpacks it and makes its venv under PEX_ROOT, as `python3 app.pex`
would) to ask where that venv is, and records it as a symlink `$GPU_BUNDLE_VENVS/<sha256>`
(default `${XDG_CACHE_HOME:-~/.cache}/gpu_bundle/venvs`), put in place by an atomic rename, so
two first runs at once leave one link to the one venv. Every run then execs that venv's
interpreter on its `pex` entry point, as pex's sh-boot does, with `PEX` set to `app.pex` so that
gpu_runtime finds `cache/` beside it. A cleaned PEX_ROOT leaves a dangling link, and the next
run records the venv anew; where no link can be made, the launcher warns and runs `app.pex`
itself. Only a venv-mode PEX (`execution_mode="venv"`) has a venv to start, so deploy_bundle
writes a launcher only for one.

The launcher also starts CUDA before the app's first line (`deploy_bundle`'s
`init_cuda_at_start`, on by default; `GPU_BUNDLE_INIT_CUDA=0|1` on the device overrides it). The
venv's interpreter runs `_BOOT` first, which starts a thread that calls cuInit and retains
device 0's primary context, then runs the venv's `pex` script as the interpreter would have.
Why: the driver's set-up and the app's imports (numpy, gpu_runtime) take similar times, and
cuda.bindings releases the GIL inside both driver calls, so the two overlap instead of adding up
(figures: docs/gpu-checks-and-benchmarks.md). Nothing needs to hand the context over: the driver
serialises cuInit and keeps one primary context per device, so gpu_runtime's own cuInit and
cuDevicePrimaryCtxRetain later return at once with the same context (or wait for the thread's
call to finish). A failure in the thread is ignored: gpu_runtime's first use meets it again and
reports it. The thread is not a daemon, so a process that ends early still waits for the driver
call to return before it exits. It also puts its pid in `GPU_BUNDLE_CUDA_INIT_PID`, so that
gpu_runtime can explain the error of a forked child (`gpu_runtime.driver.device`)."""

from __future__ import annotations

import hashlib
from typing import Mapping

from pants.backend.python.target_types import PexExecutionMode, PexExecutionModeField
from pants.engine.addresses import Address
from pants.engine.target import Target

from gpu_build.util_rules.bundle_field_set import DeployBundleError
from gpu_spec.bundle_files import CACHE_DIR
from gpu_spec.launcher_env import (
    INIT_CUDA_ENV,
    INIT_CUDA_PID_ENV,
    INIT_CUDA_THREAD,
    PREPARE_ONLY_ENV,
    TAMPERED_EXIT,
)

# Run by the venv's interpreter as `-c`, with argv `<venv>/pex <app args>` (see the docstring).
# No single quotes: the script holds it in a single-quoted sh string.
_BOOT = """\
import os, sys
want = os.environ.get("{env}", "{default}")
if want not in ("0", "1"):
    print(f"warning: {env}={{want}} is neither 0 nor 1; using {default}", file=sys.stderr)
    want = "{default}"
if want == "1":
    import threading

    def init_cuda():
        try:
            from cuda.bindings import driver
            if int(driver.cuInit(0)[0]) == 0:
                err, dev = driver.cuDeviceGet(0)
                if int(err) == 0:
                    driver.cuDevicePrimaryCtxRetain(dev)
        except Exception:
            pass  # gpu_runtime meets it again on first use, and says what it is

    os.environ["{pid_env}"] = str(os.getpid())
    threading.Thread(target=init_cuda, name="{thread}").start()
script = sys.argv[1]
del sys.argv[0]
sys.path[0] = os.path.dirname(script)  # as for `python script`
import runpy
runpy.run_path(script, run_name="__main__")
"""

# The identity the launcher checks (and keys the venv link by): a zipapp PEX's sha256, or for a
# packed PEX directory the sha256 of its sorted `<path> <sha256>` lines, `__pycache__/` left out
# (`python3 app.pex` writes `app.pex/__pycache__/__main__.*.pyc`; the launcher never reads one).
# Defined once, as source: the launcher runs it on the device, `pex_identity` runs it here on the
# build's digests.
PEX_DIGEST_SOURCE = """\
def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
def tree_sha256(files):
    lines = sorted(f"{p} {sha}\\n" for p, sha in files if "__pycache__" not in p.split("/"))
    return hashlib.sha256("".join(lines).encode()).hexdigest()
def pex_digest(pex):
    if not os.path.isdir(pex):
        return file_sha256(pex)
    files = []
    for here, dirs, names in os.walk(pex):
        dirs[:] = [d for d in dirs if d != "__pycache__"]  # bytecode `python3 app.pex` wrote
        for name in names:
            path = os.path.join(here, name)
            files.append((os.path.relpath(path, pex), file_sha256(path)))
    return tree_sha256(files)
"""


def pex_identity(files: Mapping[str, str]) -> str:
    """What the launcher's `pex_digest` gives for the PEX whose files are `files` ({path under
    the PEX: sha256}; a zipapp is the one path "")."""
    if set(files) == {""}:
        return files[""]
    namespace: dict = {"hashlib": hashlib, "os": None}
    exec(PEX_DIGEST_SOURCE, namespace)
    return namespace["tree_sha256"](files.items())


_SCRIPT = """\
#!/bin/sh
# Runs {pex} of this bundle from pex's own venv of it (made under PEX_ROOT by its first run),
# starting the venv's interpreter directly: one interpreter start, no PEX bootstrap (see
# gpu_build/util_rules/bundle_launcher.py). Settings:
#   GPU_BUNDLE_PYTHON     the interpreter (default: python3)
#   GPU_BUNDLE_VENVS      where the link to the venv is kept
#                         (default: ${{XDG_CACHE_HOME:-~/.cache}}/gpu_bundle/venvs)
#   {init_env}  1: start CUDA (cuInit, device 0's primary context) in a thread
#                         before the app's first line; 0: leave it to the app (default: {init})
#   {prepare_env} 1: make (or find) the venv and compile its bytecode, then exit
#                         without running the app (what `pants experimental-deploy` does
#                         before it switches releases)
set -eu
bundle=$(cd "$(dirname "$0")" && pwd)
pex="$bundle/{pex}"
python="${{GPU_BUNDLE_PYTHON:-python3}}"
venvs="${{GPU_BUNDLE_VENVS:-${{XDG_CACHE_HOME:-$HOME/.cache}}/gpu_bundle/venvs}}"
venv="$venvs/{sha256}"
if [ ! -f "$venv/pex" ]; then
    status=0
    "$python" - "$pex" "$venv" {sha256} <<'INSTALL' || status=$?
import hashlib, os, subprocess, sys
pex, venv, want = sys.argv[1:4]
{pex_digest}
got = pex_digest(pex)
if got != want:
    print(f"error: {{pex}} has sha256 {{got}}, not {{want}} as this bundle was "
          "built: it is damaged or was altered. Copy the bundle again; "
          "`python3 -m gpu_runtime verify` on it names what differs.", file=sys.stderr)
    sys.exit({tampered})
env = {{k: v for k, v in os.environ.items() if k not in ("PEX_MODULE", "PEX_SCRIPT")}}
env["PEX_INTERPRETER"] = "1"
# no bytecode written into the bundle, none read from it (a packed PEX's __main__.py is run
# from the bundle directory; its identity above leaves __pycache__ out)
bytecode = "pycache_prefix=" + os.path.join(os.path.dirname(venv), ".pycache")
asked = subprocess.run([sys.executable, "-X", bytecode, pex, "-c", "import sys; print(sys.prefix)"],
                       env=env, check=True, stdout=subprocess.PIPE, text=True)
prefix = asked.stdout.strip().splitlines()[-1]
if not os.path.isfile(os.path.join(prefix, "pex")):
    sys.exit(f"{{pex}} did not run from a venv (its sys.prefix is {{prefix}})")
os.makedirs(os.path.dirname(venv), exist_ok=True)
link = f"{{venv}}.{{os.getpid()}}"
os.symlink(prefix, link)
os.replace(link, venv)
INSTALL
    if [ "$status" -eq {tampered} ]; then
        exit {tampered}
    fi
    if [ "$status" -ne 0 ]; then
        echo "warning: could not find or record the venv of $pex; running the PEX itself" >&2
        exec "$python" -X pycache_prefix="$venvs/.pycache" "$pex" "$@"
    fi
fi
if [ "${{{prepare_env}:-}}" = 1 ]; then
    # and the bytecode of every module, so that the first run imports without compiling, and
    # one import of what every bundle app loads (gpu_runtime, numpy, the driver bindings): what
    # a first import does once (shared libraries read, caches made) is done here
    "$venv/bin/python" -m compileall -q -j 0 "$venv/" >/dev/null 2>&1 || true
    "$venv/bin/python" -sE -c "import gpu_runtime, numpy, cuda.bindings.driver" \
        >/dev/null 2>&1 || true
    exit 0
fi
export PEX="$pex"
exec "$venv/bin/python" -sE -c '{boot}' "$venv/pex" "$@"
"""


def is_venv_mode(binary: Target) -> bool:
    """Whether the `pex_binary` runs from a venv (the only kind of PEX a launcher can start)."""
    return binary[PexExecutionModeField].value == PexExecutionMode.VENV.value


def launcher_name(pex_filename: str) -> str:
    """`app.pex` -> `app`: the launcher sits beside the PEX under the binary's name."""
    return pex_filename[: -len(".pex")] if pex_filename.endswith(".pex") else f"{pex_filename}.run"


def app_pex_filename(binary: Target) -> str:
    """`<binary target name>.pex`: the app PEX's name in the bundle's top directory."""
    return f"{binary.address.target_name}.pex"


def bundle_launcher(bundle: Address, binary: Target) -> str | None:
    """The launcher's name for the bundle's app, if it gets one; refused (before anything is
    built) when it would be the bundle's `cache/` directory."""
    if not is_venv_mode(binary):
        return None
    launcher = launcher_name(app_pex_filename(binary))
    if launcher == CACHE_DIR:
        raise DeployBundleError(
            f"The deploy_bundle {bundle} cannot have the pex_binary {binary.address} as its app: "
            f"a venv PEX gets a launcher named after its target, `{launcher}`, which is the "
            f"bundle's `{CACHE_DIR}/` directory of kernels. Rename the pex_binary (e.g. to "
            f"`app`)."
        )
    return launcher


def launcher_script(pex_filename: str, pex_sha256: str, init_cuda: bool = True) -> bytes:
    """The launcher of the PEX `pex_filename` (in the bundle's top directory) of this sha256;
    `init_cuda`: whether it starts CUDA before the app by default (see the module docstring)."""
    if len(pex_sha256) != 64 or any(c not in "0123456789abcdef" for c in pex_sha256):
        raise ValueError(f"not a sha256 hex digest: {pex_sha256!r}")
    if "/" in pex_filename or "'" in pex_filename or '"' in pex_filename:
        raise ValueError(f"not a plain PEX file name: {pex_filename!r}")
    default = "1" if init_cuda else "0"
    boot = _BOOT.format(
        env=INIT_CUDA_ENV, pid_env=INIT_CUDA_PID_ENV, thread=INIT_CUDA_THREAD, default=default
    )
    assert "'" not in boot, "the boot code sits in a single-quoted sh string"
    script = _SCRIPT.format(
        pex=pex_filename,
        sha256=pex_sha256,
        tampered=TAMPERED_EXIT,
        boot=boot,
        init_env=INIT_CUDA_ENV,
        prepare_env=PREPARE_ONLY_ENV,
        init=default,
        pex_digest=PEX_DIGEST_SOURCE.rstrip("\n"),
    )
    return script.encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
