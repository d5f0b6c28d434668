"""The device side of `pants experimental-deploy`: run over ssh, standard library and gpu_spec.

The deploy tool sends this module and gpu_spec's sources in one `python3 -` program with one
request (`deploy_tool.Remote.program`). Commands, each answering one JSON line; a failure is
{"error": "<one line: the cause and the fix>"}, never a traceback:

- lock:   `<base>/.deploy.lock` taken (fcntl.flock) and held until the deploy tool closes this
          program's stdin: one deploy at a time per destination; a second one waits a bounded
          time, then refuses naming the first (its pid, host and start);
- state:  the layout checked (`current`/`previous` must be symlinks, or absent), which release
          `current` points at and its manifest's text, the free bytes at `<base>`, the trusted
          keys of the device, what under `releases/` this tool did not make (left alone), and
          whether `current` already holds the new bundle, every file (a redeploy is then a
          no-op that keeps `previous`);
- stage:  a fresh `releases/<id>.partial/` with the directories the bundle needs, holding a copy
          of every unchanged file from the current release whose sha256 still matches (a file
          that went bad on the device is named for sending instead); this tool's own stale
          `.partial` directories of cut-off deploys are removed first;
- finish: the sha256 of every file of the staged release checked against the new bundle's,
          nothing extra allowed, and its manifest checked against the device's trust policy
          (`gpu_spec.signature.signature_policy`, as gpu_runtime loads it; the ed25519 signature
          itself with `gpu_spec.ed25519`, so no `cryptography` is needed there); then `.partial`
          renamed to `releases/<id>`, `current` switched to it with one rename of a new symlink
          (atomic), `previous` pointed at the release it replaced (for rollback), and this tool's
          older releases removed;
- abort:  the free bytes (before anything is removed), then this deploy's `.partial` removed.

What this tool made is recorded in `<base>/.deploy-releases.json` (written by rename): only the
names listed there are ever removed; anything else under `releases/` is left alone and named.
The ledger is data, not paths: each name must be a release id of this tool (RELEASE_RE), so no
entry can name `current`'s target by `.`, the destination by `..`, or anything outside it; a
damaged ledger is refused, in one line, before anything is written or removed.
Until `finish` renames the link, `current`, `previous` and what they point at are not touched.

Every file it reads (the ledger, a manifest, a signature, a file of `current` it copies or
hashes) is opened by gpu_spec.safe_read: regular files only (a FIFO there would block the step
forever), within a size limit, JSON within a nesting limit; a file it cannot read is named as
such ("cannot read <path>"), never as one it cannot write.

Runs on the device's own python3, 3.8 or newer (deploy_tool's RUNNER checks that first).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

from gpu_spec.bundle_files import MANIFEST_PATH, SIGNATURE_PATH
from gpu_spec.ed25519 import verify as verify_ed25519
from gpu_spec.launcher_env import PREPARE_ONLY_ENV, TAMPERED_EXIT
from gpu_spec.safe_read import (
    MAX_MANIFEST_BYTES,
    MAX_SIGNATURE_BYTES,
    FileReadError,
    loads_json,
    open_regular,
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
    trusted_keys_from_env,
    untrusted_key_reason,
)

RELEASES = "releases"
PARTIAL = ".partial"
LEDGER = ".deploy-releases.json"
LOCK = ".deploy.lock"
LINKS = ("current", "previous")


class ReleaseError(Exception):
    """One line for the user: what is wrong on the device, and how to fix it."""


def cannot_read(path: str, e: OSError) -> ReleaseError:
    """The one wording of a file on the device that the deploy user cannot read."""
    return ReleaseError(
        f"cannot read {path} on the device: {e.strerror or e}: give the deploy user read "
        "access to it (or remove it) and deploy again"
    )


def _open_read(path: str, what: str):  # -> BinaryIO
    """`path` opened for reading if it is a regular file (gpu_spec.safe_read: a FIFO does not
    block); FileReadError for anything else, FileNotFoundError/NotADirectoryError as they are,
    ReleaseError ("cannot read") for any other OSError."""
    try:
        return open_regular(path, what)
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError as e:
        raise cannot_read(path, e) from None


def _read(path: str, limit: int, what: str) -> bytes:
    """The bytes of the regular file `path` (at most `limit`), as `_open_read` opens it."""
    try:
        return read_regular_file(path, limit, what)
    except (FileNotFoundError, NotADirectoryError, FileReadError):
        raise
    except OSError as e:
        raise cannot_read(path, e) from None


def _sha256(path: str) -> str:
    with _open_read(path, "release file") as f:
        try:
            return sha256_of_open(f)[0]
        except OSError as e:
            raise cannot_read(path, e) from None


def _copy_checked(src: str, dst: str, expected: str) -> bool:
    """Copies src to dst (mode and times too) hashing what it read; False, and no dst, if the
    bytes are not `expected` or src is gone or not a regular file (it is sent instead).
    ReleaseError ("cannot read src") if src is there but unreadable."""
    h = hashlib.sha256()
    digest: Optional[str] = None
    try:
        fin = _open_read(src, "file of the current release")
    except (FileNotFoundError, NotADirectoryError, FileReadError):
        fin = None
    if fin is not None:
        with fin, open(dst, "wb") as fout:
            while True:
                try:
                    block = fin.read(1 << 20)
                except OSError as e:
                    raise cannot_read(src, e) from None
                if not block:
                    break
                h.update(block)
                fout.write(block)
        digest = h.hexdigest()
    if digest != expected:
        if os.path.lexists(dst):
            os.remove(dst)
        return False
    shutil.copystat(src, dst)
    return True


def _link_target(path: str) -> Optional[str]:
    return os.readlink(path) if os.path.islink(path) else None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _kind(path: str) -> str:
    return "directory" if os.path.isdir(path) else "file"


def check_layout(base: str) -> None:
    """Refuses, before anything is written, a destination whose links a switch could not replace."""
    if os.path.lexists(base) and not os.path.isdir(base):
        raise ReleaseError(
            f"{base} is a {_kind(base)}, not a directory: choose another destination"
        )
    for name in LINKS:
        path = os.path.join(base, name)
        if os.path.lexists(path) and not os.path.islink(path):
            raise ReleaseError(
                f"{path} is a real {_kind(path)}, not the symlink deploys switch, so a switch "
                f"would fail: move it away (e.g. `mv {path} {path}.manual`) and deploy again"
            )
        tmp = os.path.join(base, f".{name}.new")
        if os.path.lexists(tmp) and not os.path.islink(tmp):
            raise ReleaseError(
                f"{tmp} is a {_kind(tmp)}, where deploys make the new `{name}` link: "
                "move it away and deploy again"
            )
    releases = os.path.join(base, RELEASES)
    if os.path.lexists(releases) and not os.path.isdir(releases):
        raise ReleaseError(
            f"{releases} is a {_kind(releases)}, where deploys keep their releases: "
            "move it away and deploy again"
        )


# The names this tool gives its releases: `<UTC time>-<12 hex of the manifest's sha256>`, and
# `<that>.partial` while staged (deploy_tool.release_id). Only names of this form are ever
# removed, so that a ledger edited by hand, damaged or written by something else can never make
# a deploy remove `current`, the destination or anything outside `releases/`.
RELEASE_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{12}(?:\.partial)?")  # fullmatch: no "\n"
LEDGER_MAX_BYTES = 1 << 20  # 35 bytes a name: ~30,000 releases, far more than deploys keep
LEDGER_FIX = (
    "move it away (e.g. `mv {path} {path}.bad`) and deploy again; the releases it named are "
    "then left alone (remove them yourself)"
)


def is_release_name(name: object) -> bool:
    """Whether `name` is one of this tool's release names: a plain name inside `releases/`
    (no separator, never "" or "." or ".."), by construction of RELEASE_RE."""
    return isinstance(name, str) and RELEASE_RE.fullmatch(name) is not None


def read_ledger(base: str) -> List[str]:
    """The names under releases/ this tool made (possibly gone since), each checked to be a
    release name: the ledger is data, never trusted as paths. A damaged ledger is refused in
    one line before anything is written or removed."""
    path = os.path.join(base, LEDGER)

    def damaged(why: str) -> ReleaseError:
        return ReleaseError(
            f"{path} (the record of what deploys made) is damaged: {why}: "
            + LEDGER_FIX.format(path=path)
        )

    try:  # a regular file only (a FIFO would block the deploy), of sane size and nesting
        raw = read_regular_file(path, LEDGER_MAX_BYTES, "deploy ledger")
    except FileNotFoundError:
        return []
    except FileReadError as e:  # a FIFO, a directory, a device; over its size limit
        raise damaged(str(e).split(": ", 1)[-1].split(": refusing", 1)[0]) from None
    except OSError as e:
        raise damaged(f"unreadable ({e.strerror or e})") from e
    try:
        data = loads_json(raw, path)
    except FileReadError:
        raise damaged("nested too deep") from None
    except ValueError as e:
        raise damaged(f"not JSON ({' '.join(str(e).split())})") from None
    names = data.get("releases") if isinstance(data, dict) else None
    if not isinstance(names, list):
        raise damaged('not {"releases": [<release names>]}')
    bad = [n for n in names if not is_release_name(n)]
    if bad:
        raise damaged(
            f"{len(bad)} of its {len(names)} entries are not release names (<UTC time>-<12 "
            f"hex>), e.g. {bad[0]!r}"
        )
    return names


def check_release(name: object) -> str:
    """The release id of a request, checked as the ledger's names are."""
    if not is_release_name(name) or str(name).endswith(PARTIAL):
        raise ReleaseError(f"{name!r} is not a release id of this tool: a bug of the deploy tool")
    return str(name)


