"""`app_file_problems`: what may sit beside cache/ (the rule `verify` and the runtime share)."""

from __future__ import annotations

import os

from gpu_spec.bundle_files import app_file_problems, is_bytecode_of_listed

LISTED = {"app.pex/__main__.py": "0" * 64, "app.pex/.deps/a.whl": "1" * 64, "app": "2" * 64}


def _bundle(root) -> str:
    for rel in LISTED:
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(rel)
    return str(root)


def test_the_built_app_passes_and_so_does_its_bytecode(tmp_path):
    root = _bundle(tmp_path / "b")
    os.makedirs(os.path.join(root, "app.pex", "__pycache__"))
    open(os.path.join(root, "app.pex", "__pycache__", "__main__.cpython-39.pyc"), "w").close()
    os.makedirs(os.path.join(root, "cache"))  # not the app's: "files" are verify's
    open(os.path.join(root, "cache", "extra"), "w").close()
    assert app_file_problems(root, LISTED) == {}


def test_bytecode_counts_only_for_a_listed_source():
    assert is_bytecode_of_listed("app.pex/__pycache__/__main__.cpython-312.pyc", LISTED)
    assert not is_bytecode_of_listed("app.pex/__pycache__/other.cpython-312.pyc", LISTED)
    assert not is_bytecode_of_listed("app.pex/__pycache__/__main__.pyc", LISTED)
    assert not is_bytecode_of_listed("app.pex/__pycache__/__main__.cpython-312.pth", LISTED)
    assert not is_bytecode_of_listed("app.pex/__main__.cpython-312.pyc", LISTED)


def test_an_unlisted_file_or_link_in_the_app_is_named(tmp_path):
    root = _bundle(tmp_path / "b")
    open(os.path.join(root, "app.pex", "zzz.pth"), "w").close()
    os.symlink(os.path.join(root, "app"), os.path.join(root, "app.pex", ".deps", "link"))
    os.makedirs(os.path.join(root, "app.pex", "__pycache__"))
    open(os.path.join(root, "app.pex", "__pycache__", "x.pth"), "w").close()
    problems = app_file_problems(root, LISTED)
    assert sorted(problems) == [
        "app.pex/.deps/link",
        "app.pex/__pycache__/x.pth",
        "app.pex/zzz.pth",
    ]
    line = problems["app.pex/zzz.pth"]
    assert "\n" not in line and "is not one of the app's files" in line
    assert "remove app.pex/zzz.pth" in line and "pants package" in line


def test_a_symlink_out_of_the_bundle_is_named_once(tmp_path):
    root = _bundle(tmp_path / "b")
    moved = tmp_path / "elsewhere" / "app.pex"
    os.makedirs(moved.parent)
    os.rename(os.path.join(root, "app.pex"), moved)
    os.symlink(moved, os.path.join(root, "app.pex"))
    assert list(app_file_problems(root, LISTED)) == ["app.pex"]
    assert f"is a symlink to {moved}, outside the bundle directory" in (
        app_file_problems(root, LISTED)["app.pex"]
    )


def test_links_inside_the_bundle_are_followed(tmp_path):
    """A deployment's `current` -> releases/<id>, or a listed file linked to a twin inside."""
    real = _bundle(tmp_path / "releases" / "r1")
    os.symlink(real, tmp_path / "current")
    os.rename(os.path.join(real, "app"), os.path.join(real, "twin"))
    os.symlink("twin", os.path.join(real, "app"))
    assert app_file_problems(str(tmp_path / "current"), {**LISTED}) == {}
    missing = {**LISTED, "app.pex/gone.py": "3" * 64}
    assert app_file_problems(real, missing) == {}  # missing is verify's, not this rule's
