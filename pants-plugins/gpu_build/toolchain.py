"""The pinned compile toolchain: our `gpu_compiler` package inside a PEX of one locked resolve.

Modelled on Pants' Dockerfile parser: our own script (here a package) is read as a resource of
the plugin's Python path and run from a PEX built from a lockfile, so every compile uses exactly
the locked NVIDIA wheels and never the host's CUDA.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass

from gpu_compiler import arch

from gpu_build.subsystem import GpuToolchains
from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.target_types import EntryPoint
from pants.backend.python.util_rules import pex
from pants.backend.python.util_rules.interpreter_constraints import InterpreterConstraints
from pants.backend.python.util_rules.pex import PexRequest, VenvPex
from pants.backend.python.util_rules.pex_requirements import PexRequirements, Resolve
from pants.engine.fs import CreateDigest, Digest, FileContent
from pants.engine.rules import Get, collect_rules, rule
from pants.util.strutil import softwrap

COMPILER_PACKAGE = "gpu_compiler"


class UnknownToolchainError(ValueError):
    pass


@dataclass(frozen=True)
class ToolchainSpec:
    """One entry of `[gpu-toolchains].toolchains`, checked."""

    name: str
    resolve: str
    cuda: str

    @property
    def ptx_isa(self) -> str:
        """The PTX ISA version this toolchain's NVVM/NVRTC emit."""
        isa = arch.toolchain_ptx_isa(self.cuda)
        if isa is None:
            raise UnknownToolchainError(
                f"GPU toolchain {self.name!r} says CUDA {self.cuda}, whose PTX ISA is not known "
                f"to gpu_compiler.arch; add it there."
            )
        return isa


def toolchain_spec(subsystem: GpuToolchains, name: str | None, *, origin: str) -> ToolchainSpec:
    """Looks a toolchain up by name (None: the default), with an error that lists the choices."""
    name = name or subsystem.default_toolchain
    entry = subsystem.toolchains.get(name)
    if entry is None:
        raise UnknownToolchainError(
            softwrap(
                f"""
                {origin} asks for the GPU toolchain {name!r}, which `[gpu-toolchains].toolchains`
                does not define. Defined: {sorted(subsystem.toolchains)}.
                """
            )
        )
    try:
        return ToolchainSpec(name=name, resolve=entry["resolve"], cuda=str(entry["cuda"]))
    except (KeyError, TypeError):
        raise UnknownToolchainError(
            f"`[gpu-toolchains].toolchains` entry {name!r} must be "
            f'{{"resolve": "<resolve>", "cuda": "<major.minor>"}}, got {entry!r}.'
        )


def compiler_sources() -> tuple[FileContent, ...]:
    """The `gpu_compiler` package's modules (tests excluded), as they will sit in the PEX."""
    package = importlib.resources.files(COMPILER_PACKAGE)
    return tuple(
        FileContent(f"{COMPILER_PACKAGE}/{entry.name}", entry.read_bytes())
        for entry in sorted(package.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".py") and not entry.name.endswith("_test.py")
    )


@dataclass(frozen=True)
class ToolchainPexRequest:
    spec: ToolchainSpec


@dataclass(frozen=True)
class ToolchainPex:
    spec: ToolchainSpec
    pex: VenvPex


@rule(desc="Build a GPU kernel toolchain PEX")
async def build_toolchain_pex(request: ToolchainPexRequest, python_setup: PythonSetup) -> ToolchainPex:
    spec = request.spec
    if spec.resolve not in python_setup.resolves:
        raise UnknownToolchainError(
            f"GPU toolchain {spec.name!r} uses the resolve {spec.resolve!r}, which "
            f"`[python].resolves` does not define."
        )
    sources = await Get(Digest, CreateDigest(compiler_sources()))
    ics = python_setup.resolves_to_interpreter_constraints.get(spec.resolve)
    venv_pex = await Get(
        VenvPex,
        PexRequest(
            output_filename=f"gpu_toolchain_{spec.name}.pex",
            internal_only=True,
            requirements=PexRequirements(
                (),
                from_superset=Resolve(spec.resolve, use_entire_lockfile=True),
                description_of_origin=f"the GPU toolchain {spec.name!r}",
            ),
            interpreter_constraints=(
                InterpreterConstraints(ics)
                if ics
                else InterpreterConstraints(python_setup.interpreter_constraints)
            ),
            sources=sources,
            main=EntryPoint(COMPILER_PACKAGE),
            # cuda-pathfinder finds NVIDIA's libraries only in real site-packages directories.
            additional_args=("--venv-site-packages-copies",),
            description=f"Build the GPU kernel toolchain {spec.name} ({spec.resolve})",
        ),
    )
    return ToolchainPex(spec=spec, pex=venv_pex)


def rules():
    return [*collect_rules(), *pex.rules()]
