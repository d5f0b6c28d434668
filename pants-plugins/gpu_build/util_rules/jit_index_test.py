"""JIT mode's index through the engine: what a Python target that depends on a `gpu_kernel`
gets in its sandbox or PEX (the resources Pants' codegen makes from the kernel)."""

from __future__ import annotations

import hashlib
import json
from textwrap import dedent

import pytest
from pants.backend.python import target_types_rules
from pants.backend.python.target_types import PythonSourcesGeneratorTarget, PythonSourceTarget
from pants.backend.python.util_rules import python_sources
from pants.core.goals.package import BuiltPackage
from pants.core.target_types import FilesGeneratorTarget, FileTarget, ResourceSourceField
from pants.core.util_rules import source_files
from pants.core.util_rules.source_files import SourceFiles, SourceFilesRequest
from pants.engine.addresses import Address
from pants.engine.fs import Digest, DigestContents
from pants.engine.internals.scheduler import ExecutionError
from pants.engine.target import (
    InvalidFieldException,
    SourcesField,
    TransitiveTargets,
    TransitiveTargetsRequest,
)
from pants.testutil.rule_runner import QueryRule, RuleRunner

from gpu_build import register
from gpu_build.goals.package_kernel import GpuKernelPackageFieldSet
from gpu_build.target_types import GpuKernelTarget
from gpu_build.util_rules.compile_kernel import CompiledKernels, CompileKernelRequest
from gpu_build.util_rules.toolchain import ToolchainPex, ToolchainPexRequest

ROOT = "src/python"
K = f"{ROOT}/app/kernels"


@pytest.fixture
def rule_runner() -> RuleRunner:
    runner = RuleRunner(
        rules=[
            *register.kernel_rules(),
            *python_sources.rules(),
            *target_types_rules.rules(),
            *source_files.rules(),
            # Every rule of the backend must be reachable from a query.
            QueryRule(CompiledKernels, [CompileKernelRequest]),
            QueryRule(BuiltPackage, [GpuKernelPackageFieldSet]),
            QueryRule(TransitiveTargets, [TransitiveTargetsRequest]),
            QueryRule(SourceFiles, [SourceFilesRequest]),
            QueryRule(DigestContents, [Digest]),
            QueryRule(ToolchainPex, [ToolchainPexRequest]),
        ],
        target_types=[
            GpuKernelTarget,
            FileTarget,
            FilesGeneratorTarget,
            PythonSourceTarget,
            PythonSourcesGeneratorTarget,
        ],
    )
    # Python's own import inference runs a parser PEX: not what this test is about.
    runner.set_options([f"--source-root-patterns=['/{ROOT}']", "--no-python-infer-imports"])
    return runner


FILES = {
    f"{K}/BUILD": dedent(
        """\
        gpu_kernel(name="blur", source="blur.py", capabilities=["sm_90"], toolchain="cuda13")
        gpu_kernel(name="sobel", source="sobel.cu", capabilities=["sm_87", "sm_90"],
                   include_dirs=["."], defines=["TILE=16"], toolchain="cuda13")
        files(name="helpers", sources=["pkg/**/*.py", "sub/*.cuh"])
        """
    ),
    f"{K}/blur.py": "from app.kernels.pkg.helpers import h\n",
    f"{K}/pkg/helpers/h.py": "X = 1\n",
    f"{K}/sobel.cu": '#include "sub/val.cuh"\n',
    f"{K}/sub/val.cuh": "#define V 1\n",
    f"{ROOT}/app/BUILD": f'python_sources(dependencies=["{K}:blur", "{K}:sobel"])\n',
    f"{ROOT}/app/main.py": "",
}


def resources_of(rule_runner: RuleRunner, address: Address) -> dict[str, bytes]:
    """What Pants' Python backend hydrates for a target's closure (resources, with codegen)."""
    closure = rule_runner.request(TransitiveTargets, [TransitiveTargetsRequest([address])])
    sources = rule_runner.request(
        SourceFiles,
        [
            SourceFilesRequest(
                (t.get(SourcesField) for t in closure.closure),
                for_sources_types=(ResourceSourceField,),
                enable_codegen=True,
            )
        ],
    )
    return {
        c.path: c.content for c in rule_runner.request(DigestContents, [sources.snapshot.digest])
    }


def test_python_target_gets_each_kernels_index_and_input_closure(rule_runner: RuleRunner) -> None:
    rule_runner.write_files(FILES)
    files = resources_of(rule_runner, Address(f"{ROOT}/app", relative_file_path="main.py"))
    base = f"{ROOT}/__gpu_kernels__"
    blur = json.loads(files[f"{base}/src.python.app.kernels.blur.json"])
    assert blur["library"] == "blur" and blur["target"] == f"{K}:blur"
    assert blur["source"] == f"{K}/blur.py" and blur["capabilities"] == ["sm_90"]
    assert blur["flags"] == ["--sys-path", ROOT] and blur["source_root"] == ROOT
    # The helper in a subpackage is an input (inferred from the import), hashed as it is.
    helper = f"{K}/pkg/helpers/h.py"
    assert sorted(blur["files"]) == [f"{K}/blur.py", helper]
    assert blur["files"][helper] == hashlib.sha256(b"X = 1\n").hexdigest()
    assert files[f"{base}/src.python.app.kernels.blur/{helper}"] == b"X = 1\n"
    sobel = json.loads(files[f"{base}/src.python.app.kernels.sobel.json"])
    assert sorted(sobel["files"]) == [f"{K}/sobel.cu", f"{K}/sub/val.cuh"]
    # The same flags as the build step's process (`CompileOptions.argv`).
    assert sobel["flags"] == ["--sys-path", ROOT, "--define=TILE=16", f"--include-dir={K}"]
    assert files[f"{base}/src.python.app.kernels.sobel/{K}/sub/val.cuh"] == b"#define V 1\n"


def test_an_invalid_kernel_fails_only_what_uses_it_in_one_line(rule_runner: RuleRunner) -> None:
    """The target builds (Pants builds every target for Python inference); the rules that use
    it (JIT mode's index, the compile of `package`) refuse it before anything runs."""
    bad = f"{ROOT}/scratch"
    rule_runner.write_files(
        {
            **FILES,
            f"{bad}/BUILD": dedent(
                """\
                gpu_kernel(name="bad", source="k.py", capabilities=["sm_9O"])
                python_sources(dependencies=[":bad"])
                """
            ),
            f"{bad}/k.py": "",
            f"{bad}/main.py": "",
        }
    )
    files = resources_of(rule_runner, Address(f"{ROOT}/app", relative_file_path="main.py"))
    assert f"{ROOT}/__gpu_kernels__/src.python.app.kernels.blur.json" in files
    expected = (
        f"The `capabilities` field in target {bad}:bad has an invalid value: invalid GPU "
        "capability 'sm_9O': expected one of "
    )
    target = rule_runner.get_target(Address(bad, target_name="bad"))
    field_set = GpuKernelPackageFieldSet.create(target)
    for output_type, request in (
        (DigestContents, None),  # the index of a python_source that depends on it
        (CompiledKernels, CompileKernelRequest(field_set)),
        (BuiltPackage, field_set),
    ):
        with pytest.raises(ExecutionError) as e:
            if request is None:
                resources_of(rule_runner, Address(bad, relative_file_path="main.py"))
            else:
                rule_runner.request(output_type, [request])
        errors = list(e.value.wrapped_exceptions)
        assert len(errors) == 1 and isinstance(errors[0], InvalidFieldException), errors
        assert str(errors[0]).startswith(expected)
