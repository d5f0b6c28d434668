"""`package` of a `gpu_kernel` through the engine, in a repo where other targets are invalid.

Pants builds every target of the repo (`AllTargets`) for Python dependency inference, so a check
of a field at construction would fail every goal on one broken target anywhere. Here the compile
process is replaced by a stand-in rule (the real one needs the toolchain PEX: see
compile_kernel_integration_test.py); everything else is the backend's own rules.
"""

from __future__ import annotations

import json
from textwrap import dedent

import pytest
from pants.backend.python import target_types_rules
from pants.backend.python.target_types import PythonSourcesGeneratorTarget, PythonSourceTarget
from pants.backend.python.util_rules import python_sources
from pants.core.goals.package import BuiltPackage
from pants.core.target_types import FilesGeneratorTarget, FileTarget
from pants.core.util_rules import source_files
from pants.engine.addresses import Address
from pants.engine.fs import CreateDigest, Digest, DigestContents, FileContent
from pants.engine.internals.scheduler import ExecutionError
from pants.engine.rules import Get, rule
from pants.engine.target import AllTargets, InvalidFieldException
from pants.testutil.rule_runner import QueryRule, RuleRunner

from gpu_build import register
from gpu_build.goals.package_kernel import GpuKernelPackageFieldSet
from gpu_build.target_types import DeployBundleTarget, GpuKernelTarget
from gpu_build.util_rules.compile_kernel import (
    CompiledKernel,
    CompiledKernels,
    KernelProcessRequest,
    KernelSources,
    KernelSourcesRequest,
    run_kernel_process,
)
from gpu_build.util_rules.toolchain import ToolchainPex, ToolchainPexRequest
from gpu_spec.capabilities import CAPABILITIES
from gpu_spec.metadata import METADATA_FILE

ROOT = "src/python"
GOOD = f"{ROOT}/app/kernels"
BAD = "scratch_bad"


@rule
async def stand_in_compile(request: KernelProcessRequest) -> CompiledKernels:
    """What the compile process would write, from the files it would read (so the kernel's
    sources and dependencies are still resolved by the real rules)."""
    field_set = request.field_set
    sources = await Get(
        KernelSources, KernelSourcesRequest(field_set.address, field_set.source.file_path)
    )
    contents = await Get(DigestContents, Digest, sources.digest)
    metadata = json.dumps({"inputs": sorted(c.path for c in contents)}).encode()
    kernels = []
    for capability in request.capabilities:
        digest = await Get(Digest, CreateDigest([FileContent(METADATA_FILE, metadata)]))
        kernels.append(
            CompiledKernel(
                address=field_set.address,
                source=field_set.source.file_path,
                capability=capability,
                toolchain=request.spec.name,
                digest=digest,
            )
        )
    return CompiledKernels(kernels)


@pytest.fixture
def rule_runner() -> RuleRunner:
    runner = RuleRunner(
        rules=[
            *(
                r
                for r in register.kernel_rules()
                if getattr(r, "func", None) is not run_kernel_process
            ),
            stand_in_compile,
            *python_sources.rules(),
            *target_types_rules.rules(),
            *source_files.rules(),
            QueryRule(BuiltPackage, [GpuKernelPackageFieldSet]),
            QueryRule(AllTargets, []),
            QueryRule(ToolchainPex, [ToolchainPexRequest]),
        ],
        target_types=[
            GpuKernelTarget,
            DeployBundleTarget,
            FileTarget,
            FilesGeneratorTarget,
            PythonSourceTarget,
            PythonSourcesGeneratorTarget,
        ],
    )
    # Python's own import inference runs a parser PEX: not what this test is about.
    runner.set_options([f"--source-root-patterns=['/{ROOT}']", "--no-python-infer-imports"])
    runner.write_files(
        {
            f"{GOOD}/BUILD": dedent(
                """\
                gpu_kernel(name="saxpy", source="saxpy.py", capabilities=["sm_90", "sm_87"],
                           toolchain="cuda13")
                files(name="helpers", sources=["pkg/*.py"])
                """
            ),
            f"{GOOD}/saxpy.py": "from app.kernels.pkg.h import X\n",
            f"{GOOD}/pkg/h.py": "X = 1\n",
            # What a new user writes in a scratch directory: each field the plugin checks, wrong.
            f"{BAD}/BUILD": dedent(
                """\
                gpu_kernel(name="bad", source="k.py", capabilities=["sm_9O"])
                gpu_kernel(name="ptx", source="k.py", ptx_version="nine")
                gpu_kernel(name="old_ptx", source="k.py", capabilities=["sm_90"], ptx_version="7.4")
                gpu_kernel(name="regs", source="k.py", max_registers=100000)
                gpu_kernel(name="defines", source="k.cu", defines=["-I/etc"])
                gpu_kernel(name="numba_defines", source="k.py", defines=["N=4"])
                gpu_kernel(name="includes", source="k.cu", include_dirs=["/usr/include"])
                deploy_bundle(name="driver", binary=":app", capabilities=[], driver_version="580.1")
                python_sources(name="app", dependencies=[":bad"])
                """
            ),
            f"{BAD}/k.py": "",
            f"{BAD}/k.cu": "",
            f"{BAD}/main.py": "",
        }
    )
    return runner


def package(rule_runner: RuleRunner, address: Address) -> BuiltPackage:
    target = rule_runner.get_target(address)
    return rule_runner.request(BuiltPackage, [GpuKernelPackageFieldSet.create(target)])


def test_a_good_kernel_packages_beside_invalid_targets(rule_runner: RuleRunner) -> None:
    # Every target of the repo builds, as Pants' Python inference needs.
    addresses = {str(t.address) for t in rule_runner.request(AllTargets, [])}
    assert f"{BAD}:bad" in addresses and f"{BAD}:driver" in addresses
    built = package(rule_runner, Address(GOOD, target_name="saxpy"))
    out = f"{GOOD.replace('/', '.')}/saxpy"
    assert [a.relpath for a in built.artifacts] == [out]
    contents = {c.path: c.content for c in rule_runner.request(DigestContents, [built.digest])}
    assert sorted(contents) == [f"{out}/sm_87/{METADATA_FILE}", f"{out}/sm_90/{METADATA_FILE}"]
    inputs = json.loads(contents[f"{out}/sm_90/{METADATA_FILE}"])["inputs"]
    assert inputs == [f"{GOOD}/pkg/h.py", f"{GOOD}/saxpy.py"]


def test_packaging_an_invalid_kernel_fails_in_one_line(rule_runner: RuleRunner) -> None:
    with pytest.raises(ExecutionError) as e:
        package(rule_runner, Address(BAD, target_name="bad"))
    errors = list(e.value.wrapped_exceptions)
    assert len(errors) == 1 and isinstance(errors[0], InvalidFieldException), errors
    assert str(errors[0]) == (
        f"The `capabilities` field in target {BAD}:bad has an invalid value: invalid GPU "
        f"capability 'sm_9O': expected one of {', '.join(CAPABILITIES)}"
    )
