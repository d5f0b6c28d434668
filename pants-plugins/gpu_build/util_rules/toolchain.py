"""The pinned compile toolchain: the compiler's code inside a PEX of one locked resolve.

Modelled on Pants' Dockerfile parser: our own code runs from a PEX built from a lockfile, so
every compile uses exactly the locked NVIDIA wheels and never the host's CUDA. The code is the
compiler the plugin wheel embeds (`embedded_compiler`), or the target `[gpu-toolchains].compiler`
names, through the engine: editing that compiler rebuilds the PEX and re-runs the compiles by
ordinary invalidation.
"""

from __future__ import annotations

from dataclasses import dataclass

from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.target_types import EntryPoint
from pants.backend.python.util_rules import pex
from pants.backend.python.util_rules.interpreter_constraints import InterpreterConstraints
from pants.backend.python.util_rules.pex import PexRequest, VenvPex
from pants.backend.python.util_rules.pex_requirements import PexRequirements, Resolve
from pants.backend.python.util_rules.python_sources import (
    PythonSourceFilesRequest,
    StrippedPythonSourceFiles,
)
from pants.engine.addresses import Addresses, UnparsedAddressInputs
from pants.engine.fs import Digest
from pants.engine.rules import Get, collect_rules, rule
from pants.engine.target import TransitiveTargets, TransitiveTargetsRequest
from pants.util.strutil import softwrap

from gpu_build.subsystems.toolchains import GpuToolchains
from gpu_build.util_rules import embedded_compiler
from gpu_build.util_rules.embedded_compiler import EmbeddedCompiler
from gpu_spec.ptx_isa import toolchain_ptx_isa, unknown_toolchain

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
        isa = toolchain_ptx_isa(self.cuda)
        if isa is None:
            raise UnknownToolchainError(
                f"GPU toolchain {self.name!r} of `[gpu-toolchains].toolchains`: "
                f"{unknown_toolchain(self.cuda)}."
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
    except (KeyError, TypeError) as e:
        raise UnknownToolchainError(
            f"`[gpu-toolchains].toolchains` entry {name!r} must be "
            f'{{"resolve": "<resolve>", "cuda": "<major.minor>"}}, got {entry!r}.'
        ) from e


@dataclass(frozen=True)
class CompilerSources:
    """gpu_compiler and gpu_spec as the toolchain PEX takes them: the compiler embedded in the
    plugin, or the `[gpu-toolchains].compiler` target's sources and their dependencies', source
    roots stripped."""

    digest: Digest


@rule(desc="Find the GPU kernel compiler's sources")
async def compiler_sources(subsystem: GpuToolchains) -> CompilerSources:
    if not subsystem.compiler:
        embedded = await Get(EmbeddedCompiler)
        return CompilerSources(embedded.digest)
    addresses = await Get(
        Addresses,
        UnparsedAddressInputs(
            (subsystem.compiler,),
            owning_address=None,
            description_of_origin="the option `[gpu-toolchains].compiler`",
        ),
    )
    transitive = await Get(TransitiveTargets, TransitiveTargetsRequest(addresses))
    sources = await Get(
        StrippedPythonSourceFiles,
        PythonSourceFilesRequest(transitive.closure, include_resources=True),
    )
    return CompilerSources(sources.stripped_source_files.snapshot.digest)


@dataclass(frozen=True)
class ToolchainPexRequest:
    spec: ToolchainSpec


@dataclass(frozen=True)
class ToolchainPex:
    spec: ToolchainSpec
    pex: VenvPex


def toolchain_pex_request(
    spec: ToolchainSpec,
    python_setup: PythonSetup,
    compiler: CompilerSources,
    *,
    output_filename: str,
    internal_only: bool,
) -> PexRequest:
    """The one definition of a toolchain PEX: the entire lockfile of the toolchain's resolve,
    the compiler's sources, `gpu_compiler` as its entry point, venv site-packages copies. The
    compiles run it internally (`build_toolchain_pex`); `pants package` of a `gpu_toolchain`
    writes the same PEX as a file for JIT mode (`goals/package_toolchain.py`)."""
    if spec.resolve not in python_setup.resolves:
        raise UnknownToolchainError(
            f"GPU toolchain {spec.name!r} uses the resolve {spec.resolve!r}, which "
            f"`[python].resolves` does not define."
        )
    ics = python_setup.resolves_to_interpreter_constraints.get(spec.resolve)
    # cuda-pathfinder finds NVIDIA's libraries only in real site-packages directories; a PEX
    # run as a file boots that venv itself (`--venv`), as the internal one is run.
    venv_args: tuple[str, ...] = ("--venv-site-packages-copies",)
    if not internal_only:
        venv_args = ("--venv", "prepend", *venv_args)
    return PexRequest(
        output_filename=output_filename,
        internal_only=internal_only,
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
        sources=compiler.digest,
        main=EntryPoint(COMPILER_PACKAGE),
        additional_args=venv_args,
        description=f"Build the GPU kernel toolchain {spec.name} ({spec.resolve})",
    )


@rule(desc="Build a GPU kernel toolchain PEX")
async def build_toolchain_pex(
    request: ToolchainPexRequest, python_setup: PythonSetup, compiler: CompilerSources
) -> ToolchainPex:
    spec = request.spec
    pex_request = toolchain_pex_request(
        spec,
        python_setup,
        compiler,
        output_filename=f"gpu_toolchain_{spec.name}.pex",
        internal_only=True,
    )
    return ToolchainPex(spec=spec, pex=await Get(VenvPex, PexRequest, pex_request))


def rules():
    return [*collect_rules(), *embedded_compiler.rules(), *pex.rules()]
