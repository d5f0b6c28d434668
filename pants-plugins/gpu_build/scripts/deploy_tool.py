"""`pants experimental-deploy` on a `deploy_bundle`: ship only what changed, switch atomically.

Runs in the deploy process (standard library, the `ssh` and `sftp` binaries); the device needs
an OpenSSH server with sftp and `python3` (3.8 or newer). Steps, each one remote call, all while
one more ssh session holds the destination's deploy lock (`<path>/.deploy.lock`: one deploy at a
time per destination; another one waits `--lock-wait` seconds, then refuses naming this one):

1. read the device's current manifest (`<path>/current/cache/manifest.json`); if `current`
   already holds this very bundle (every file, by sha256), stop there: nothing is sent or
   switched, and `previous` stays the real rollback target;
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
import contextlib
import errno
import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any, Dict, Iterator, List, Optional, Tuple

from gpu_spec.bundle_files import MANIFEST_PATH, SIGNATURE_PATH, bundle_file_digests
from gpu_spec.safe_read import (
    MAX_MANIFEST_BYTES,
    MAX_SIGNATURE_BYTES,
    FileReadError,
    loads_json,
    read_regular_file,
    sha256_of_open,
)
from gpu_spec.signature import (
    SIGN_FIX,
    TRUSTED_KEYS_ENV,
    NotSignedError,
    SignatureFormatError,
    UntrustedKeyError,
    describe_keys,
    not_signed_reason,
    signature_policy,
    untrusted_key_reason,
)

DESTINATION_RE = re.compile(r"^(?:(?P<user>[^@:/\s]+)@)?(?P<host>[^@:/\s]+):(?P<path>/\S*)$")
# What sftp's batch language cannot carry in a quoted path: `"` and `\` have a meaning there,
# and `*?[]` glob the local path of a `put` (matching other files, or none); control characters
# end the line. Such a path would be cut after the deploy had made directories, so a destination
# or a bundle file name with one is refused before anything is created.
SFTP_UNSAFE = frozenset('"\\*?[]' + "".join(map(chr, range(32))) + "\x7f")
LOCK_WAIT_S = 600  # a deploy of a 279 MiB toolchain PEX over a slow link, then its prepare
REMOTE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "remote_release.py")


class DeployError(Exception):
    pass


def parse_destination(text: str) -> Tuple[str, str]:
    """("user@host" or "host", "/absolute/path") of `user@host:/path`."""
    m = DESTINATION_RE.match(text)
    if not m:
        raise DeployError(f"destination {text!r} is not `user@host:/absolute/path`")
    user = m.group("user")
    path = m.group("path").rstrip("/")
    odd = unsafe_chars(path)
    if odd:
        raise DeployError(
            f"destination {text!r}: {odd} not allowed in a destination path (sftp's batch "
            'language would cut it there): choose a path without `"`, `\\`, `*?[]`'
        )
    return (f"{user}@{m.group('host')}" if user else m.group("host")), path


def unsafe_chars(path: str) -> str:
    """The characters of `path` that an sftp batch line cannot carry as they are, named."""
    return ", ".join(repr(c) for c in sorted(set(path) & SFTP_UNSAFE))


def release_id(manifest_sha: str) -> str:
    """`<UTC time>-<12 hex of the manifest's sha256>`: remote_release.RELEASE_RE's form, the only
    names under `releases/` a deploy ever removes."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + manifest_sha[:12]


def _sha256_regular(path: str, rel: str) -> Tuple[str, int]:
    """(sha256, size) of a regular file, opened so that nothing else is read: O_NOFOLLOW (a
    symlink is refused, not followed to what it names), O_NONBLOCK (a FIFO does not hang the
    deploy), then fstat: S_ISREG only."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise DeployError(
                f"{rel} in the bundle is a symlink: a deploy sends regular files only; "
                "replace it with the file itself, or remove it, and deploy again"
            ) from None
        raise DeployError(f"cannot read {rel} of the bundle: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise DeployError(
                f"{rel} in the bundle is a {describe_mode(mode)}, not a regular file: a deploy "
                "sends regular files only; remove it and deploy again"
            )
        return sha256_of_open(f)


def describe_mode(mode: int) -> str:
    for test, what in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISDIR, "directory"),
    ):
        if test(mode):
            return what
    return f"special file (mode {mode:o})"


def local_files(bundle: str) -> Dict[str, Tuple[str, int]]:
    """{path relative to the bundle: (sha256, size)} of every file of the bundle directory:
    regular files only (a symlink, to a file or a directory, a FIFO or a device is refused,
    naming it), with names sftp's batch language carries as they are."""
    out = {}
    for dirpath, dirnames, names in os.walk(bundle):
        for name in sorted(dirnames) + sorted(names):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, bundle).replace(os.sep, "/")
            odd = unsafe_chars(rel)
            if odd:
                raise DeployError(
                    f"{rel} in the bundle: {odd} not allowed in a deployed file's name (sftp's "
                    "batch language would cut it): rename it and deploy again"
                )
            if name in dirnames:
                if os.path.islink(path):  # os.walk lists it, and would not go in
                    _sha256_regular(path, rel)  # refuses it, naming it
                continue
            out[rel] = _sha256_regular(path, rel)
    return dict(sorted(out.items()))


