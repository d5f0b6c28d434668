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
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

from gpu_spec.bundle_files import MANIFEST_PATH, bundle_file_digests

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


class Remote:
    def __init__(self, args: argparse.Namespace) -> None:
        self.host, self.base = parse_destination(args.destination)
        common = ["-o", "BatchMode=yes", *sum((["-o", o] for o in args.ssh_option), [])]
        if args.identity:
            common += ["-i", args.identity]
        self.ssh = [args.ssh, "-p", str(args.port), *common, self.host]
        self.sftp = [args.sftp, "-q", "-P", str(args.port), *common, "-b", "-"]
        if args.limit_kbps:
            self.sftp[1:1] = ["-l", str(args.limit_kbps)]
        self.sftp.append(self.host)
        self.python = args.remote_python
        with open(REMOTE_SCRIPT) as f:
            self.script = f.read()

    def call(self, command: str, **request) -> dict:
        req = dict(request, command=command, base=self.base)
        code = f"{self.script}\nraise SystemExit(main(json.loads({json.dumps(req)!r})))\n"
        proc = subprocess.run(
            [*self.ssh, self.python, "-"], input=code.encode(), stdout=subprocess.PIPE
        )
        if proc.returncode != 0:
            raise DeployError(f"`{command}` on {self.host} failed (exit {proc.returncode})")
        return json.loads(proc.stdout.decode().strip().splitlines()[-1])

    def put(self, local_root: str, remote_root: str, paths: List[str]) -> None:
        lines = [f'@put "{os.path.join(local_root, p)}" "{remote_root}/{p}"' for p in paths]
        proc = subprocess.run(self.sftp, input="\n".join(lines).encode() + b"\n")
        if proc.returncode != 0:
            raise DeployError(f"sftp to {self.host} failed (exit {proc.returncode})")


def plan(
    files: Dict[str, Tuple[str, int]], current: Optional[Dict[str, str]]
) -> Tuple[Dict[str, str], List[str]]:
    """({new path: current path} to copy on the device, [paths to send])."""
    by_sha = {sha: path for path, sha in (current or {}).items()}
    copies = {p: by_sha[sha] for p, (sha, _) in files.items() if sha in by_sha}
    return copies, [p for p in files if p not in copies]


def deploy(args: argparse.Namespace) -> int:
    files = local_files(args.bundle)
    check_local(args.bundle, files)
    remote = Remote(args)
    state = remote.call("state", manifest=MANIFEST_PATH)
    current = listed_digests(state["manifest"]) if state["manifest"] else None
    copies, send = plan(files, current)
    manifest_sha = files[MANIFEST_PATH][0]
    release = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + manifest_sha[:12]
    dirs = sorted({os.path.dirname(p) for p in files if "/" in p})
    staged = remote.call("stage", release=release, dirs=dirs, copies=copies)
    sent_bytes = sum(files[p][1] for p in send)
    print(
        f"Sending {len(send)} of {len(files)} files ({sent_bytes} bytes) to "
        f"{remote.host}:{remote.base}/releases/{release}; {len(copies)} unchanged "
        f"(copied on the device from {state['current'] or 'nothing'})",
        flush=True,
    )
    remote.put(args.bundle, staged["partial"], send)
    done = remote.call("finish", release=release, files={p: s for p, (s, _) in files.items()})
    if done.get("problems"):
        raise DeployError(
            "the staged release does not match the bundle; `current` is unchanged:\n  "
            + "\n  ".join(done["problems"])
        )
    print(
        f"Sent {len(send)} files, {sent_bytes} bytes. {remote.base}/current -> releases/{release}"
        f" (verified: {len(files)} files); previous: {done['previous'] or 'none'}",
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
