"""The checks of `gpu_kernel` and `deploy_bundle` fields, on targets built through the engine.

Pants' own checks (types, `required`, `valid_choices`, `valid_numbers`, source extensions) fail
while Pants builds the target from its BUILD file. The plugin's checks do not: the target builds,
so one broken target does not fail goals that never use it (Pants builds every target for Python
inference), and `validate_gpu_kernel` / `validate_deploy_bundle`, which every rule that uses the
target runs first, refuse it in one line naming the target, the field and the value.
"""

from __future__ import annotations

from textwrap import dedent

import pytest
from pants.backend.python.target_types import PexBinary, PythonSourceTarget
from pants.core.target_types import FilesGeneratorTarget, FileTarget
from pants.engine.addresses import Address
from pants.engine.internals.scheduler import ExecutionError
from pants.engine.target import (
    COMMON_TARGET_FIELDS,
    HydratedSources,
    HydrateSourcesRequest,
    InvalidFieldException,
    InvalidTargetException,
    Target,
)
from pants.testutil.rule_runner import QueryRule, RuleRunner, engine_error

from gpu_build.target_types import (
    DeployBundleDriverVersionField,
    DeployBundleTarget,
    GpuKernelCapabilitiesField,
    GpuKernelDefinesField,
    GpuKernelIncludeDirsField,
    GpuKernelPtxVersionField,
    GpuKernelSourceField,
    GpuKernelTarget,
)
from gpu_build.util_rules.bundle_field_set import DeployBundleFieldSet
from gpu_build.util_rules.kernel_field_set import GpuKernelFieldSet
from gpu_build.validation import validate_deploy_bundle, validate_gpu_kernel
from gpu_spec.capabilities import CAPABILITIES, min_ptx_isa


@pytest.fixture
def rule_runner() -> RuleRunner:
    return RuleRunner(
        rules=[QueryRule(HydratedSources, [HydrateSourcesRequest])],
        target_types=[
            GpuKernelTarget,
            DeployBundleTarget,
            FileTarget,
            FilesGeneratorTarget,
            PythonSourceTarget,
            PexBinary,
        ],
    )


def kernel(rule_runner: RuleRunner, build: str, source: str = "k.py", name: str = "k") -> Target:
    rule_runner.write_files(
        {
            "src/k.py": "AOT_SIGNATURES = {}\n",
            "src/k.cu": 'extern "C" __global__ void k() {}\n',
            "src/k.txt": "not a kernel\n",
            "src/BUILD": dedent(build),
        }
    )
    return rule_runner.get_target(Address("src", target_name=name))


def error_message(
    excinfo: pytest.ExceptionInfo[ExecutionError], build_file: str = "src/BUILD"
) -> str:
    """The one underlying exception's message.

    A field's InvalidFieldException raised while Pants builds the target from its BUILD file
    reaches the user as an InvalidTargetException prefixed with `<BUILD file>:<line>:`.
    """
    wrapped = list(excinfo.value.wrapped_exceptions)
    assert len(wrapped) == 1, wrapped
    assert isinstance(wrapped[0], (InvalidTargetException, InvalidFieldException)), repr(wrapped[0])
    message = str(wrapped[0])
    if isinstance(wrapped[0], InvalidTargetException):
        assert message.startswith(f"{build_file}:"), message
    return message


def invalid(tgt: Target) -> str:
    """The target builds; its kind's validation refuses it in one line, which is returned."""
    with pytest.raises(InvalidFieldException) as excinfo:
        if isinstance(tgt, DeployBundleTarget):
            validate_deploy_bundle(DeployBundleFieldSet.create(tgt))
        else:
            validate_gpu_kernel(GpuKernelFieldSet.create(tgt))
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


def valid(tgt: Target) -> Target:
    if isinstance(tgt, DeployBundleTarget):
        validate_deploy_bundle(DeployBundleFieldSet.create(tgt))
    else:
        validate_gpu_kernel(GpuKernelFieldSet.create(tgt))
    return tgt


# -----------------------------------------------------------------------------------------------
# gpu_kernel: capabilities


