"""strip_pex on a synthetic zipapp PEX laid out as pex writes one (a shebang line, PEX-INFO,
`.deps/<wheel>/` chroots with their `.layout.json`); deploy_bundle_integration_test runs the
real stripped app PEX of a bundle."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from gpu_build.scripts.strip_pex import main, new_fingerprint, strip

WHEEL = "cuda_bindings-12.9.4-cp312-cp312-manylinux_2_28_x86_64.whl"
PURE = "cuda_pathfinder-1.8.3-py3-none-any.whl"
SHEBANG = b"#!/usr/bin/env python3.12\n"
PATTERNS = ["*.pyx", "*.pxd", "*.cpp"]


def layout(fingerprint: str) -> bytes:
    return json.dumps({"fingerprint": fingerprint, "stash_dir": ".prefix"}).encode()


def write_pex(path: Path) -> None:
    info = {"pex_hash": "a" * 40, "distributions": {WHEEL: "f" * 64, PURE: "e" * 64}}
    entries = [
        ("__main__.py", b"# pex bootstrap\n"),
        ("PEX-INFO", json.dumps(info).encode()),
        (".deps/", b""),
        (f".deps/{WHEEL}/", b""),
        (f".deps/{WHEEL}/.layout.json", layout("f" * 64)),
        (f".deps/{WHEEL}/cuda/bindings/driver.cpython-312-x86_64-linux-gnu.so", b"\x7fELF" * 64),
        (f".deps/{WHEEL}/cuda/bindings/driver.pyx", b"# cython source\n" * 100),
        (f".deps/{WHEEL}/cuda/bindings/driver.cpp", b"// generated\n" * 1000),
        (f".deps/{WHEEL}/cuda/bindings/cydriver.pxd", b"cdef extern\n"),
        (f".deps/{PURE}/.layout.json", layout("e" * 64)),
        (f".deps/{PURE}/cuda/pathfinder/__init__.py", b"x = 1\n"),
        ("imaging/app.pyx", b"# not in a wheel: the app's own files are kept\n"),
    ]
    with open(path, "wb") as f:
        f.write(SHEBANG)
        with zipfile.ZipFile(f, "w") as z:
            for name, data in entries:
                info_ = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info_.external_attr = (0o40755 if name.endswith("/") else 0o100644) << 16
                z.writestr(info_, data, compress_type=zipfile.ZIP_DEFLATED)


@pytest.fixture
def pex(tmp_path: Path) -> Path:
    path = tmp_path / "in" / "app.pex"
    path.parent.mkdir()
    write_pex(path)
    return path


def test_build_only_files_of_wheels_are_left_out_and_the_rest_kept_as_it_was(pex, tmp_path):
    out = tmp_path / "out" / "app.pex"
    assert strip(str(pex), str(out), PATTERNS) == {WHEEL: 3}
    assert out.read_bytes().startswith(SHEBANG)
    before, after = zipfile.ZipFile(pex), zipfile.ZipFile(out)
    names = [i.filename for i in after.infolist()]
    assert names == [
        n for n in before.namelist() if not n.endswith((".pyx", ".cpp", ".pxd")) or "deps" not in n
    ]
    assert "imaging/app.pyx" in names
    for name in names:
        if name not in ("PEX-INFO", f".deps/{WHEEL}/.layout.json"):
            assert after.read(name) == before.read(name), name
            b, a = before.getinfo(name), after.getinfo(name)
            assert (a.date_time, a.external_attr, a.compress_type) == (
                b.date_time,
                b.external_attr,
                b.compress_type,
            )


def test_a_stripped_wheel_gets_a_new_fingerprint_and_the_pex_keeps_its_hash(pex, tmp_path):
    out = tmp_path / "stripped.pex"
    strip(str(pex), str(out), PATTERNS)
    z = zipfile.ZipFile(out)
    info = json.loads(z.read("PEX-INFO"))
    removed = ["cuda/bindings/cydriver.pxd", "cuda/bindings/driver.cpp", "cuda/bindings/driver.pyx"]
    assert info["distributions"][WHEEL] == new_fingerprint("f" * 64, removed) != "f" * 64
    assert info["distributions"][PURE] == "e" * 64  # nothing left out: the same directory
    assert json.loads(z.read(f".deps/{WHEEL}/.layout.json"))["fingerprint"] == (
        info["distributions"][WHEEL]
    )
    assert info["pex_hash"] == "a" * 40  # pex's boot code looks for the venv by this hash too
    assert z.read("__main__.py") == b"# pex bootstrap\n"


def test_the_same_input_gives_the_same_bytes_and_no_pattern_changes_nothing(pex, tmp_path):
    one, two, same = tmp_path / "1.pex", tmp_path / "2.pex", tmp_path / "same.pex"
    strip(str(pex), str(one), PATTERNS)
    strip(str(pex), str(two), PATTERNS)
    assert one.read_bytes() == two.read_bytes()
    assert strip(str(pex), str(same), ["*.nothing"]) == {}
    z = zipfile.ZipFile(same)
    assert json.loads(z.read("PEX-INFO"))["pex_hash"] == "a" * 40
    assert z.namelist() == zipfile.ZipFile(pex).namelist()


def test_max_install_jobs_is_set_in_pex_info(pex, tmp_path):
    out = tmp_path / "stripped.pex"
    assert main([str(pex), str(out), "--max-install-jobs", "-1", *PATTERNS]) == 0
    info = json.loads(zipfile.ZipFile(out).read("PEX-INFO"))
    assert info["max_install_jobs"] == -1 and info["distributions"][WHEEL] != "f" * 64
    strip(str(pex), str(out), PATTERNS)  # not given: pex's value (here none) is kept
    assert "max_install_jobs" not in json.loads(zipfile.ZipFile(out).read("PEX-INFO"))


def test_usage_without_arguments(capsys):
    assert main([]) == 2
    assert "strip_pex <in.pex> <out.pex>" in capsys.readouterr().err


def write_packed_pex(root: Path) -> None:
    """A packed PEX as pex writes one: loose PEX-INFO, boot code and app sources, one zip per
    wheel under `.deps/` (whose `.layout.json` names no fingerprint)."""
    info = {"pex_hash": "a" * 40, "distributions": {WHEEL: "f" * 64, PURE: "e" * 64}}
    (root / ".deps").mkdir(parents=True)
    (root / "PEX-INFO").write_text(json.dumps(info))
    (root / "__main__.py").write_text("# pex bootstrap\n")
    (root / "__main__.py").chmod(0o755)
    (root / ".bootstrap").write_bytes(b"PK boot zip stand-in")
    (root / "imaging").mkdir()
    (root / "imaging" / "app.pyx").write_text("# the app's own files are kept\n")
    wheels = {
        WHEEL: [
            (".layout.json", b'{"stash_dir": ".prefix"}'),
            ("cuda/bindings/driver.cpython-312-x86_64-linux-gnu.so", b"\x7fELF" * 64),
            ("cuda/bindings/driver.pyx", b"# cython source\n" * 100),
            ("cuda/bindings/driver.cpp", b"// generated\n" * 1000),
        ],
        PURE: [(".layout.json", b"{}"), ("cuda/pathfinder/__init__.py", b"x = 1\n")],
    }
    for wheel, entries in wheels.items():
        with zipfile.ZipFile(root / ".deps" / wheel, "w") as z:
            for name, data in entries:
                info_ = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info_.external_attr = 0o100644 << 16  # as pex writes a file installed 0644
                z.writestr(info_, data, compress_type=zipfile.ZIP_DEFLATED)


def test_a_packed_pex_is_stripped_wheel_by_wheel_and_the_rest_copied(tmp_path: Path) -> None:
    src, out = tmp_path / "in" / "app.pex", tmp_path / "out" / "app.pex"
    write_packed_pex(src)
    assert strip(str(src), str(out), PATTERNS, max_install_jobs=-1) == {WHEEL: 2}
    with zipfile.ZipFile(out / ".deps" / WHEEL) as z:
        assert z.namelist() == [
            ".layout.json",
            "cuda/bindings/driver.cpython-312-x86_64-linux-gnu.so",
        ]
        assert json.loads(z.read(".layout.json")) == {"stash_dir": ".prefix"}
    # an untouched wheel is the same file, so a by-hash transfer skips it
    assert (out / ".deps" / PURE).read_bytes() == (src / ".deps" / PURE).read_bytes()
    info = json.loads((out / "PEX-INFO").read_text())
    removed = ["cuda/bindings/driver.pyx", "cuda/bindings/driver.cpp"]
    assert info["distributions"] == {WHEEL: new_fingerprint("f" * 64, removed), PURE: "e" * 64}
    assert info["pex_hash"] == "a" * 40 and info["max_install_jobs"] == -1
    assert (out / "imaging" / "app.pyx").read_bytes() == (src / "imaging" / "app.pyx").read_bytes()
    assert (out / "__main__.py").stat().st_mode & 0o111
    again = tmp_path / "again" / "app.pex"
    strip(str(src), str(again), PATTERNS, max_install_jobs=-1)
    for path in out.rglob("*"):
        if path.is_file():
            assert path.read_bytes() == (again / path.relative_to(out)).read_bytes(), path


def _tree(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode & 0o777)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _zip_modes(path: Path) -> dict:
    with zipfile.ZipFile(path) as z:
        return {i.filename: (i.external_attr >> 16) & 0o777 for i in z.infolist()}


def test_bytecode_and_modes_of_the_machine_state_do_not_reach_the_output(tmp_path, monkeypatch):
    """The same packed PEX as pex writes it from a clean PEX_ROOT under umask 022, and from one
    where an earlier run left `__pycache__/` in an installed wheel, under umask 077 with
    `.bootstrap` executable: one output, byte for byte and mode for mode."""
    import os

    outputs = []
    for umask, dirty in ((0o022, False), (0o077, True)):
        old = os.umask(umask)
        try:
            src = tmp_path / f"in-{umask:o}" / "app.pex"
            write_packed_pex(src)
            private = 0o700 if dirty else 0o755
            (src / ".bootstrap").chmod(private if dirty else 0o644)
            with zipfile.ZipFile(src / ".deps" / PURE, "a") as z:
                for name, mode in (("cuda/pathfinder/tool.sh", private),):
                    info_ = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                    info_.external_attr = (0o100000 | mode) << 16
                    z.writestr(info_, b"#!/bin/sh\n")
                if dirty:
                    z.writestr("cuda/pathfinder/__pycache__/__init__.cpython-312.pyc", b"\x00")
            out = tmp_path / f"out-{umask:o}" / "app.pex"
            assert strip(str(src), str(out), PATTERNS) == {WHEEL: 2}
        finally:
            os.umask(old)
        outputs.append(out)
    clean, dirty_out = outputs
    assert _tree(clean) == _tree(dirty_out)
    tree = _tree(clean)
    assert tree[".bootstrap"][1] == 0o644 and tree["PEX-INFO"][1] == 0o644
    assert tree["__main__.py"][1] == 0o755 and tree[f".deps/{PURE}"][1] == 0o644
    assert _zip_modes(clean / ".deps" / PURE)["cuda/pathfinder/tool.sh"] == 0o755
    # bytecode is not content: the wheel keeps pex's fingerprint
    assert json.loads((dirty_out / "PEX-INFO").read_text())["distributions"][PURE] == "e" * 64


def test_bytecode_in_a_zipapp_wheel_is_left_out_without_a_new_fingerprint(pex, tmp_path):
    with zipfile.ZipFile(pex, "a") as z:
        # pex writes the directory too, as its own entry, when one was left behind
        z.writestr(f".deps/{PURE}/cuda/pathfinder/__pycache__/", b"")
        z.writestr(f".deps/{PURE}/cuda/pathfinder/__pycache__/__init__.cpython-312.pyc", b"\x00")
    out = tmp_path / "out" / "app.pex"
    assert strip(str(pex), str(out), PATTERNS) == {WHEEL: 3}
    with zipfile.ZipFile(out) as z:
        assert not [n for n in z.namelist() if "__pycache__" in n]
        assert json.loads(z.read("PEX-INFO"))["distributions"][PURE] == "e" * 64
