"""`pants run` on a `deploy_bundle`: its app, run from the packaged bundle, strictly.

As Pants users expect of a deployable: what runs is what `pants package` writes (the PEX beside
its `cache/`), and `GPU_RUNTIME_STRICT=1` makes any kernel or capability the bundle lacks an
error instead of a compile, exactly as on the device. (`pants run` of the `pex_binary` itself is
JIT mode: see `gpu_build.util_rules.jit_index`.)

The PEX is run by an interpreter Pants resolves ([python-bootstrap].search_path), of the CPython
version the bundle was built for, not by its shebang's bare `python3.X`, which on a machine
with pyenv can be a shim that cannot run. A bundle built for another machine (another CPU
architecture; the complete platforms say) is refused in one line naming what it was built for.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Tuple

from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.target_types import PexCompletePlatformsField
from pants.backend.python.util_rules.interpreter_constraints import InterpreterConstraints
from pants.backend.python.util_rules.pex_environment import PythonExecutable
from pants.core.goals.package import BuiltPackage
from pants.core.goals.run import RunFieldSet, RunInSandboxBehavior, RunRequest
from pants.core.target_types import FileSourceField
from pants.core.util_rules.source_files import SourceFiles, SourceFilesRequest
from pants.engine.addresses import UnparsedAddressInputs
from pants.engine.fs import Digest, DigestContents
from pants.engine.platform import Platform
from pants.engine.rules import Get, collect_rules, rule
from pants.engine.target import Targets

from gpu_build import validation
from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet
from gpu_build.util_rules.bundle_pex import bundle_binary
from gpu_build.validation import DeployBundleValidationRequest, ValidatedDeployBundle

STRICT_ENV = {"GPU_RUNTIME_STRICT": "1"}
# Pants' platform -> the `platform_machine` of a complete platform built for it
MACHINES = {
    Platform.linux_x86_64: "x86_64",
    Platform.linux_arm64: "aarch64",
    Platform.macos_x86_64: "x86_64",
    Platform.macos_arm64: "arm64",
}


@dataclass(frozen=True)
class DeployBundleRunFieldSet(DeployBundleFieldSet, RunFieldSet):
    # A device app is no build step: `experimental_run_in_sandbox` has no use for it.
    run_in_sandbox_behavior = RunInSandboxBehavior.NOT_SUPPORTED

    def package_field_set(self) -> DeployBundleFieldSet:
        return DeployBundleFieldSet(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(DeployBundleFieldSet)}
        )


@dataclass(frozen=True)
class BuiltFor:
    """What a complete platform says a bundle runs on."""

    machine: str  # "x86_64", "aarch64"
    python: str  # "3.12"
    source: str  # the JSON file it was read from

    def describe(self) -> str:
        return f"{self.machine} / CPython {self.python} ({self.source})"


def built_for(files: Iterable[Tuple[str, bytes]]) -> Tuple[BuiltFor, ...]:
    """The machines of complete-platform JSON files (path, content); an unreadable one is an
    error naming it."""
    out = []
    for path, content in files:
        try:
            env = json.loads(content)["marker_environment"]
            out.append(BuiltFor(env["platform_machine"], env["python_version"], path))
        except (ValueError, KeyError, TypeError) as e:
            raise DeployBundleError(
                f"{path} is no Pex complete platform (no marker_environment with "
                f"platform_machine and python_version: {e!r}): regenerate it on the device with "
                f"`python3 -m gpu_runtime platform -o <file>`"
            ) from None
    return tuple(out)


def runnable_here(
    bundle: str, platforms: Sequence[BuiltFor], machine: str
) -> Optional[InterpreterConstraints]:
    """The interpreters that can run the bundle's PEX on a `machine`, or None when it was built
    for the interpreters of this machine (no complete platforms). Refuses another machine."""
    if not platforms:
        return None
    here = [p for p in platforms if p.machine == machine]
    if not here:
        built = "; ".join(p.describe() for p in platforms)
        raise DeployBundleError(
            f"`pants run` of {bundle}: it was built for {built}, and this machine is {machine}: "
            f"run it on such a device (copy dist/ there), or `pants run` a deploy_bundle whose "
            f"complete_platforms match this machine"
        )
    return InterpreterConstraints(sorted({f"CPython=={p.python}.*" for p in here}))


def bundle_run_request(
    package: BuiltPackage, output_dir: str, pex_name: str, python: Optional[str] = None
) -> RunRequest:
    """Runs `<output_dir>/<pex_name>` from the materialised bundle, strict; by `python` when
    given (else by the PEX's shebang)."""
    pex = f"{{chroot}}/{output_dir}/{pex_name}"
    return RunRequest(
        digest=package.digest,
        args=(python, pex) if python else (pex,),
        extra_env=STRICT_ENV,
    )


@rule
async def run_deploy_bundle(
    field_set: DeployBundleRunFieldSet, platform: Platform, python_setup: PythonSetup
) -> RunRequest:
    # The bundle's own fields first (as `package` checks them), then what it was built for: a
    # bundle for another machine is refused before anything is built.
    await Get(ValidatedDeployBundle, DeployBundleValidationRequest(field_set.package_field_set()))
    binaries = await Get(
        Targets, UnparsedAddressInputs, field_set.binary.to_unparsed_address_inputs()
    )
    binary = bundle_binary(field_set, binaries)
    # the bundle's complete platforms, else the binary's own (what the PEX was built for)
    platforms_field = (
        field_set.complete_platforms
        if field_set.complete_platforms.value
        else binary[PexCompletePlatformsField]
    )
    platform_targets = await Get(
        Targets, UnparsedAddressInputs, platforms_field.to_unparsed_address_inputs()
    )
    sources = await Get(
        SourceFiles,
        SourceFilesRequest(
            (t.get(FileSourceField) for t in platform_targets), for_sources_types=(FileSourceField,)
        ),
    )
    contents = await Get(DigestContents, Digest, sources.snapshot.digest)
    platforms = built_for((c.path, c.content) for c in contents)
    constraints = runnable_here(str(field_set.address), platforms, MACHINES.get(platform, ""))
    if constraints is None:  # built for this machine's interpreters: the binary's constraints
        constraints = InterpreterConstraints.create_from_targets([binary], python_setup)
    python: Optional[str] = None
    if constraints:
        try:
            python = (await Get(PythonExecutable, InterpreterConstraints, constraints)).path
        except Exception as e:  # the engine's error lists what it searched
            raise DeployBundleError(
                f"`pants run` of {field_set.address}: its PEX needs {constraints}, which "
                f"[python-bootstrap].search_path does not find on this machine: install that "
                f"CPython (e.g. with pyenv) or add its directory to the search path ({e})"
            ) from None
    package = await Get(BuiltPackage, DeployBundleFieldSet, field_set.package_field_set())
    pex_name = f"{binary.address.target_name}.pex"
    return bundle_run_request(package, field_set.output_dir, pex_name, python)


def rules():
    return [*collect_rules(), *validation.rules(), *DeployBundleRunFieldSet.rules()]