def test_capabilities_deduplicated_and_sorted_oldest_first(rule_runner: RuleRunner) -> None:
    tgt = kernel(
        rule_runner,
        """
        gpu_kernel(
            name="k",
            source="k.py",
            capabilities=["sm_90", "sm_120", "sm_75", "sm_90", "sm_87", "sm_100", "sm_75"],
        )
        """,
    )
    # Numeric, not lexical: sm_100 and sm_120 come after sm_90.
    assert valid(tgt)[GpuKernelCapabilitiesField].value == (
        "sm_75",
        "sm_87",
        "sm_90",
        "sm_100",
        "sm_120",
    )


def test_capabilities_default_is_none(rule_runner: RuleRunner) -> None:
    # Left out: the rules use `[gpu-toolchains].default_capabilities`.
    tgt = kernel(rule_runner, 'gpu_kernel(name="k", source="k.py")')
    assert valid(tgt)[GpuKernelCapabilitiesField].value is None


@pytest.mark.parametrize("bad", ["sm_91", "compute_90", "sm_90a", "90", "SM_90"])
def test_unknown_capability_names_target_and_valid_choices(
    rule_runner: RuleRunner, bad: str
) -> None:
    message = invalid(
        kernel(rule_runner, f'gpu_kernel(name="k", source="k.py", capabilities=["sm_80", "{bad}"])')
    )
    assert "src:k" in message
    assert "`capabilities`" in message
    assert repr(bad) in message
    # Every valid capability is listed, so the user can pick one.
    for capability in CAPABILITIES:
        assert capability in message, capability


def test_empty_capabilities(rule_runner: RuleRunner) -> None:
    message = invalid(kernel(rule_runner, 'gpu_kernel(name="k", source="k.py", capabilities=[])'))
    assert "src:k" in message
    assert "empty" in message


def test_capabilities_must_be_strings(rule_runner: RuleRunner) -> None:
    with engine_error(InvalidTargetException, contains="src:k"):
        kernel(rule_runner, 'gpu_kernel(name="k", source="k.py", capabilities=[90])')


# -----------------------------------------------------------------------------------------------
# gpu_kernel: ptx_version


@pytest.mark.parametrize("good", ["8.5", "9.0", "7.8"])
def test_ptx_version_accepted(rule_runner: RuleRunner, good: str) -> None:
    tgt = kernel(
        rule_runner,
        f'gpu_kernel(name="k", source="k.py", capabilities=["sm_90"], ptx_version="{good}")',
    )
    assert valid(tgt)[GpuKernelPtxVersionField].value == good


@pytest.mark.parametrize("bad", ["9", "v9.0", "9.0.1", "nine", "9.0 ", ""])
def test_ptx_version_format(rule_runner: RuleRunner, bad: str) -> None:
    message = invalid(
        kernel(rule_runner, f'gpu_kernel(name="k", source="k.py", ptx_version="{bad}")')
    )
    assert "src:k" in message
    assert "`ptx_version`" in message
    assert repr(bad) in message


def test_ptx_version_older_than_a_capability_needs(rule_runner: RuleRunner) -> None:
    # sm_87 needs PTX ISA 7.4; sm_90 needs 7.8, which 7.4 is older than.
    message = invalid(
        kernel(
            rule_runner,
            """
            gpu_kernel(
                name="k",
                source="k.py",
                capabilities=["sm_87", "sm_90"],
                ptx_version="7.4",
            )
            """,
        )
    )
    assert "src:k" in message
    assert "sm_90" in message
    assert min_ptx_isa("sm_90") in message
    assert "7.4" in message


def test_ptx_version_exactly_the_minimum_is_fine(rule_runner: RuleRunner) -> None:
    tgt = kernel(
        rule_runner,
        'gpu_kernel(name="k", source="k.py", capabilities=["sm_87"], ptx_version="7.4")',
    )
    assert valid(tgt)[GpuKernelPtxVersionField].value == "7.4"


# -----------------------------------------------------------------------------------------------
# gpu_kernel: source and `.cu`-only fields


@pytest.mark.parametrize(
    "field, value",
    [
        ("defines", '["N=4"]'),
        ("name_expressions", '["k<float>"]'),
    ],
)
def test_cuda_cpp_only_fields_refused_on_numba_source(
    rule_runner: RuleRunner, field: str, value: str
) -> None:
    message = invalid(kernel(rule_runner, f'gpu_kernel(name="k", source="k.py", {field}={value})'))
    assert "src:k" in message
    assert f"`{field}`" in message
    assert ".cu" in message


