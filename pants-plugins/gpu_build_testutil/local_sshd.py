"""A real OpenSSH server on 127.0.0.1 for tests: Debian's `openssh-server`, unpacked, not installed.

`sshd_binary()` fetches the package with `apt-get download` (and `libwrap0`, which sshd links)
and unpacks it with `dpkg-deb -x` into `~/.cache/gpu_build_bootstrap/openssh-server/`
(`PANTS_BOOTSTRAP_CACHE` moves it), once. Run as root, sshd insists on its privilege-separation
user and directory: they are created as Debian's package does (`useradd --system sshd`,
`/run/sshd`). `LocalSshd` starts it on a free port with throwaway host and user keys in a temp
dir, for the current user only, and stops it by its pid.
"""

from __future__ import annotations

import getpass
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional

from gpu_build_testutil.pants_harness import bootstrap_cache

PACKAGES = ("openssh-server", "libwrap0")


# Put first on a device interpreter's PYTHONPATH, it makes os.statvfs report 10 free blocks: the
# device's disk reads as full, with no root and no real filesystem filled.
_DISK_FULL_SITECUSTOMIZE = """
import os
_real = os.statvfs
def _low(path):
    s = _real(path)
    return os.statvfs_result((s.f_bsize, s.f_frsize, s.f_blocks, 10, 10, 10, s.f_files,
                              s.f_ffree, s.f_favail, s.f_flag, s.f_namemax))
os.statvfs = _low
"""


def disk_full_site(site: Path) -> Path:
    """Make `site` a directory whose `sitecustomize.py` makes the disk read as full; return it."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_DISK_FULL_SITECUSTOMIZE)
    return site


class SshdUnavailable(Exception):
    """No way to get sshd here (not Debian-like, or apt cannot fetch it): tests skip with this."""


def cache_dir() -> Path:
    return bootstrap_cache("openssh-server")


def _download(tmp: Path) -> None:
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise SshdUnavailable("apt-get and dpkg-deb are needed to fetch Debian's openssh-server")
    cmd = ["apt-get", "download", *PACKAGES]
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    if proc.returncode != 0 and os.geteuid() == 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True)
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SshdUnavailable(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-500:]}")
    for deb in tmp.glob("*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp / "root")], check=True)


def sshd_binary() -> Path:
    """The unpacked sshd, fetched on first use (a temp dir renamed into place)."""
    target = cache_dir()
    sshd = target / "root" / "usr" / "sbin" / "sshd"
    if not sshd.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".openssh-server-"))
        try:
            _download(tmp)
            try:
                os.rename(tmp, target)
            except OSError:  # another test got there first
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return sshd


def ensure_privsep() -> None:
    """What Debian's postinst does, needed only when sshd runs as root."""
    if os.geteuid() != 0:
        return
    try:
        pwd.getpwnam("sshd")
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                "/run/sshd",
                "--shell",
                "/usr/sbin/nologin",
                "sshd",
            ],
            check=True,
        )
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSshd:
    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.port = free_port()
        self.user = getpass.getuser()
        self.proc: Optional[subprocess.Popen] = None
        self.identity = workdir / "user_key"
        self.known_hosts = workdir / "known_hosts"

    def ssh_options(self) -> List[str]:
        """`-o` values pinning this server's host key."""
        return [f"UserKnownHostsFile={self.known_hosts}", "StrictHostKeyChecking=yes"]

    def start(self) -> "LocalSshd":
        sshd = sshd_binary()
        ensure_privsep()
        d = self.dir
        for name in ("host_key", "user_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(d / name)],
                check=True,
            )
        (d / "authorized_keys").write_text((d / "user_key.pub").read_text())
        host_pub = (d / "host_key.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\nAllowUsers {self.user}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            f"StrictModes no\nPidFile {d / 'sshd.pid'}\nSubsystem sftp internal-sftp\n"
        )
        libs = ":".join(
            str(sshd.parents[2] / p)
            for p in (
                "lib/x86_64-linux-gnu",
                "usr/lib/x86_64-linux-gnu",
                "usr/lib/aarch64-linux-gnu",
                "lib/aarch64-linux-gnu",
            )
        )
        env = dict(os.environ, LD_LIBRARY_PATH=libs)
        self.proc = subprocess.Popen(
            [str(sshd), "-D", "-f", str(d / "sshd_config"), "-E", str(d / "sshd.log")], env=env
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(d / 'sshd.log').read_text()[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise RuntimeError("sshd did not listen within 10 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