def write_ledger(base: str, names: List[str]) -> None:
    path = os.path.join(base, LEDGER)
    tmp = path + ".new"
    with open(tmp, "w") as f:
        json.dump({"releases": sorted(set(names))}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def free_space(base: str) -> Tuple[int, int]:
    """(bytes an unprivileged user may still write, block size) where `base` is or would be."""
    path = base
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_frsize or 4096


def disk_full(base: str, needed: int) -> str:
    free = free_space(base)[0]
    return (
        f"the device's disk is full at {base}: the new release needs {needed} bytes and "
        f"{free} are free: free at least {max(needed - free, 1)} bytes there (e.g. old "
        "releases or other files) and deploy again"
    )


def foreign(base: str, owned: List[str]) -> List[str]:
    releases = os.path.join(base, RELEASES)
    try:
        names = os.listdir(releases)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n not in owned)


def device_keys() -> Tuple[Tuple[bytes, str], ...]:
    try:
        return trusted_keys_from_env(os.environ)
    except SignatureFormatError as e:
        raise ReleaseError(f"the device's trusted keys are malformed: {e}: fix it there") from e


def state(req: dict) -> dict:
    base = req["base"]
    check_layout(base)
    current = os.path.join(base, "current")
    target = _link_target(current)
    manifest = None
    same = False
    if target is not None:
        try:  # the current release's manifest, if usable (else every file is sent)
            raw = read_regular_file(
                os.path.join(current, *MANIFEST_PATH.split("/")), MAX_MANIFEST_BYTES, "manifest"
            )
            manifest = raw.decode()
        except (OSError, ValueError):  # FileReadError (a FIFO, too big), UnicodeDecodeError
            manifest = None
        files = req.get("files") or {}
        if manifest is not None and hashlib.sha256(raw).hexdigest() == files.get(MANIFEST_PATH):
            # the bundle `current` holds, every file of it as sent (nothing missing or extra)
            try:
                same = not _problems(os.path.realpath(current), files)
            except ReleaseError:  # a file there unreadable: not the same (`stage` names it)
                same = False
    free, block = free_space(base)
    owned = read_ledger(base)
    return {
        "current": target,
        "previous": _link_target(os.path.join(base, "previous")),
        "same": same,
        "manifest": manifest,
        "free": free,
        "block": block,
        "foreign": foreign(base, owned),
        "keys": [[k.hex(), how] for k, how in device_keys()],
    }


