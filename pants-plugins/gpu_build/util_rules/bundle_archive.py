"""The bundle as one byte-reproducible `.tar.gz` beside its directory (the `archive` field).

Like Pants' `CreateArchive`, with no timestamps, owners or order of the filesystem in the bytes.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from dataclasses import dataclass
from typing import IO, Iterable, cast

from pants.engine.fs import CreateDigest, Digest, DigestContents, FileContent
from pants.engine.rules import Get, collect_rules, rule


def deterministic_tar_gz(files: Iterable[FileContent]) -> bytes:
    """A .tar.gz of `files` whose bytes depend on their paths and contents only."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz:
        # GzipFile is a binary file object; typeshed's IO[bytes] does not say so.
        with tarfile.open(fileobj=cast(IO[bytes], gz), mode="w", format=tarfile.PAX_FORMAT) as tar:
            for file in sorted(files, key=lambda f: f.path):
                info = tarfile.TarInfo(file.path)
                info.size = len(file.content)
                info.mode = 0o755 if file.is_executable else 0o644
                info.mtime = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(file.content))
    return buffer.getvalue()


@dataclass(frozen=True)
class CreateDeterministicTarGz:
    digest: Digest  # what goes into the archive, at the paths it has there
    output_filename: str


@rule
async def create_deterministic_tar_gz(request: CreateDeterministicTarGz) -> Digest:
    contents = await Get(DigestContents, Digest, request.digest)
    archive = FileContent(request.output_filename, deterministic_tar_gz(contents))
    return await Get(Digest, CreateDigest([archive]))


def rules():
    return collect_rules()