def test_include_dirs_accepted_on_numba_source(rule_runner: RuleRunner) -> None:
    """They apply to the CUDA C++ files the numba source links."""
    tgt = kernel(rule_runner, 'gpu_kernel(name="k", source="k.py", include_dirs=["inc"])')
    assert valid(tgt)[GpuKernelIncludeDirsField].value == ("inc",)


def test_cuda_cpp_only_fields_accepted_on_cu_source(rule_runner: RuleRunner) -> None:
    tgt = kernel(
        rule_runner,
        """
        gpu_kernel(
            name="k",
            source="k.cu",
            defines=["N=4", "FAST"],
            include_dirs=["."],
            name_expressions=["k<float>"],
        )
        """,
    )
    assert valid(tgt)[GpuKernelSourceField].value == "k.cu"


@pytest.mark.parametrize("source", ["k.cu", "k.py"])
@pytest.mark.parametrize("bad", ["/usr/local/cuda/include", "../..", "../../etc"])
def test_include_dirs_outside_the_repository_refused(
    rule_runner: RuleRunner, bad: str, source: str
) -> None:
    message = invalid(
        kernel(rule_runner, f'gpu_kernel(name="k", source="{source}", include_dirs=["{bad}"])')
    )
    assert "src:k" in message and repr(bad) in message and "outside the repository" in message


def test_wrong_source_extension(rule_runner: RuleRunner) -> None:
    tgt = kernel(rule_runner, 'gpu_kernel(name="k", source="k.txt")')
    with pytest.raises(ExecutionError) as excinfo:
        rule_runner.request(HydratedSources, [HydrateSourcesRequest(tgt[GpuKernelSourceField])])
    message = error_message(excinfo)
    assert "src:k" in message
    assert ".cu" in message and ".py" in message
    assert "k.txt" in message


@pytest.mark.parametrize("source", ["k.py", "k.cu"])
def test_good_source_extensions_hydrate(rule_runner: RuleRunner, source: str) -> None:
    tgt = kernel(rule_runner, f'gpu_kernel(name="k", source="{source}")')
    hydrated = rule_runner.request(
        HydratedSources, [HydrateSourcesRequest(tgt[GpuKernelSourceField])]
    )
    assert hydrated.snapshot.files == (f"src/{source}",)


def test_max_registers_positive(rule_runner: RuleRunner) -> None:
    with engine_error(InvalidTargetException, contains="src:k"):
        kernel(rule_runner, 'gpu_kernel(name="k", source="k.py", max_registers=0)')


def test_max_registers_at_most_what_a_thread_can_have(rule_runner: RuleRunner) -> None:
    message = invalid(
        kernel(rule_runner, 'gpu_kernel(name="k", source="k.py", max_registers=100000)')
    )
    assert "src:k" in message and "max_registers=100000" in message and "1 to 255" in message
    assert valid(kernel(rule_runner, 'gpu_kernel(name="k", source="k.py", max_registers=255)'))


# -----------------------------------------------------------------------------------------------
# deploy_bundle


def bundle(rule_runner: RuleRunner, extra: str) -> Target:
    rule_runner.write_files(
        {
            "app/main.py": "print('hi')\n",
            "app/k.py": "AOT_SIGNATURES = {}\n",
            "app/BUILD": dedent(
                f"""
                python_source(name="main", source="main.py")
                pex_binary(name="app", entry_point="main.py")
                gpu_kernel(name="k", source="k.py")
                deploy_bundle(
                    name="bundle",
                    binary=":app",
                    kernels=[":k"],
                    capabilities=["sm_87"],
                    {extra}
                )
                """
            ),
        }
    )
    return rule_runner.get_target(Address("app", target_name="bundle"))


@pytest.mark.parametrize("good", ["12.6", "13.0"])
def test_driver_version_accepted(rule_runner: RuleRunner, good: str) -> None:
    tgt = bundle(rule_runner, f'driver_version="{good}",')
    assert valid(tgt)[DeployBundleDriverVersionField].value == good