def stage(req: dict) -> dict:
    base = req["base"]
    check_layout(base)
    releases = os.path.join(base, RELEASES)
    os.makedirs(releases, exist_ok=True)
    owned = read_ledger(base)
    for name in [n for n in owned if n.endswith(PARTIAL)]:  # cut-off deploys of this tool
        shutil.rmtree(os.path.join(releases, name), ignore_errors=True)
        if not os.path.lexists(os.path.join(releases, name)):
            owned.remove(name)
    name = check_release(req["release"]) + PARTIAL
    partial = os.path.join(releases, name)
    if os.path.lexists(partial):
        raise ReleaseError(f"{partial} already exists and is not this tool's: move it away")
    write_ledger(base, owned + [name])
    try:
        os.makedirs(partial)
        for d in req["dirs"]:
            os.makedirs(os.path.join(partial, *d.split("/")), exist_ok=True)
        current = os.path.realpath(os.path.join(base, "current"))
        resend = []
        for dst, (src, sha) in sorted(req["copies"].items()):
            src_path = os.path.join(current, *src.split("/"))
            if not _copy_checked(src_path, os.path.join(partial, *dst.split("/")), sha):
                resend.append(dst)
    except BaseException:
        _remove_partial(base, name)
        raise
    return {"partial": partial, "resend": resend}


