"""``python -m gpu_runtime platform``: the complete platform pex would write for this interpreter.

The references: the file pex wrote on the H200 (x86_64, CPython 3.12, glibc 2.35), and for the
interpreter running the test, packaging (whose tags and markers pex reports).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig

import pytest

from gpu_runtime.cli import complete_platform
from gpu_runtime.cli.commands import main
from gpu_runtime.cli.complete_platform import cpython_tags, linux_platforms

PLATFORMS = "3rdparty/platforms"


def _load(name: str) -> dict:
    with open(os.path.join(PLATFORMS, f"{name}.json")) as f:
        return json.load(f)


def test_the_h200_file_pex_made_is_reproduced_tag_for_tag():
    made_by_pex = _load("h200_x86_64_cp312")["compatible_tags"]
    platforms = linux_platforms("linux-x86_64", (2, 35), is_32bit=False)
    assert cpython_tags((3, 12), ["cp312"], platforms) == made_by_pex


def test_aarch64_has_no_manylinux_tags_older_than_2_17():
    """packaging lists manylinux_2_5..2_16 (and manylinux2010/1) for x86 only; the Jetson file,
    derived from an x86_64 inspection, kept them. Otherwise the same tags, in the same order."""
    derived = _load("jetson_orin_cp310")["compatible_tags"]
    old = ("manylinux1_", "manylinux2010_") + tuple(f"manylinux_2_{n}_" for n in range(5, 17))
    platforms = linux_platforms("linux-aarch64", (2, 35), is_32bit=False)
    assert platforms[-3:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64", "linux_aarch64"]
    assert cpython_tags((3, 10), ["cp310"], platforms) == [
        t for t in derived if not t.split("-")[2].startswith(old)
    ]


def test_a_free_threaded_or_debug_build_has_its_own_abi_first():
    tags = cpython_tags((3, 13), ["cp313t"], ["linux_x86_64"])
    assert tags[:2] == ["cp313-cp313t-linux_x86_64", "cp313-none-linux_x86_64"]
    assert not [t for t in tags if "-abi3-" in t]
    debug = cpython_tags((3, 12), ["cp312d", "cp312"], ["linux_x86_64"])
    assert debug[:3] == [
        "cp312-cp312d-linux_x86_64",
        "cp312-cp312-linux_x86_64",
        "cp312-abi3-linux_x86_64",
    ]


def test_this_interpreter_as_packaging_sees_it(capsys):
    """packaging 26.3 moved linux_<arch> before the manylinux tags; pex's vendored packaging
    (and so the files pex writes) lists it last, which is the order kept here."""
    tags = pytest.importorskip("packaging.tags")
    packaging_markers = pytest.importorskip("packaging.markers")
    assert main(["platform"]) == 0
    printed = json.loads(capsys.readouterr().out)
    theirs = list(tags.platform_tags())
    native = [p for p in theirs if p.startswith("linux_")]
    platforms = [p for p in theirs if p not in native] + native
    glibc = complete_platform.glibc_version()
    assert glibc is not None
    assert platforms == linux_platforms(sysconfig.get_platform(), glibc, sys.maxsize <= 2**32)
    expected = list(tags.cpython_tags(platforms=platforms)) + list(
        tags.compatible_tags(interpreter=f"cp{tags.interpreter_version()}", platforms=platforms)
    )
    assert printed["compatible_tags"] == [str(t) for t in expected]
    assert set(printed["compatible_tags"]) == {str(t) for t in tags.sys_tags()}
    assert printed["marker_environment"] == packaging_markers.default_environment()


def test_the_same_form_as_the_files_pex_made(capsys):
    assert main(["platform"]) == 0
    out = capsys.readouterr().out
    printed = json.loads(out)
    reference = _load("h200_x86_64_cp312")
    assert sorted(printed) == sorted(reference) == ["compatible_tags", "marker_environment"]
    assert sorted(printed["marker_environment"]) == sorted(reference["marker_environment"])
    markers = printed["marker_environment"]
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert markers["python_version"] == version and markers["implementation_name"] == "cpython"
    assert markers["python_full_version"].startswith(version + ".")
    assert out == complete_platform.to_json(printed)  # indent 1, sorted keys, as in the files


def test_output_file(tmp_path, capsys):
    path = tmp_path / "device.json"
    assert main(["platform", "-o", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"wrote {path}: CPython " in captured.err and "complete_platforms" in captured.err
    assert json.loads(path.read_text()) == complete_platform.complete_platform()


def test_an_unwritable_output_is_one_line(tmp_path, capsys):
    assert main(["platform", "-o", str(tmp_path / "missing" / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err and "pick a writable path" in err


def test_the_file_runs_alone_on_the_standard_library(tmp_path):
    """A device with nothing but python3: the module copied on its own, in isolated mode."""
    alone = tmp_path / "complete_platform.py"
    alone.write_text(open(complete_platform.__file__).read())
    out = subprocess.run(
        [sys.executable, "-I", str(alone)], check=True, capture_output=True, text=True, cwd=tmp_path
    ).stdout
    assert json.loads(out) == complete_platform.complete_platform()


def test_glibc_version_from_confstr(monkeypatch):
    monkeypatch.setattr(os, "confstr", lambda name: "glibc 2.35", raising=False)
    assert complete_platform.glibc_version() == (2, 35)
    monkeypatch.setattr(os, "confstr", lambda name: None, raising=False)
    assert complete_platform.glibc_version() is None


def test_not_glibc_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(complete_platform, "glibc_version", lambda: None)
    assert main(["platform"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "musl" in err and "pex3 interpreter inspect" in err


def test_the_file_alone_says_which_python_it_needs_on_an_old_one(tmp_path):
    """Run alone (copied to a device), on CPython 3.6: one line, not a SyntaxError."""
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    old = os.path.join(pyenv, "versions", "3.6.15", "bin", "python3")
    if not os.path.exists(old):
        pytest.skip(f"no CPython 3.6 here ({old} is absent)")
    done = subprocess.run(
        [old, "-S", complete_platform.__file__], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert done.stderr.startswith("error: complete_platform.py needs Python 3.7 or newer")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_file_and_the_package_check_the_same_version():
    import gpu_runtime

    assert complete_platform.REQUIRES_PYTHON == gpu_runtime.PLATFORM_PYTHON


def test_a_device_not_at_hand_from_this_interpreter(tmp_path, capsys):
    """`--machine aarch64 --glibc 2.35`: this CPython's tags as the device's own file would list
    them (no x86-only manylinux tags), and its markers on that machine."""
    path = tmp_path / "orin.json"
    assert main(["platform", "--machine", "aarch64", "--glibc", "2.35", "-o", str(path)]) == 0
    assert "aarch64, glibc 2.35" in capsys.readouterr().err
    made = json.loads(path.read_text())
    platforms = linux_platforms("linux-aarch64", (2, 35), is_32bit=False)
    assert made["compatible_tags"] == cpython_tags(
        sys.version_info[:2], complete_platform._cpython_abis(), platforms
    )
    markers = made["marker_environment"]
    here = complete_platform.marker_environment()
    assert markers == dict(
        here, platform_machine="aarch64", platform_release="", platform_version=""
    )
    # The Jetson file in 3rdparty/platforms, made so from CPython 3.10, less the x86-only tags.
    if sys.version_info[:2] == (3, 10):
        derived = _load("jetson_orin_cp310")["compatible_tags"]
        assert made["compatible_tags"] == [t for t in derived if t in made["compatible_tags"]]


@pytest.mark.parametrize(
    "args",
    [["--machine", "aarch64"], ["--glibc", "2.35"], ["--machine", "aarch64", "--glibc", "2"]],
)
def test_a_device_not_at_hand_needs_machine_and_glibc(args, capsys):
    assert main(["platform", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
