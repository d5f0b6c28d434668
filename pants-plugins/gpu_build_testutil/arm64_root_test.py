"""arm64_root's binfmt_misc lines and cache key, without touching binfmt_misc or the network."""

from __future__ import annotations

from pathlib import Path

from gpu_build_testutil import arm64_root

# /proc/sys/fs/binfmt_misc/qemu-aarch64 as Debian's qemu-user-static (bookworm) registers it.
DEBIAN_ENTRY = """\
enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: POCF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""


def test_debian_handler_is_used_as_it_is() -> None:
    info = arm64_root.parse_handler(DEBIAN_ENTRY)
    assert info["interpreter"] == "/usr/libexec/qemu-binfmt/aarch64-binfmt-P"
    assert arm64_root.is_aarch64_fix_binary(info)
    # Without F the kernel opens qemu at each exec, by a path a chroot does not hold.
    assert not arm64_root.is_aarch64_fix_binary(dict(info, flags="POC"))
    assert not arm64_root.is_aarch64_fix_binary(dict(info, state="disabled"))
    assert not arm64_root.is_aarch64_fix_binary(dict(info, magic=info["magic"][:-4] + "3e00"))


def test_registration_matches_what_the_kernel_reads_back() -> None:
    line = arm64_root.registration(str(arm64_root.cache_dir() / "qemu-aarch64-static"))
    _, name, kind, offset, magic, mask, interpreter, flags = line.split(":")
    assert (name, kind, offset, flags) == (arm64_root.HANDLER, "M", "", "F")
    assert interpreter.endswith("/qemu-aarch64-static")
    read_back = {  # the kernel shows the escapes it was given as plain hex
        "state": "enabled",
        "flags": flags,
        "offset": "0",
        "magic": bytes.fromhex(magic.replace("\\x", "")).hex(),
        "mask": bytes.fromhex(mask.replace("\\x", "")).hex(),
    }
    assert arm64_root.is_aarch64_fix_binary(read_back)
    assert read_back["magic"] == arm64_root.parse_handler(DEBIAN_ENTRY)["magic"]


def test_root_key_follows_the_recipe(tmp_path: Path, monkeypatch) -> None:
    key = arm64_root.root_key(arm64_root.ROOT_MIRROR)
    assert key == arm64_root.root_key(arm64_root.ROOT_MIRROR)
    assert key.startswith("root-bookworm-arm64-")
    assert key != arm64_root.root_key("http://mirror.example/debian")
    monkeypatch.setattr(arm64_root, "ROOT_PACKAGES", (*arm64_root.ROOT_PACKAGES, "zstd"))
    assert key != arm64_root.root_key(arm64_root.ROOT_MIRROR)
    monkeypatch.setenv("PANTS_BOOTSTRAP_CACHE", str(tmp_path))
    assert arm64_root.cache_dir() == tmp_path / "aarch64"