def _remove_partial(base: str, name: str) -> bool:
    """Removes this tool's `releases/<name>` (a .partial) and its record; False if not ours."""
    owned = read_ledger(base)
    if name not in owned:
        return False
    shutil.rmtree(os.path.join(base, RELEASES, name), ignore_errors=True)
    if not os.path.lexists(os.path.join(base, RELEASES, name)):
        write_ledger(base, [n for n in owned if n != name])
    return True


def abort(req: dict) -> dict:
    free = free_space(req["base"])[0]
    name = check_release(req["release"]) + PARTIAL
    return {"free": free, "removed": _remove_partial(req["base"], name)}


def _problems(root: str, expected: dict) -> list:
    found = set()
    for dirpath, _, names in os.walk(root):
        for name in names:
            found.add(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    out = [f"missing: {p}" for p in sorted(set(expected) - found)]
    out += [f"unexpected: {p}" for p in sorted(found - set(expected))]
    for path in sorted(found & set(expected)):
        try:
            if _sha256(os.path.join(root, *path.split("/"))) != expected[path]:
                out.append(f"changed: {path}")
        except (FileNotFoundError, NotADirectoryError, FileReadError):
            out.append(f"not a regular file: {path}")
    return out


def check_trust(partial: str, release: str) -> str:
    """The staged manifest against the device's trust policy, as gpu_runtime will load it."""
    keys = device_keys()
    trusted = [k for k, _ in keys]
    refused = f"release {release} would be refused by the device's runtime"
    sig_path = os.path.join(partial, *SIGNATURE_PATH.split("/"))
    try:  # regular files of sane size only, as gpu_runtime reads them
        raw = _read(
            os.path.join(partial, *MANIFEST_PATH.split("/")), MAX_MANIFEST_BYTES, "manifest"
        )
        try:
            sig_raw: Optional[bytes] = _read(sig_path, MAX_SIGNATURE_BYTES, "signature")
        except FileNotFoundError:
            sig_raw = None
    except FileReadError as e:
        raise ReleaseError(f"{refused}: {e}") from None
    ids = f"{describe_keys(trusted)} (${TRUSTED_KEYS_ENV} on the device)"
    try:
        sig, key = signature_policy(sig_raw, SIGNATURE_PATH, trusted)
    except NotSignedError as e:
        raise ReleaseError(
            f"{refused}: it {not_signed_reason('the device', ids)}; {SIGN_FIX}"
        ) from e
    except UntrustedKeyError as e:
        reason = untrusted_key_reason(e.signature.key_id, "the device", ids)
        raise ReleaseError(f"{refused}: it {reason}; {SIGN_FIX}") from e
    except SignatureFormatError as e:
        raise ReleaseError(f"{refused}: {e}; re-run `pants package` and deploy again") from e
    if sig is None:
        return "unsigned (the device trusts no keys)"
    if key is None:
        return f"signed by key {sig.key_id}, not checked (the device trusts no keys)"
    if not verify_ed25519(key, sig.signature, raw):
        raise ReleaseError(
            f"{refused}: the signature by key {sig.key_id} does not match its manifest (changed "
            "after it was signed): re-run `pants package` and deploy again"
        )
    return f"signed by trusted key {sig.key_id}, signature verified on the device"


def _point(base: str, name: str, target: str) -> None:
    tmp = os.path.join(base, f".{name}.new")
    if os.path.islink(tmp):
        os.remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, os.path.join(base, name))