def listed_digests(manifest_text: str, origin: str = "manifest") -> Dict[str, str]:
    """The manifest's {bundle path: sha256}; FileReadError (a ValueError) if it nests too deep
    (gpu_spec.safe_read: never a RecursionError), ValueError if it is not JSON."""
    manifest = loads_json(manifest_text, origin)
    return bundle_file_digests(manifest.get("files", {}), manifest.get("bundle_files", {}))


def check_local(bundle: str, files: Dict[str, Tuple[str, int]]) -> None:
    """The bundle to send must be whole: every file its manifest lists, with that sha256."""
    if MANIFEST_PATH not in files:
        raise DeployError(f"the bundle has no {MANIFEST_PATH}")
    path = os.path.join(bundle, *MANIFEST_PATH.split("/"))
    try:  # a regular file of sane size and nesting (gpu_spec.safe_read)
        listed = listed_digests(
            read_regular_file(path, MAX_MANIFEST_BYTES, "bundle manifest").decode(), path
        )
    except FileReadError as e:  # a FIFO, too big, nested too deep
        raise DeployError(f"{e} (re-run `pants package`)") from None
    except OSError as e:
        raise DeployError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        why = " ".join(str(e).split())
        raise DeployError(f"{path} is not JSON ({why}): re-run `pants package`") from None
    except (AttributeError, TypeError) as e:
        raise DeployError(
            f"{path} is not a bundle manifest ({e}): re-run `pants package`"
        ) from None
    bad = [p for p, sha in listed.items() if files.get(p, ("", 0))[0] != sha]
    if bad:
        raise DeployError(f"the bundle does not match its manifest: {', '.join(bad)}")


