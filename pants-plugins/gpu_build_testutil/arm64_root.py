"""An arm64 Debian root on this x86_64 machine, to run aarch64 bundles in under qemu-user.

Nothing is installed on the machine by hand or by this module: everything comes from Debian's
archive through the host's own apt and is kept under `~/.cache/gpu_build_bootstrap/aarch64/`
(`PANTS_BOOTSTRAP_CACHE` moves it, as it moves Pants' venv and the tests' sshd):

- qemu: Debian's `qemu-user-static` for the host (`apt-get download`), of which only
  `qemu-aarch64-static` is kept.
- binfmt_misc: mounted on /proc/sys/fs/binfmt_misc where it is not, and an aarch64 ELF handler
  registered as `gpu_build-qemu-aarch64` with the F flag: the kernel opens qemu when the handler
  is registered, so aarch64 programs run in a chroot that holds no qemu. A handler already
  registered for aarch64 with F (Debian's own qemu-user-static registers `qemu-aarch64` so) is
  used as it is. The handler is machine-wide and left in place, as Debian's package leaves its
  own: `echo -1 > /proc/sys/fs/binfmt_misc/gpu_build-qemu-aarch64` removes it.
- the root: apt-get with a state of its own (arm64, ROOT_SUITE main, Debian's archive key, an
  empty dpkg status; the host's apt.conf, so its proxy, still applies) resolves ROOT_PACKAGES
  and their dependencies and downloads them, each checked against the signed Release; then
  `dpkg-deb -x` unpacks every .deb on the host. No maintainer script runs, so nothing is
  emulated while the root is made: `debootstrap --variant=minbase` took ~8 min here, almost all
  of it its emulated second stage; this takes seconds. /dev gets the null, zero, random and
  urandom nodes and a /dev/shm directory (multiprocessing's locks need it), nothing is mounted.

The root is made in a temporary directory and renamed into place under a name keyed by what
goes into it (ROOT_RECIPE), so a changed recipe makes a new one and two first runs at once leave
one. Programs run in it through a private scratch directory under its /tmp (`Arm64Root.scratch`),
removed afterwards; Python's own bytecode of the standard library is what the root gains from
use. `Unavailable` says why none of this can be had here (not root, no binfmt_misc, no apt, no
network): tests skip with it. Standard library only, CPython 3.9+.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import platform
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Sequence

from gpu_build_testutil.pants_harness import bootstrap_cache

ROOT_SUITE = "bookworm"  # CPython 3.11.2, glibc 2.36
ROOT_MIRROR = "http://deb.debian.org/debian"  # $GPU_BUILD_DEBIAN_MIRROR overrides
ARCHIVE_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# python3 and the sh, dirname and env the bundle's launcher uses; libstdc++6, which
# cuda-bindings' aarch64 wheel links (a JetPack root has it; minbase would too).
ROOT_PACKAGES = ("python3", "dash", "coreutils", "libstdc++6")
ROOT_RECIPE = 1  # bump when the way the root is made changes

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
HANDLER = "gpu_build-qemu-aarch64"
# qemu's own aarch64 entry (scripts/qemu-binfmt-conf.sh): a little-endian ELF64 of e_machine 183.
ELF_MAGIC = b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
ELF_MASK = b"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Inside the root: the PATH of a Debian login, and nothing of the host's environment.
ROOT_PATH = "/usr/local/bin:/usr/bin:/bin"


class Unavailable(Exception):
    """aarch64 emulation cannot be set up here; the message says why (tests skip with it)."""


def cache_dir() -> Path:
    return bootstrap_cache("aarch64")


def _tool(name: str) -> str:
    found = shutil.which(name, path=f"{os.environ.get('PATH', '')}:{_SYSTEM_PATH}")
    if not found:
        raise Unavailable(f"`{name}` is not on this machine")
    return found


def _run(cmd: Sequence[str], what: str, **kwargs: object) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, **kwargs)  # type: ignore
    if proc.returncode != 0:
        out = (proc.stderr.strip() or proc.stdout.strip())[-600:]
        raise Unavailable(f"{what}: `{' '.join(cmd[:4])} ...` exited {proc.returncode}: {out}")
    return proc


def check_host() -> None:
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        raise Unavailable(f"the host is {platform.system()} {platform.machine()}, not Linux x86_64")
    if os.geteuid() != 0:
        raise Unavailable("not root: mounting binfmt_misc and chroot need root")
    if not os.path.isfile(ARCHIVE_KEYRING):
        raise Unavailable(f"{ARCHIVE_KEYRING} is missing (package debian-archive-keyring)")
    _tool("apt-get")
    _tool("dpkg-deb")


# --- qemu ---------------------------------------------------------------------------------


def qemu_binary() -> Path:
    """qemu-aarch64-static out of Debian's qemu-user-static .deb, fetched once."""
    target = cache_dir() / "qemu-aarch64-static"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".qemu-"))
    try:
        cmd = [_tool("apt-get"), "download", "-q", "-o", "APT::Sandbox::User=root"]
        proc = subprocess.run([*cmd, "qemu-user-static"], cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:  # the host's package lists may be missing or stale
            subprocess.run([_tool("apt-get"), "update", "-q"], capture_output=True)
            _run([*cmd, "qemu-user-static"], "fetching qemu-user-static", cwd=tmp)
        (deb,) = tmp.glob("qemu-user-static_*.deb")
        _extract_one(deb, "./usr/bin/qemu-aarch64-static", tmp / "qemu-aarch64-static")
        (tmp / "qemu-aarch64-static").rename(target)  # atomic: same directory tree
        (target.parent / "qemu-aarch64-static.deb").write_text(deb.name + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _extract_one(deb: Path, member: str, dest: Path) -> None:
    """One file out of a .deb, reading its data archive only as far as that file: the
    qemu-aarch64 binary comes first of the 380 MB that qemu-user-static unpacks to."""
    proc = subprocess.Popen(
        [_tool("dpkg-deb"), "--fsys-tarfile", str(deb)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
            for info in archive:
                if info.name == member and info.isfile():
                    source = archive.extractfile(info)
                    assert source is not None
                    with open(dest, "wb") as out:
                        shutil.copyfileobj(source, out)
                    dest.chmod(0o755)
                    return
        raise Unavailable(f"{deb.name} holds no {member}")
    finally:
        proc.kill()  # the rest of the archive is not needed
        proc.wait()


# --- binfmt_misc --------------------------------------------------------------------------


def _hex(data: bytes) -> str:
    return "".join(f"\\x{b:02x}" for b in data)


def registration(interpreter: str) -> str:
    """The line written to binfmt_misc/register for this module's handler."""
    return f":{HANDLER}:M::{_hex(ELF_MAGIC)}:{_hex(ELF_MASK)}:{interpreter}:F"


def parse_handler(text: str) -> Dict[str, str]:
    """A binfmt_misc entry's file: `enabled`/`disabled`, then `key value` lines."""
    lines = text.splitlines()
    info = {"state": lines[0].strip() if lines else ""}
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        info[key.rstrip(":")] = value.strip()  # "flags: F", "magic 7f45..."
    return info


def is_aarch64_fix_binary(info: Mapping[str, str]) -> bool:
    """An enabled handler that takes aarch64 ELF files and opened its interpreter (F)."""
    return (
        info.get("state") == "enabled"
        and "F" in info.get("flags", "")
        and info.get("offset", "0") == "0"
        and info.get("magic") == ELF_MAGIC.hex()
        and info.get("mask") == ELF_MASK.hex()
    )


def ensure_binfmt(qemu: Path) -> str:
    """Makes aarch64 ELF files run through qemu, in a chroot too; returns the handler's name."""
    if not (BINFMT_DIR / "register").exists():
        proc = subprocess.run(
            [_tool("mount"), "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or not (BINFMT_DIR / "register").exists():
            raise Unavailable(
                f"binfmt_misc cannot be mounted on {BINFMT_DIR}: {proc.stderr.strip()}"
            )
    if (BINFMT_DIR / "status").read_text().strip() != "enabled":
        raise Unavailable("binfmt_misc is disabled on this machine (its status file says so)")
    ours = BINFMT_DIR / HANDLER
    for entry in sorted(BINFMT_DIR.iterdir()):
        if entry.name in ("register", "status") or entry == ours:
            continue
        try:
            if is_aarch64_fix_binary(parse_handler(entry.read_text())):
                return entry.name
        except OSError:
            continue  # removed meanwhile
    try:
        if ours.exists():
            if parse_handler(ours.read_text()).get("state") != "enabled":
                ours.write_text("1")
            return HANDLER
        (BINFMT_DIR / "register").write_text(registration(str(qemu)))
    except FileExistsError:  # another run registered it meanwhile
        return HANDLER
    except OSError as e:
        raise Unavailable(f"the aarch64 binfmt_misc handler cannot be registered: {e}") from e
    return HANDLER


# --- the root -----------------------------------------------------------------------------


def root_key(mirror: str) -> str:
    recipe = {
        "recipe": ROOT_RECIPE,
        "suite": ROOT_SUITE,
        "mirror": mirror,
        "packages": sorted(ROOT_PACKAGES),
    }
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()
    return f"root-{ROOT_SUITE}-arm64-{digest[:12]}"


def apt_options(state: Path) -> List[str]:
    """apt-get options for a private arm64 apt state under `state` (the host's left alone)."""
    opts = {
        "APT::Architecture": "arm64",
        "APT::Architectures": "arm64",
        "Dir::Etc::SourceList": str(state / "sources.list"),
        "Dir::Etc::SourceParts": str(state / "sources.list.d"),
        "Dir::Etc::Preferences": str(state / "preferences"),
        "Dir::Etc::PreferencesParts": str(state / "preferences.d"),
        "Dir::State": str(state / "state"),
        "Dir::State::status": str(state / "status"),
        "Dir::Cache": str(state / "cache"),
        "APT::Sandbox::User": "root",
        "Acquire::Languages": "none",
        "Debug::NoLocking": "1",  # our own state: no need to wait on the host's apt
    }
    return [arg for key, value in opts.items() for arg in ("-o", f"{key}={value}")]


def _make_root(tmp: Path, mirror: str) -> Path:
    state, root = tmp / "apt", tmp / "root"
    for d in ("sources.list.d", "preferences.d", "state/lists/partial", "cache/archives/partial"):
        (state / d).mkdir(parents=True)
    (state / "status").write_text("")
    (state / "sources.list").write_text(
        f"deb [arch=arm64 signed-by={ARCHIVE_KEYRING}] {mirror} {ROOT_SUITE} main\n"
    )
    apt = [_tool("apt-get"), "-q", *apt_options(state)]
    # --error-on=any: an unreachable mirror fails here, not as "Unable to locate package" later
    _run(
        [*apt, "update", "--error-on=any"],
        f"fetching the arm64 package lists of {mirror} {ROOT_SUITE}",
    )
    _run(
        [*apt, "install", "-y", "--download-only", "--no-install-recommends", *ROOT_PACKAGES],
        f"fetching {' '.join(ROOT_PACKAGES)} (arm64) and their dependencies",
    )
    debs = sorted((state / "cache" / "archives").glob("*.deb"))
    if not debs:
        raise Unavailable("apt-get downloaded no packages for the arm64 root")
    root.mkdir()
    # No two of these packages ship the same path (dpkg would refuse them), so they unpack at
    # once; dpkg-deb's decompression is most of the cost.
    dpkg_deb = _tool("dpkg-deb")
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for done in pool.map(
            lambda deb: subprocess.run(
                [dpkg_deb, "-x", str(deb), str(root)], capture_output=True, text=True
            ),
            debs,
        ):
            if done.returncode != 0:
                raise RuntimeError(f"`{' '.join(done.args)}` failed: {done.stderr}")
    dev = root / "dev"
    (dev / "shm").mkdir(parents=True, exist_ok=True)
    for sticky in (dev / "shm", root / "tmp"):
        sticky.mkdir(exist_ok=True)
        sticky.chmod(0o1777)
    for name, minor in (("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)):
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        (dev / name).chmod(0o666)
    (root / "etc" / "gpu_build-root.json").write_text(
        json.dumps(
            {
                "suite": ROOT_SUITE,
                "mirror": mirror,
                "asked": list(ROOT_PACKAGES),
                "debs": [d.name for d in debs],
            },
            indent=1,
        )
        + "\n"
    )
    return root


def arm64_root() -> Path:
    """The cached arm64 root, made on first use."""
    mirror = os.environ.get("GPU_BUILD_DEBIAN_MIRROR") or ROOT_MIRROR
    target = cache_dir() / root_key(mirror)
    if (target / "etc" / "gpu_build-root.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".root-"))
    try:
        root = _make_root(tmp, mirror)
        try:
            root.rename(target)
        except OSError:  # another run got there first
            if not (target / "etc" / "gpu_build-root.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# --- running in it ------------------------------------------------------------------------


@dataclass(frozen=True)
class Scratch:
    host: Path  # the directory, seen from here
    inside: str  # the same, seen from inside the root


@dataclass(frozen=True)
class Timed:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass(frozen=True)
class Arm64Root:
    root: Path
    handler: str  # the binfmt_misc handler that runs its programs
    setup_s: float  # what making (or finding) qemu, binfmt and the root took this time

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Scratch]:
        """A fresh directory under the root's /tmp, removed afterwards."""
        name = f"gpu_build-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        host = self.root / "tmp" / name
        host.mkdir()
        try:
            yield Scratch(host, f"/tmp/{name}")
        finally:
            shutil.rmtree(host, ignore_errors=True)

    def run(
        self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None, timeout: float = 900
    ) -> Timed:
        """argv run chrooted into the root (aarch64 programs through qemu-user), with a bare
        environment: PATH, LANG and `env`. chroot(8), not a preexec_fn: safe from a thread."""
        full_env = {"PATH": ROOT_PATH, "LANG": "C.UTF-8", **(env or {})}
        start = time.perf_counter()
        proc = subprocess.run(
            [_tool("chroot"), str(self.root), *argv],
            env=full_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Timed(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start)


def prepare() -> Arm64Root:
    """qemu, its binfmt_misc handler and the root, each fetched or made only where missing;
    `Unavailable` where one cannot be had here."""
    start = time.perf_counter()
    check_host()
    handler = ensure_binfmt(qemu_binary())
    root = arm64_root()
    env = Arm64Root(root, handler, time.perf_counter() - start)
    probe = env.run(["/usr/bin/python3", "-c", "import platform; print(platform.machine())"])
    if probe.returncode != 0 or probe.stdout.strip() != "aarch64":
        # Everything was in place, so this is a fault, not a machine that cannot emulate.
        raise RuntimeError(
            f"python3 of the arm64 root {root} did not run as aarch64 through binfmt_misc "
            f"handler {handler} (exit {probe.returncode}): {probe.stdout}{probe.stderr}"
        )
    return env
