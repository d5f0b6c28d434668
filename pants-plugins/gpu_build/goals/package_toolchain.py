"""`pants package` on a `gpu_toolchain`: the compiles' toolchain PEX as one file for JIT mode.

Built from `toolchain.toolchain_pex_request`, the definition the compiles use, and normalised
by the bundle's strip step: pex copies every file of its installed wheels under PEX_ROOT,
bytecode an earlier run wrote there included, so Pants' own `pex_binary` gave a toolchain PEX
whose bytes depended on what had run on the machine before.
"""

from __future__ import annotations

from dataclasses import dataclass

from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.util_rules.pex import Pex, PexRequest
from pants.core.goals.package import BuiltPackage, BuiltPackageArtifact, PackageFieldSet
from pants.engine.rules import Get, collect_rules, rule
from pants.engine.unions import UnionRule
from pants.util.logging import LogLevel

from gpu_build.subsystems.toolchains import GpuToolchains
from gpu_build.target_types import GpuToolchainNameField, GpuToolchainOutputPathField
from gpu_build.util_rules.bundle_pex import StrippedPex, StripPexRequest
from gpu_build.util_rules.toolchain import CompilerSources, toolchain_pex_request, toolchain_spec


@dataclass(frozen=True)
class GpuToolchainPackageFieldSet(PackageFieldSet):
    required_fields = (GpuToolchainNameField,)

    toolchain: GpuToolchainNameField
    output_path: GpuToolchainOutputPathField


@rule(desc="Package a GPU toolchain PEX", level=LogLevel.DEBUG)
async def package_gpu_toolchain(
    field_set: GpuToolchainPackageFieldSet,
    toolchains: GpuToolchains,
    python_setup: PythonSetup,
    compiler: CompilerSources,
) -> BuiltPackage:
    spec = toolchain_spec(
        toolchains, field_set.toolchain.value, origin=f"The gpu_toolchain {field_set.address}"
    )
    path = field_set.output_path.value_or_default(file_ending="pex")
    pex = await Get(
        Pex,
        PexRequest,
        toolchain_pex_request(
            spec, python_setup, compiler, output_filename=path, internal_only=False
        ),
    )
    stripped = await Get(StrippedPex, StripPexRequest(pex.digest, path, str(field_set.address)))
    return BuiltPackage(stripped.digest, (BuiltPackageArtifact(path),))


def rules():
    return [*collect_rules(), UnionRule(PackageFieldSet, GpuToolchainPackageFieldSet)]
