"""Pure tests of the bundle's reproducible archive: the script's bytes and the process."""

from __future__ import annotations

import gzip
import io
import os
import random
import struct
import tarfile
from pathlib import Path
from typing import Iterable

from pants.engine.fs import Digest, FileContent

from gpu_build.scripts import tar_bundle
from gpu_build.util_rules.bundle_archive import IN_DIR, OUT_DIR, archive_process
from gpu_build_testutil.venv_pex import fake_venv_pex


def deterministic_tar_gz(files: Iterable[FileContent]) -> bytes:
    return tar_bundle.deterministic_tar_gz((f.path, f.content, f.is_executable) for f in files)


# -----------------------------------------------------------------------------------------------
# deterministic_tar_gz

FILES = [
    FileContent("bundle/app.pex", b"#!/usr/bin/env python3\nPEX", is_executable=True),
    FileContent("bundle/cache/manifest.json", b'{"schema": 1}\n'),
    FileContent("bundle/cache/saxpy/cuda13/sm_90/saxpy__0.ptx", b".version 9.0\n.target sm_90\n"),
    FileContent("bundle/cache/saxpy/cuda13/sm_90/saxpy__0.cubin", bytes(range(256)) * 4),
    FileContent("bundle/cache/sobel/cuda13/sm_87/sobel__0.ptx", b".version 9.0\n"),
]


def test_tar_gz_same_bytes_twice_and_in_any_order() -> None:
    first = deterministic_tar_gz(FILES)
    assert deterministic_tar_gz(list(FILES)) == first
    assert deterministic_tar_gz(reversed(FILES)) == first
    shuffled = list(FILES)
    for seed in range(5):
        random.Random(seed).shuffle(shuffled)
        assert deterministic_tar_gz(iter(shuffled)) == first


def test_tar_gz_depends_on_contents_paths_and_modes() -> None:
    base = deterministic_tar_gz(FILES)
    changed_content = [*FILES[:-1], FileContent(FILES[-1].path, b".version 8.5\n")]
    changed_path = [*FILES[:-1], FileContent("bundle/cache/x.ptx", FILES[-1].content)]
    changed_mode = [*FILES[:-1], FileContent(FILES[-1].path, FILES[-1].content, True)]
    outputs = {
        base,
        deterministic_tar_gz(changed_content),
        deterministic_tar_gz(changed_path),
        deterministic_tar_gz(changed_mode),
    }
    assert len(outputs) == 4


def test_tar_gz_header_has_no_mtime_or_name() -> None:
    data = deterministic_tar_gz(FILES)
    assert data[:2] == b"\x1f\x8b"
    flags = data[3]
    (mtime,) = struct.unpack_from("<I", data, 4)
    assert mtime == 0
    # No FNAME/FCOMMENT: the archive's own path is not embedded.
    assert flags & 0x08 == 0 and flags & 0x10 == 0


def test_tar_gz_members() -> None:
    with tarfile.open(fileobj=io.BytesIO(deterministic_tar_gz(FILES)), mode="r:gz") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted(f.path for f in FILES)
        by_path = {f.path: f for f in FILES}
        for member in members:
            expected = by_path[member.name]
            assert member.isfile()
            assert member.mtime == 0
            assert member.uid == member.gid == 0
            assert member.uname == member.gname == ""
            assert member.mode == (0o755 if expected.is_executable else 0o644)
            extracted = tar.extractfile(member)
            assert extracted is not None
            assert extracted.read() == expected.content
            # No PAX headers carrying times (atime/ctime/mtime with sub-second parts).
            assert not {"mtime", "atime", "ctime"} & set(member.pax_headers)


def test_tar_gz_empty() -> None:
    data = deterministic_tar_gz([])
    assert data == deterministic_tar_gz([])
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert tar.getmembers() == []
    assert gzip.decompress(data)  # a valid (end-of-archive) tar stream


def test_the_script_archives_a_tree_as_its_files_say(tmp_path: Path) -> None:
    root = tmp_path / IN_DIR
    for f in FILES:
        path = root / f.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f.content)
        os.chmod(path, 0o755 if f.is_executable else 0o600)  # the umask's bits do not count
    out = tmp_path / OUT_DIR / "b.tar.gz"
    assert tar_bundle.main([str(root), str(out)]) == 0
    assert out.read_bytes() == deterministic_tar_gz(FILES)


def test_archive_process() -> None:
    tool = fake_venv_pex("gpu_bundle_tar_bundle.pex")
    bundle = Digest("3" * 64, 300)
    process = archive_process(tool, bundle, "imaging_orin.tar.gz")
    assert process.venv_pex is tool and process.input_digest is bundle
    assert process.argv == (IN_DIR, f"{OUT_DIR}/imaging_orin.tar.gz")
    assert process.output_directories == (OUT_DIR,) and process.output_files is None
    assert process.description == "Archive the bundle as imaging_orin.tar.gz"
