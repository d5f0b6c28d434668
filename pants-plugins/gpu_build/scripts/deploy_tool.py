"""`pants experimental-deploy` on a `deploy_bundle`: ship only what changed, switch atomically.

Runs in the deploy process (standard library, the `ssh` and `sftp` binaries); the device needs
an OpenSSH server with sftp and `python3`. Steps, each one remote call:

1. read the device's current manifest (`<path>/current/cache/manifest.json`);
2. compare sha256: a file of the new bundle whose content the current release already holds (by
   hash, under any name) is copied there on the device; every other file is sent;
3. stage `<path>/releases/<id>.partial/` (the copies), send the rest with one sftp batch;
4. on the device, check every file's sha256 against the new bundle, rename the release into
   place, switch `current` with one rename, keep `previous` for rollback.

A transfer cut off anywhere before step 4's rename leaves `current` as it was; the next deploy
removes the stale `.partial` directory and starts again.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import zlib
from typing import Dict, List, Optional, Tuple

from gpu_spec.bundle_files import MANIFEST_PATH, SIGNATURE_PATH, bundle_file_digests
from gpu_spec.signature import (
    TRUSTED_KEYS_ENV,
    NotSignedError,
    SignatureFormatError,
    UntrustedKeyError,
    describe_keys,
    signature_policy,
)

DESTINATION_RE = re.compile(r"^(?:(?P<user>[^@:/\s]+)@)?(?P<host>[^@:/\s]+):(?P<path>/\S*)$")
REMOTE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "remote_release.py")


class DeployError(Exception):
    pass


def parse_destination(text: str) -> Tuple[str, str]:
    """("user@host" or "host", "/absolute/path") of `user@host:/path`."""
    m = DESTINATION_RE.match(text)
    if not m:
        raise DeployError(f"destination {text!r} is not `user@host:/absolute/path`")
    user = m.group("user")
    return (f"{user}@{m.group('host')}" if user else m.group("host")), m.group("path").rstrip("/")


def local_files(bundle: str) -> Dict[str, Tuple[str, int]]:
    """{path relative to the bundle: (sha256, size)} of every file of the bundle directory."""
    out = {}
    for dirpath, _, names in os.walk(bundle):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                data = f.read()
            rel = os.path.relpath(path, bundle).replace(os.sep, "/")
            out[rel] = (hashlib.sha256(data).hexdigest(), len(data))
    return dict(sorted(out.items()))


def listed_digests(manifest_text: str) -> Dict[str, str]:
    manifest = json.loads(manifest_text)
    return bundle_file_digests(manifest.get("files", {}), manifest.get("bundle_files", {}))


def check_local(bundle: str, files: Dict[str, Tuple[str, int]]) -> None:
    """The bundle to send must be whole: every file its manifest lists, with that sha256."""
    if MANIFEST_PATH not in files:
        raise DeployError(f"the bundle has no {MANIFEST_PATH}")
    with open(os.path.join(bundle, *MANIFEST_PATH.split("/"))) as f:
        listed = listed_digests(f.read())
    bad = [p for p, sha in listed.items() if files.get(p, ("", 0))[0] != sha]
    if bad:
        raise DeployError(f"the bundle does not match its manifest: {', '.join(bad)}")


# The program ssh runs on the device: gpu_spec's modules and remote_release, importable from
# memory, then one request. It parses on any Python, so that an old interpreter gets a clear line.
RUNNER = """
import sys, json
if sys.version_info < (3, 7):
    sys.stdout.write(json.dumps({"error": "python %%s on the device is too old (3.7 or newer "
        "needed): point `[gpu-bundle-deploy].remote_python` at a newer interpreter there"
        %% sys.version.split()[0]}) + "\\n")
    raise SystemExit(0)
import base64, importlib.abc, importlib.util, zlib
SOURCES = json.loads(zlib.decompress(base64.b64decode(%(sources)r)).decode())
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in SOURCES:
            return importlib.util.spec_from_loader(name, self, is_package=SOURCES[name][0])
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        source = SOURCES[module.__name__][1]
        exec(compile(source, "<deploy>/" + module.__name__, "exec"), module.__dict__)
sys.meta_path.insert(0, Finder())
try:
    import remote_release
    raise SystemExit(remote_release.main(json.loads(%(request)r)))
except Exception as e:
    why = "%%s: %%s" %% (type(e).__name__, " ".join(str(e).split()))
    sys.stdout.write(json.dumps({"error": "the device step crashed (%%s): this is a bug of the "
        "deploy tool; report it with this line" %% why}) + "\\n")
