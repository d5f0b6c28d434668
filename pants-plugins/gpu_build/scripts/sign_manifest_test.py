"""sign_manifest reads its key and manifest files by gpu_spec.safe_read, before cryptography."""

from __future__ import annotations

import ast
import os

import pytest

from gpu_build.scripts import sign_manifest
from gpu_build.util_rules.bundle_signing import SIGNING_SPEC


def test_a_fifo_or_huge_key_file_is_one_line_not_a_hang(tmp_path):
    fifo = tmp_path / "key.pem"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit, match="key.pem: the bundle signing key is a FIFO, not a reg"):
        sign_manifest.main(["public-key", str(fifo)])
    huge = tmp_path / "huge.pem"
    with open(huge, "wb") as f:
        f.truncate(1 << 20)
    with pytest.raises(SystemExit, match="over the limit of 65536"):
        sign_manifest.main(["public-key", str(huge)])
    with pytest.raises(SystemExit, match="cannot read the bundle signing key .*gone.pem"):
        sign_manifest.main(["public-key", str(tmp_path / "gone.pem")])


def test_the_signing_pex_carries_what_of_gpu_spec_the_script_imports():
    with open(sign_manifest.__file__) as f:
        tree = ast.parse(f.read())
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpu_spec")
    }
    shipped = {"gpu_spec." + n[: -len(".py")] for n in SIGNING_SPEC if n != "__init__.py"}
    assert imported and imported <= shipped and "__init__.py" in SIGNING_SPEC