PREPARE_TIMEOUT_S = 900  # an app PEX unpacked under emulation took 114 s; a hung one ends here


def launchers(root: str) -> List[str]:
    """The bundle's launchers (`<bundle>/app` beside `app.pex`): the scripts that know
    PREPARE_ONLY_ENV."""
    found = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isfile(path) and not os.path.islink(path) and os.access(path, os.X_OK):
            with _open_read(path, "launcher") as f:
                head = f.read(4096)
            if head.startswith(b"#!/bin/sh") and PREPARE_ONLY_ENV.encode() in head:
                found.append(name)
    return found


NOISE_RE = re.compile(r"^(?:\.\.\.|\W*$|Traceback \(most recent call last\)|File \")")
ERROR_RE = re.compile(r"error|exception|refused|denied|not found|no such|no space|killed", re.I)


def cause(output: bytes, limit: int = 300) -> str:
    """The cause of a failed run, in one line, from its output: the last line that names an
    error (`ERROR: ...`, `OSError: ...`), else the last meaningful line; lines that only say how
    much more there was (`... 913 more ...`), tracebacks' frames and punctuation are skipped."""
    lines = [line.strip() for line in output.decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line and not NOISE_RE.match(line)]
    errors = [line for line in lines if ERROR_RE.search(line)]
    line = (errors or lines or ["no output"])[-1]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def prepare(partial: str, release: str) -> Tuple[dict, List[str]]:
    """Runs each launcher of the staged release once with PREPARE_ONLY_ENV=1: the app's venv is
    made (pex unpacks the PEX under PEX_ROOT) before the switch, so the release's first run
    starts at warm speed. Best effort: a launcher that fails is a warning naming the cause (its
    first run then unpacks the PEX, as without this), never a failed deploy; except a launcher
    that refuses its own app.pex (TAMPERED_EXIT: not the PEX it was built with), which would
    refuse every run of the release too: that release is not switched to. ({name: seconds},
    warnings)"""
    done, warnings = {}, []
    for name in launchers(partial):
        start = time.monotonic()
        try:
            run = subprocess.run(
                [os.path.join(partial, name)],
                env=dict(os.environ, **{PREPARE_ONLY_ENV: "1"}),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=PREPARE_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            warnings.append(
                f"could not prepare {name}'s environment on the device ({e}): its "
                f"first run will unpack it"
            )
            continue
        if run.returncode == TAMPERED_EXIT:
            raise ReleaseError(
                f"release {release} was not switched to: its launcher `{name}` refuses the "
                f"release's app.pex ({cause(run.stdout or b'')}): re-run `pants package` and "
                "deploy again"
            )
        if run.returncode != 0:
            warnings.append(
                f"could not prepare {name}'s environment on the device (exit {run.returncode}: "
                f"{cause(run.stdout or b'')}): its first run will unpack it"
            )
            continue
        done[name] = round(time.monotonic() - start, 2)
    return done, warnings


def finish(req: dict) -> dict:
    base, release = req["base"], check_release(req["release"])
    releases = os.path.join(base, RELEASES)
    partial = os.path.join(releases, release + PARTIAL)
    problems = _problems(partial, req["files"])
    if problems:
        return {"problems": problems}
    trust = check_trust(partial, release)
    check_layout(base)
    prepared, prepare_warnings = prepare(partial, release)
    owned = read_ledger(base)
    if os.path.lexists(os.path.join(releases, release)):
        raise ReleaseError(f"{releases}/{release} already exists: move it away and deploy again")
    write_ledger(base, owned + [release])  # recorded before it exists: never an unowned release
    os.rename(partial, os.path.join(releases, release))
    _fsync_dir(releases)
    old = _link_target(os.path.join(base, "current"))
    _point(base, "current", f"{RELEASES}/{release}")
    if old is not None and old != f"{RELEASES}/{release}":
        _point(base, "previous", old)
    _fsync_dir(base)
    # Switched: from here on nothing fails the deploy; what cannot be tidied is a warning.
    warnings = list(prepare_warnings)
    keep = {release, os.path.basename(old or "")}
    keep.add(os.path.basename(_link_target(os.path.join(base, "previous")) or ""))
    removed = []
    owned = [n for n in read_ledger(base) if n != release + PARTIAL]
    for name in sorted(set(owned) - keep):
        path = os.path.join(releases, name)
        if name.endswith(PARTIAL):
            continue
        if os.path.lexists(path):
            try:  # a symlink put there is removed itself, never what it points at
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
            except OSError as e:
                warnings.append(f"could not remove the old release {path}: {e}")
                continue
            removed.append(name)
        owned.remove(name)
    try:
        write_ledger(base, owned)
    except OSError as e:
        warnings.append(f"could not update {os.path.join(base, LEDGER)}: {e}")
    return {
        "previous": old,
        "removed": removed,
        "trust": trust,
        "prepared": prepared,
        "foreign": foreign(base, owned),
        "warnings": warnings,
    }


def rollback(req: dict) -> dict:
    """Points `current` back at `previous`, with one rename, if `current` is still the release
    `release` (the one that failed its health check): a fleet deploy's rescue of one device. The
    failed release stays in releases/ (the next deploy removes it, as any release that is neither
    `current` nor `previous`); `previous` is left as it is."""
    base, release = req["base"], check_release(req["release"])
    check_layout(base)
    current = _link_target(os.path.join(base, "current"))
    previous = _link_target(os.path.join(base, "previous"))
    if current != f"{RELEASES}/{release}":
        raise ReleaseError(
            f"not rolled back: {base}/current is {current or 'missing'}, not {release} (another "
            "deploy switched it): check the device"
        )
    if previous is None or previous == current:
        raise ReleaseError(
            f"not rolled back: {base} has no `previous` release to go back to ({release} is the "
            "first one deployed there): deploy a release that passes the health check"
        )
    if not os.path.isdir(os.path.join(base, previous)):
        raise ReleaseError(f"not rolled back: {base}/previous ({previous}) is not a release")
    _point(base, "current", previous)
    _fsync_dir(base)
    return {"current": previous, "failed": release}


LOCK_POLL_S = 0.2


def _holder(fd: int) -> str:
    """Who holds the lock, from what it wrote into the lock file when it took it."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        age = int(time.time() - float(info["since"]))
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(info["since"])))
        return (
            f"pid {info['tool_pid']} on {info['tool_host']} (device pid {info['pid']}), "
            f"deploying since {since} ({age} s ago)"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return "a deploy that has not named itself yet"


def _makedirs(path: str) -> List[str]:
    """os.makedirs, returning the directories it made (outermost first)."""
    made = []
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        made.append(path)
        path = os.path.dirname(path)
    for d in reversed(made):
        os.makedirs(d, exist_ok=True)
    return list(reversed(made))


def lock(req: dict) -> None:
    """Holds `<base>/.deploy.lock` (fcntl.flock) for the whole deploy: answers {"locked": path}
    once it has it, then keeps it until the deploy tool closes this program's stdin (or its
    ssh session ends). Why: the deploy's other steps are separate ssh sessions, and two deploys
    to one destination at once would remove each other's staging (`stage` removes this tool's
    cut-off `.partial` directories) and switch `current` under each other. The kernel releases
    a flock when its holder dies, so a deploy that was killed leaves no stale lock: the file it
    leaves behind is taken by the next deploy as is. A second deploy waits `wait` seconds for
    the lock, then refuses in one line naming the holder (pid and host of its deploy tool, and
    since when). The file is removed when the lock is let go (and a waiter that then locked the
    removed file tries again), as are the directories taking it made, if still empty."""
    base = req["base"]
    check_layout(base)
    made = _makedirs(base)
    path = os.path.join(base, LOCK)
    fd = _take_lock(base, path, max(float(req.get("wait", 0)), 0.0))
    try:
        info = {
            "pid": os.getpid(),
            "tool_pid": req.get("tool_pid"),
            "tool_host": req.get("tool_host"),
            "since": time.time(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        sys.stdout.write(json.dumps({"locked": path}) + "\n")
        sys.stdout.flush()
        sys.stdin.read()  # until the deploy tool is done (or its ssh session ends)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)  # while locked: no other deploy holds this file
        os.close(fd)
        for d in reversed(made):
            try:
                os.rmdir(d)
            except OSError:
                break


def _take_lock(base: str, path: str, wait: float) -> int:
    """The descriptor of `path`, flocked by this process; after `wait` seconds of another
    deploy holding it, ReleaseError naming that deploy."""
    deadline = time.monotonic() + wait
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            if time.monotonic() >= deadline:
                raise ReleaseError(
                    f"another deploy to {base} is running: {holder} holds {path}; waited "
                    f"{wait:g} s: deploy again once it is done (a deploy that was killed holds "
                    "no lock: the file it leaves is reused)"
                ) from None
            time.sleep(LOCK_POLL_S)
            continue
        mine = os.fstat(fd)
        try:
            now = os.lstat(path)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
        os.close(fd)  # its holder removed it as it let go: lock the one at `path` now


COMMANDS: Dict[str, Callable[[dict], Optional[dict]]] = {
    "lock": lock,
    "state": state,
    "stage": stage,
    "finish": finish,
    "abort": abort,
    "rollback": rollback,
}


def describe_os_error(command: str, e: OSError, req: dict) -> str:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(req["base"], int(req.get("needed", 0)))
    where = e.filename or req["base"]
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"`{command}` cannot write {where} on the device: {e.strerror}: give the deploy "
            "user write access there, or choose another destination"
        )
    return f"`{command}` failed on the device at {where}: {e.strerror or e}"


def main(req: dict) -> int:
    command = req["command"]
    result: Optional[dict]
    try:
        result = COMMANDS[command](req)
    except ReleaseError as e:
        result = {"error": str(e)}
    except OSError as e:
        result = {"error": describe_os_error(command, e, req)}
    if result is not None:  # `lock` answers for itself, before it waits
        sys.stdout.write(json.dumps(result) + "\n")
    return 0
