"""A stdlib-only script of this package as a PEX to run as a hermetic process (the rule).

Why processes: what reads or rewrites a whole bundle (its app PEX and wheels) runs outside the
engine, cached like any process, as Pants' own Dockerfile parser does.
"""

from __future__ import annotations

from dataclasses import dataclass

from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.target_types import EntryPoint
from pants.backend.python.util_rules.interpreter_constraints import InterpreterConstraints
from pants.backend.python.util_rules.pex import PexRequest, VenvPex
from pants.engine.fs import CreateDigest, Digest, FileContent
from pants.engine.rules import Get, collect_rules, rule
from pants.util.resources import read_resource


@dataclass(frozen=True)
class ScriptToolRequest:
    script: str  # the file name of a module of gpu_build.scripts, e.g. "strip_pex.py"


@dataclass(frozen=True)
class ScriptTool:
    pex: VenvPex


@rule(desc="Build a gpu_build script's PEX")
async def script_tool(request: ScriptToolRequest, python_setup: PythonSetup) -> ScriptTool:
    script = FileContent(request.script, read_resource("gpu_build.scripts", request.script))
    name = request.script[: -len(".py")]
    pex = await Get(
        VenvPex,
        PexRequest(
            output_filename=f"gpu_bundle_{name}.pex",
            internal_only=True,
            interpreter_constraints=InterpreterConstraints(python_setup.interpreter_constraints),
            sources=await Get(Digest, CreateDigest([script])),
            main=EntryPoint(name),
        ),
    )
    return ScriptTool(pex)


def rules():
    return collect_rules()