# The program ssh runs on the device: gpu_spec's modules and remote_release, importable from
# memory, then one request. It parses on any Python, so that an old interpreter gets a clear line.
RUNNER = """
import sys, json
if sys.version_info < (3, 8):
    sys.stdout.write(json.dumps({"error": "python %%s on the device is too old (3.8 or newer "
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

# What ssh runs for a step that keeps stdin open (the lock): its program on the first line.
READ_PROGRAM = "import sys; exec(sys.stdin.read(int(sys.stdin.readline())))"

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
    for path in gpu_spec.module_paths():
        parts = ["gpu_spec", *path[: -len(".py")].split("/")]
        is_pkg = parts[-1] == "__init__"
        with open(os.path.join(root, *path.split("/"))) as f:
            out[".".join(parts[:-1] if is_pkg else parts)] = (is_pkg, f.read())
    return out


# A Unix socket's path holds at most 107 bytes (108 with its NUL); ssh appends a suffix of its own
# while it sets the socket up.
_MAX_CONTROL_PATH = 80


def control_path() -> Optional[str]:
    """A path for ssh's control socket in a new private directory, or None (no multiplexing)
    where even /tmp's is too long for a socket."""
    for parent in (None, "/tmp"):
        directory = tempfile.mkdtemp(prefix="gpu-deploy-", dir=parent)
        path = os.path.join(directory, "ssh")
        if len(path) <= _MAX_CONTROL_PATH:
            return path
        os.rmdir(directory)
    return None


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
        self._ssh = [args.ssh, "-p", str(args.port), *common]
        self._sftp = [args.sftp, "-q", "-P", str(args.port), *common, "-b", "-"]
        if args.limit_kbps:
            self._sftp[1:1] = ["-l", str(args.limit_kbps)]
        # While the lock is held, its ssh session is the connection's master: every other step
        # is a session multiplexed on it (no new TCP connection, key exchange or login: ~0.2 s
        # each on 127.0.0.1, a round trip or more on a real link). Where the master's socket is
        # missing, ssh makes a connection of its own, as before.
        self._shared: List[str] = []
        self.python = args.remote_python
        blob = json.dumps(remote_sources()).encode()
        self.sources = base64.b64encode(zlib.compress(blob, 9)).decode()

    def ssh(self, *options: str) -> List[str]:
        return [*self._ssh, *self._shared, *options, self.host]

    def sftp(self) -> List[str]:
        return [*self._sftp, *self._shared, self.host]

    def program(self, command: str, request: dict) -> str:
        req = json.dumps(dict(request, command=command, base=self.base))
        return RUNNER % {"sources": self.sources, "request": req}

    def call(self, command: str, **request) -> dict:
        """The device step's answer; a DeployError of one line if it failed, for any reason."""
        proc = subprocess.run(
            [*self.ssh(), self.python, "-"],
            input=self.program(command, request).encode(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        return self.answer(command, proc.returncode, proc.stdout, proc.stderr)

    @contextlib.contextmanager
    def lock(self, wait: float) -> Iterator[None]:
        """The destination's deploy lock (remote_release.lock), held by one ssh session for as
        long as the block runs: its program reads itself from the first line of stdin (`python
        -` would read stdin to its end first), then holds the lock until stdin is closed here.
        If this process dies, ssh's session ends and the device lets the lock go."""
        code = self.program(
            "lock", {"wait": wait, "tool_pid": os.getpid(), "tool_host": socket.gethostname()}
        )
        control = control_path()
        socket_option = ["-o", f"ControlPath={control}"] if control else []
        master = ["-o", "ControlMaster=yes", "-o", "ControlPersist=no"] if control else []
        proc = subprocess.Popen(
            [*self.ssh(*master, *socket_option), self.python, "-c", shlex.quote(READ_PROGRAM)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(f"{len(code)}\n{code}".encode())
            proc.stdin.flush()
            first = proc.stdout.readline()
            if not first.strip():  # no answer: it ended; why, as for any other step
                _, err = proc.communicate()
                self.answer("lock", proc.returncode, first, err)
            self.answer("lock", 0, first, b"")
            if control:
                self._shared = ["-o", "ControlMaster=no", *socket_option]
            yield
        finally:
            self._shared = []
            with contextlib.suppress(OSError):
                proc.stdin.close()  # the device removes the lock file and lets go
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            if proc.stderr:
                proc.stderr.close()
            if control:
                shutil.rmtree(os.path.dirname(control), ignore_errors=True)

    def answer(self, command: str, returncode: int, stdout: bytes, stderr: bytes) -> dict:
        """The JSON answer of a device step's output, or a DeployError of one line saying why
        there is none."""
        why = last_line(stderr)
        if returncode == 255:
            raise DeployError(
                f"ssh to {self.host} (port {self.port}) failed: {why}: check the destination, "
                "and `port`, `identity_file` and `ssh_options` of [gpu-bundle-deploy]"
            )
        if returncode in (126, 127):
            what = "is not on the device" if returncode == 127 else "cannot run there"
            raise DeployError(
                f"the interpreter `{self.python}` {what} (exit {returncode}: {why}): "
                + MISSING_PYTHON_FIX
            )
        try:
            answer = json.loads(stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise DeployError(
                f"`{command}` on {self.host} gave no answer (exit {returncode}: {why}): "
                f"check that `{self.python}` there is Python 3; " + MISSING_PYTHON_FIX
            ) from None
        if not isinstance(answer, dict):
            raise DeployError(f"`{command}` on {self.host} answered {answer!r}")
        if "error" in answer:
            raise DeployError(str(answer["error"]))
        if command == "lock" and "locked" not in answer:
            raise DeployError(f"`lock` on {self.host} answered {answer!r}")
        return answer

    def put(self, local_root: str, remote_root: str, paths: List[str]) -> None:
        lines = [f'@put "{os.path.join(local_root, p)}" "{remote_root}/{p}"' for p in paths]
        proc = subprocess.run(
            self.sftp(), input="\n".join(lines).encode() + b"\n", stderr=subprocess.PIPE
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
        return listed_digests(state["manifest"], f"{host}: current/{MANIFEST_PATH}"), None
    except (ValueError, AttributeError, TypeError) as e:  # FileReadError: nested too deep
        return None, (
            f"the current release's manifest on {host} is unreadable ({e}): sending every file"
        )


def trust_refusal(bundle: str, keys: List[List[str]]) -> Optional[str]:
    """Why the device would refuse the bundle's signature (key ids only), before anything is sent.
    The device checks the staged bytes again, and the ed25519 signature where it can."""
    trusted = [bytes.fromhex(k) for k, _ in keys]
    sig_path = os.path.join(bundle, *SIGNATURE_PATH.split("/"))
    try:  # a regular file of sane size (gpu_spec.safe_read): a FIFO must not hang the deploy
        sig_raw: Optional[bytes] = read_regular_file(sig_path, MAX_SIGNATURE_BYTES, "signature")
    except FileNotFoundError:
        sig_raw = None
    except FileReadError as e:
        return f"{e} (re-run `pants package`)"
    except OSError as e:
        return f"cannot read {sig_path}: {e.strerror or e}"
    ids = f"{describe_keys(trusted)} (${TRUSTED_KEYS_ENV} on the device)"
    try:
        signature_policy(sig_raw, SIGNATURE_PATH, trusted)
    except NotSignedError:
        reason = not_signed_reason("the device", ids)
        return f"the bundle {reason}: its runtime would refuse it; {SIGN_FIX}"
    except UntrustedKeyError as e:
        reason = untrusted_key_reason(e.signature.key_id, "the device", ids)
        return f"the bundle {reason}: its runtime would refuse it; {SIGN_FIX}"
    except SignatureFormatError as e:
        return f"{e}: re-run `pants package`"
    return None


def needed_bytes(files: Dict[str, Tuple[str, int]], block: int) -> int:
    """The disk space the new release takes on the device: every file, whole blocks."""
    return sum(-(-size // block) * block for _, size in files.values())


def warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


def deploy(args: argparse.Namespace, report: Dict[str, Any]) -> int:
    """The deploy (or with `--check` its plan, or with `--rollback` the switch back); what it did
    goes into `report` as it goes (the fleet deploy's per-device record, `--report`)."""
    odd = unsafe_chars(os.path.abspath(args.bundle))
    if odd:
        raise DeployError(
            f"the bundle's path: {odd} not allowed there (sftp's batch language would cut it): "
            "move the bundle"
        )
    files = local_files(args.bundle)
    check_local(args.bundle, files)
    remote = Remote(args)
    with remote.lock(args.lock_wait):
        if args.rollback:
            done = remote.call("rollback", release=args.rollback)
            report.update(outcome="rolled back", release=os.path.basename(done["current"]))
            print(
                f"Rolled back {remote.host}:{remote.base}/current -> {done['current']} "
                f"({args.rollback} failed; kept in releases/)",
                flush=True,
            )
            return 0
        return deploy_locked(args, remote, files, report)


def deploy_locked(
    args: argparse.Namespace,
    remote: Remote,
    files: Dict[str, Tuple[str, int]],
    report: Dict[str, Any],
) -> int:
    """The deploy, while this tool holds the destination's lock (no other deploy runs there)."""
    state = remote.call("state", files={p: s for p, (s, _) in files.items()})
    release = release_id(files[MANIFEST_PATH][0])
    report.update(files_total=len(files), previous=state["previous"], before=state["current"])
    where = f"{remote.host}:{remote.base}"
    if state["foreign"]:
        warn(
            f"left alone in {where}/releases/ (not made by deploys: remove them yourself if "
            f"unneeded): {', '.join(state['foreign'])}"
        )
    refusal = trust_refusal(args.bundle, state["keys"])
    if refusal:
        raise DeployError(f"{refusal}; nothing was sent, `current` is unchanged")
    if state["same"]:
        report.update(outcome="unchanged", release=os.path.basename(state["current"]))
        print(
            f"Nothing to deploy: {where}/current ({state['current']}) already holds this bundle "
            f"(all {len(files)} files, sha256 checked on the device); nothing sent, nothing "
            f"switched; previous: {state['previous'] or 'none'} (kept)",
            flush=True,
        )
        return 0
    needed = needed_bytes(files, state["block"])
    if state["free"] < needed:
        raise DeployError(
            f"the device's disk is full at {remote.base}: the new release needs {needed} bytes "
            f"and only {state['free']} are free: free at least {needed - state['free']} bytes "
            "there (e.g. old releases or other files) and deploy again; nothing was sent"
        )
    if args.check:
        _, send = plan(files, current_digests(remote.host, state)[0])
        sent_bytes = sum(files[p][1] for p in send)
        report.update(outcome="would switch", release=release, files_sent=len(send))
        report.update(bytes_sent=sent_bytes)
        print(
            f"Check only: would send {len(send)} of {len(files)} files ({sent_bytes} bytes) to "
            f"{where}/releases/{release} and switch `current` to it; nothing sent",
            flush=True,
        )
        return 0
    send, done = stage_and_send(args, remote, files, state, release, needed)
    report.update(
        outcome="switched",
        release=release,
        previous=done["previous"],
        files_sent=len(send),
        bytes_sent=sum(files[p][1] for p in send),
        prepare_s=round(sum(done.get("prepared", {}).values()), 2),
    )
    report_switch(remote, files, release, send, done)
    return 0


def stage_and_send(
    args: argparse.Namespace,
    remote: Remote,
    files: Dict[str, Tuple[str, int]],
    state: Dict[str, Any],
    release: str,
    needed: int,
) -> Tuple[List[str], Dict[str, Any]]:
    """(the files sent, `finish`'s answer): the release staged beside `current` from what the
    device already has, the rest sent, then checked and switched to on the device. Any failure
    removes the staged release; `current` is then unchanged."""
    current, problem = current_digests(remote.host, state)
    if problem:
        warn(problem)
    copies, send = plan(files, current)
    dirs = sorted({os.path.dirname(p) for p in files if "/" in p})
    staged = remote.call("stage", release=release, dirs=dirs, copies=copies, needed=needed)
    try:
        if staged["resend"]:
            warn(
                f"{len(staged['resend'])} files of the current release on the device no longer "
                f"match its manifest; sending them again: {', '.join(staged['resend'])}"
            )
        send = sorted(set(send) | set(staged["resend"]))
        sent_bytes = sum(files[p][1] for p in send)
        print(
            f"Sending {len(send)} of {len(files)} files ({sent_bytes} bytes) to "
            f"{remote.host}:{remote.base}/releases/{release}; {len(files) - len(send)} "
            f"unchanged (copied on the device from {state['current'] or 'nothing'})",
            flush=True,
        )
        send_staged(args, remote, staged["partial"], send, release, sent_bytes, needed)
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
    return send, done


def send_staged(
    args: argparse.Namespace,
    remote: Remote,
    partial: str,
    send: List[str],
    release: str,
    sent_bytes: int,
    needed: int,
) -> None:
    """Sends `send` into the staged release; a disk that fills up meanwhile is named as such."""
    try:
        remote.put(args.bundle, partial, send)
    except SendError as e:
        free = remote.call("abort", release=release)["free"]
        if free < sent_bytes:
            raise DeployError(
                f"the device's disk at {remote.base} filled up while sending ({e}): "
                f"{free} bytes were left; the new release needs {needed} bytes: free that "
                "much there (e.g. old releases or other files) and deploy again"
            ) from None
        raise


def report_switch(
    remote: Remote,
    files: Dict[str, Tuple[str, int]],
    release: str,
    send: List[str],
    done: Dict[str, Any],
) -> None:
    for line in done["warnings"]:
        warn(line)
    for name, seconds in sorted(done.get("prepared", {}).items()):
        print(
            f"Prepared {name} on the device in {seconds} s (its venv, made before the switch: "
            f"the release's first run starts warm)",
            flush=True,
        )
    sent_bytes = sum(files[p][1] for p in send)
    print(
        f"Sent {len(send)} files, {sent_bytes} bytes. {remote.base}/current -> releases/{release}"
        f" (verified: {len(files)} files; {done['trust']}); previous: "
        f"{done['previous'] or 'none'}",
        flush=True,
    )


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="deploy_tool", description=__doc__.split("\n")[0])
    p.add_argument("--bundle", required=True, help="the bundle directory to deploy")
    p.add_argument("--destination", required=True, help="user@host:/absolute/path")
    p.add_argument("--port", type=int, default=22)
    p.add_argument("--identity", default=None, help="ssh private key file")
    p.add_argument("--ssh-option", action="append", default=[], help="an ssh -o option")
    p.add_argument("--remote-python", default="python3")
    p.add_argument("--limit-kbps", type=int, default=0, help="sftp bandwidth limit, Kbit/s")
    p.add_argument(
        "--lock-wait",
        type=float,
        default=LOCK_WAIT_S,
        help="seconds to wait for another deploy to the destination to finish",
    )
    p.add_argument("--ssh", default="ssh")
    p.add_argument("--sftp", default="sftp")
    p.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="say what would be sent; change nothing",
    )
    p.add_argument(
        "--rollback",
        metavar="RELEASE",
        help="point `current` back at `previous` if it is still RELEASE (a failed health check)",
    )
    p.add_argument("--report", help="write what was done as JSON to this file")
    args = p.parse_args(argv)
    report: Dict[str, Any] = {"destination": args.destination, "files_sent": 0, "bytes_sent": 0}
    try:
        return deploy(args, report)
    except DeployError as e:
        report.update(outcome="failed", error=str(e))
        print(f"Deploy of {args.bundle} to {args.destination} failed: {e}", file=sys.stderr)
        return 1
    finally:
        if args.report:
            write_report(args.report, report)


def write_report(path: str, report: Dict[str, Any]) -> None:
    """`report` as JSON at `path`, put in place by a rename (a reader never sees half of it)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, sort_keys=True)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