@pytest.mark.parametrize("bad", ["12", "12.6.1", "r580", "latest", "12,6", "580.159"])
def test_driver_version_format(rule_runner: RuleRunner, bad: str) -> None:
    message = invalid(bundle(rule_runner, f'driver_version="{bad}",'))
    assert "app:bundle" in message
    assert "`driver_version`" in message
    assert repr(bad) in message


def test_driver_version_required(rule_runner: RuleRunner) -> None:
    with engine_error(InvalidTargetException, contains="driver_version"):
        bundle(rule_runner, "")


def test_bundle_capabilities_validated_like_kernels(rule_runner: RuleRunner) -> None:
    rule_runner.write_files(
        {
            "app/main.py": "",
            "app/BUILD": dedent(
                """
                pex_binary(name="app", entry_point="main.py")
                deploy_bundle(
                    name="bundle",
                    binary=":app",
                    capabilities=["sm_87", "sm_88x"],
                    driver_version="12.6",
                )
                """
            ),
        }
    )
    message = invalid(rule_runner.get_target(Address("app", target_name="bundle")))
    assert "app:bundle" in message
    assert "'sm_88x'" in message
    assert "sm_87" in message and "sm_90" in message


def test_bundle_capabilities_required(rule_runner: RuleRunner) -> None:
    # `capabilities` is declared required: a bundle must say which GPUs it ships for.
    rule_runner.write_files(
        {
            "app/main.py": "",
            "app/BUILD": dedent(
                """
                pex_binary(name="app", entry_point="main.py")
                deploy_bundle(name="bundle", binary=":app", driver_version="12.6")
                """
            ),
        }
    )
    with engine_error(InvalidTargetException, contains="capabilities"):
        rule_runner.get_target(Address("app", target_name="bundle"))


def test_bundle_archive_choices(rule_runner: RuleRunner) -> None:
    with engine_error(InvalidTargetException, contains="tar.gz"):
        bundle(rule_runner, 'driver_version="13.0", archive="zip",')


# -----------------------------------------------------------------------------------------------
# help


@pytest.mark.parametrize("target_type", [GpuKernelTarget, DeployBundleTarget])
def test_every_field_and_target_has_help(target_type: type[Target]) -> None:
    def text(help_value) -> str:
        return help_value() if callable(help_value) else help_value

    assert target_type.alias
    assert len(text(target_type.help).strip()) > 40
    own_fields = [f for f in target_type.core_fields if f not in COMMON_TARGET_FIELDS]
    assert own_fields
    for field in own_fields:
        assert field.alias, field
        assert isinstance(text(field.help), str) and text(field.help).strip(), field.alias
    aliases = [f.alias for f in target_type.core_fields]
    assert len(aliases) == len(set(aliases)), aliases


def test_gpu_kernel_help_is_short_and_names_its_page() -> None:
    """`pants help gpu_kernel`: what the target is, the process model, one BUILD example and
    the page with the rest (docs/gpu_kernel.md, whose kernel forms tests/docs checks)."""
    help_value = GpuKernelTarget.help
    text = help_value() if callable(help_value) else help_value
    assert len(text.strip().splitlines()) <= 15, text
    for phrase in (
        "One hermetic, cached Pants process per source compiles it for all its capabilities",
        "[gpu-toolchains].batch_capabilities =",
        "AOT_SIGNATURES",
        "name_expressions=",
        'gpu_kernel(name="saxpy", source="saxpy.py"',
        "docs/gpu_kernel.md",
    ):
        assert phrase in text, phrase
    assert "Each (source, capability) compile is" not in text


def cu_kernel(defines: list[str]) -> GpuKernelTarget:
    return GpuKernelTarget(
        {"source": "k.cu", "defines": defines}, Address("src/k", target_name="k")
    )


@pytest.mark.parametrize("define", ["-I/etc", "-DX", "1X=2", "A B", "X\nY", ""])
def test_a_define_that_is_not_a_definition_is_refused_naming_the_target_and_entry(
    define: str,
) -> None:
    message = invalid(cu_kernel([define]))
    assert "src/k:k" in message and repr(define) in message and "include_dirs" in message


def test_definitions_as_nvrtc_takes_them_are_kept() -> None:
    defines = ["TILE=16", "FAST", "_X=a b", "Y="]
    assert valid(cu_kernel(defines))[GpuKernelDefinesField].value == tuple(defines)