"""

MISSING_PYTHON_FIX = (
    "install Python 3 there, or point `[gpu-bundle-deploy].remote_python` "
    "(PANTS_GPU_BUNDLE_DEPLOY_REMOTE_PYTHON) at its interpreter"
)


def remote_sources() -> Dict[str, Tuple[bool, str]]:
    """{module: (is a package, source)} of remote_release and gpu_spec (tests excluded)."""
    import gpu_spec

    out = {}
    with open(REMOTE_SCRIPT) as f:
        out["remote_release"] = (False, f.read())
    root = os.path.dirname(os.path.abspath(gpu_spec.__file__))
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(names):
            if not name.endswith(".py") or name.endswith("_test.py") or name == "conftest.py":
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root)[: -len(".py")]
            parts = ["gpu_spec", *rel.split(os.sep)]
            is_pkg = parts[-1] == "__init__"
            module = ".".join(parts[:-1] if is_pkg else parts)
            with open(os.path.join(dirpath, name)) as f:
                out[module] = (is_pkg, f.read())
    return out


def last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


class Remote:
    def __init__(self, args: argparse.Namespace) -> None:
        self.host, self.base = parse_destination(args.destination)
        self.port = args.port
        common = ["-o", "BatchMode=yes", *sum((["-o", o] for o in args.ssh_option), [])]
        if args.identity:
            common += ["-i", args.identity]
        self.ssh = [args.ssh, "-p", str(args.port), *common, self.host]
        self.sftp = [args.sftp, "-q", "-P", str(args.port), *common, "-b", "-"]
        if args.limit_kbps:
            self.sftp[1:1] = ["-l", str(args.limit_kbps)]
        self.sftp.append(self.host)
        self.python = args.remote_python
        blob = json.dumps(remote_sources()).encode()
        self.sources = base64.b64encode(zlib.compress(blob, 9)).decode()

    def call(self, command: str, **request) -> dict:
        """The device step's answer; a DeployError of one line if it failed, for any reason."""
        req = json.dumps(dict(request, command=command, base=self.base))
        code = RUNNER % {"sources": self.sources, "request": req}
        proc = subprocess.run(
            [*self.ssh, self.python, "-"],
            input=code.encode(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        why = last_line(proc.stderr)
        if proc.returncode == 255:
            raise DeployError(
                f"ssh to {self.host} (port {self.port}) failed: {why}: check the destination, "
                "and `port`, `identity_file` and `ssh_options` of [gpu-bundle-deploy]"
            )
        if proc.returncode in (126, 127):
            what = "is not on the device" if proc.returncode == 127 else "cannot run there"
            raise DeployError(
                f"the interpreter `{self.python}` {what} (exit {proc.returncode}: {why}): "
                + MISSING_PYTHON_FIX
            )
        try:
            answer = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise DeployError(
                f"`{command}` on {self.host} gave no answer (exit {proc.returncode}: {why}): "
                f"check that `{self.python}` there is Python 3; " + MISSING_PYTHON_FIX
            ) from None
        if not isinstance(answer, dict):
            raise DeployError(f"`{command}` on {self.host} answered {answer!r}")
        if "error" in answer:
            raise DeployError(str(answer["error"]))
        return answer

    def put(self, local_root: str, remote_root: str, paths: List[str]) -> None:
        lines = [f'@put "{os.path.join(local_root, p)}" "{remote_root}/{p}"' for p in paths]
        proc = subprocess.run(
            self.sftp, input="\n".join(lines).encode() + b"\n", stderr=subprocess.PIPE
        )
        if proc.returncode != 0:
            raise SendError(f"sftp to {self.host} failed: {last_line(proc.stderr)}")


class SendError(DeployError):
    """sftp failed: the deploy asks the device whether its disk is full before saying why."""


def plan(
    files: Dict[str, Tuple[str, int]], current: Optional[Dict[str, str]]
) -> Tuple[Dict[str, Tuple[str, str]], List[str]]:
    """({new path: (current path, sha256)} to copy on the device, [paths to send])."""
    by_sha = {sha: path for path, sha in (current or {}).items()}
    copies = {p: (by_sha[sha], sha) for p, (sha, _) in files.items() if sha in by_sha}
    return copies, [p for p in files if p not in copies]


def current_digests(host: str, state: dict) -> Tuple[Optional[Dict[str, str]], Optional[str]]:
    """(the current release's listed files, a warning) from its manifest's text, if usable."""
    if not state["manifest"]:
        return None, None
    try:
        return listed_digests(state["manifest"]), None
    except (ValueError, AttributeError, TypeError) as e:
        return None, (
            f"the current release's manifest on {host} is unreadable ({e}): sending every file"
        )


def trust_refusal(bundle: str, keys: List[List[str]]) -> Optional[str]:
    """Why the device would refuse the bundle's signature (key ids only), before anything is sent.
    The device checks the staged bytes again, and the ed25519 signature where it can."""
    trusted = [bytes.fromhex(k) for k, _ in keys]
    sig_path = os.path.join(bundle, *SIGNATURE_PATH.split("/"))
    sig_raw = open(sig_path, "rb").read() if os.path.exists(sig_path) else None
    ids = f"{describe_keys(trusted)} (${TRUSTED_KEYS_ENV} on the device)"
    fix = (
        "sign the bundle with a key the device trusts (`[gpu-bundle-signing].key_file`), or "
        f"change the device's ${TRUSTED_KEYS_ENV}"
    )
    try:
        signature_policy(sig_raw, SIGNATURE_PATH, trusted)
    except NotSignedError:
        return (
            f"the bundle is not signed and the device trusts key {ids}: its runtime would "
            f"refuse it; {fix}"
        )
    except UntrustedKeyError as e:
        return (
            f"the bundle is signed by key {e.signature.key_id} and the device trusts only {ids}: "
            f"its runtime would refuse it; {fix}"
        )
    except SignatureFormatError as e:
        return f"{e}: re-run `pants package`"
    return None


def needed_bytes(files: Dict[str, Tuple[str, int]], block: int) -> int:
    """The disk space the new release takes on the device: every file, whole blocks."""
    return sum(-(-size // block) * block for _, size in files.values())


def warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


def deploy(args: argparse.Namespace) -> int:
    files = local_files(args.bundle)
    check_local(args.bundle, files)
    remote = Remote(args)
    state = remote.call("state")
    where = f"{remote.host}:{remote.base}"
    if state["foreign"]:
        warn(
            f"left alone in {where}/releases/ (not made by deploys: remove them yourself if "
            f"unneeded): {', '.join(state['foreign'])}"
        )
    refusal = trust_refusal(args.bundle, state["keys"])
    if refusal:
        raise DeployError(f"{refusal}; nothing was sent, `current` is unchanged")
    needed = needed_bytes(files, state["block"])
    if state["free"] < needed:
        raise DeployError(
            f"the device's disk is full at {remote.base}: the new release needs {needed} bytes "
            f"and only {state['free']} are free: free at least {needed - state['free']} bytes "
            "there (e.g. old releases or other files) and deploy again; nothing was sent"
        )
    current, problem = current_digests(remote.host, state)
    if problem:
        warn(problem)
    copies, send = plan(files, current)
    manifest_sha = files[MANIFEST_PATH][0]
    release = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + manifest_sha[:12]
    dirs = sorted({os.path.dirname(p) for p in files if "/" in p})
    staged = remote.call("stage", release=release, dirs=dirs, copies=copies, needed=needed)
    try:
        if staged["resend"]:
            warn(
                f"{len(staged['resend'])} files of the current release on the device no longer "
                f"match its manifest; sending them again: {', '.join(staged['resend'])}"
            )
        send = sorted(set(send) | set(staged["resend"]))
        reused = len(files) - len(send)
        sent_bytes = sum(files[p][1] for p in send)
        print(
            f"Sending {len(send)} of {len(files)} files ({sent_bytes} bytes) to "
            f"{where}/releases/{release}; {reused} unchanged "
            f"(copied on the device from {state['current'] or 'nothing'})",
            flush=True,
        )
        try:
            remote.put(args.bundle, staged["partial"], send)
        except SendError as e:
            free = remote.call("abort", release=release)["free"]
            if free < sent_bytes:
                raise DeployError(
                    f"the device's disk at {remote.base} filled up while sending ({e}): "
                    f"{free} bytes were left; the new release needs {needed} bytes: free that "
                    "much there (e.g. old releases or other files) and deploy again"
                ) from None
            raise
        done = remote.call(
            "finish", release=release, needed=needed, files={p: s for p, (s, _) in files.items()}
        )
    except BaseException:
        try:
            remote.call("abort", release=release)
        except DeployError as e:
            warn(f"could not remove the staged release {release} on the device: {e}")
        raise
    if done.get("problems"):
        remote.call("abort", release=release)
        raise DeployError(
            "the staged release does not match the bundle (removed it; `current` is unchanged): "
            + "; ".join(done["problems"])
        )
    for line in done["warnings"]:
        warn(line)
    for name, seconds in sorted(done.get("prepared", {}).items()):
        print(
            f"Prepared {name} on the device in {seconds} s (its venv, made before the switch: "
            f"the release's first run starts warm)",
            flush=True,
        )
    print(
        f"Sent {len(send)} files, {sent_bytes} bytes. {remote.base}/current -> releases/{release}"
        f" (verified: {len(files)} files; {done['trust']}); previous: "
        f"{done['previous'] or 'none'}",
        flush=True,
    )
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="deploy_tool", description=__doc__.split("\n")[0])
    p.add_argument("--bundle", required=True, help="the bundle directory to deploy")
    p.add_argument("--destination", required=True, help="user@host:/absolute/path")
    p.add_argument("--port", type=int, default=22)
    p.add_argument("--identity", default=None, help="ssh private key file")
    p.add_argument("--ssh-option", action="append", default=[], help="an ssh -o option")
    p.add_argument("--remote-python", default="python3")
    p.add_argument("--limit-kbps", type=int, default=0, help="sftp bandwidth limit, Kbit/s")
    p.add_argument("--ssh", default="ssh")
    p.add_argument("--sftp", default="sftp")
    args = p.parse_args(argv)
    try:
        return deploy(args)
    except DeployError as e:
        print(f"Deploy of {args.bundle} to {args.destination} failed: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
