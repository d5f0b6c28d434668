"""The bundle as one byte-reproducible `.tar.gz` beside its directory (the `archive` field).

The archive is written by `scripts/tar_bundle.py` in a process, from the bundle's digest: the
bundle (its app PEX and wheels, tens of MB) never passes through the engine's memory as
`DigestContents`, and the archive is cached like any process.
"""

from __future__ import annotations

from dataclasses import dataclass

from pants.backend.python.util_rules.pex import VenvPex, VenvPexProcess
from pants.engine.fs import AddPrefix, Digest, RemovePrefix
from pants.engine.process import ProcessResult
from pants.engine.rules import Get, MultiGet, collect_rules, rule

from gpu_build.scripts.process_tool import ScriptTool, ScriptToolRequest

SCRIPT = "tar_bundle.py"
IN_DIR = "__bundle"
OUT_DIR = "__archive"


@dataclass(frozen=True)
class CreateDeterministicTarGz:
    digest: Digest  # what goes into the archive, at the paths it has there
    output_filename: str


def archive_process(tool: VenvPex, digest: Digest, output_filename: str) -> VenvPexProcess:
    """Archives `digest`, whose files are under `IN_DIR/`, to `OUT_DIR/<output_filename>`."""
    return VenvPexProcess(
        tool,
        argv=(IN_DIR, f"{OUT_DIR}/{output_filename}"),
        input_digest=digest,
        output_directories=(OUT_DIR,),
        description=f"Archive the bundle as {output_filename}",
    )


@rule(desc="Archive a deploy bundle")
async def create_deterministic_tar_gz(request: CreateDeterministicTarGz) -> Digest:
    tool, prefixed = await MultiGet(
        Get(ScriptTool, ScriptToolRequest(SCRIPT)),
        Get(Digest, AddPrefix(request.digest, IN_DIR)),
    )
    process = archive_process(tool.pex, prefixed, request.output_filename)
    result = await Get(ProcessResult, VenvPexProcess, process)
    return await Get(Digest, RemovePrefix(result.output_digest, OUT_DIR))


def rules():
    return collect_rules()
