"""The deploy_bundles' output-clash scan, in a repo where unrelated targets are invalid."""

from __future__ import annotations

from textwrap import dedent

import pytest
from pants.engine.addresses import Address
from pants.engine.internals.scheduler import ExecutionError
from pants.engine.target import AllTargets
from pants.testutil.rule_runner import QueryRule, RuleRunner

from gpu_build.target_types import DeployBundleOutputPathField, DeployBundleTarget, GpuKernelTarget
from gpu_build.util_rules import bundle_outputs
from gpu_build.util_rules.bundle_field_set import DeployBundleError
from gpu_build.util_rules.bundle_outputs import AllBundleOutputs, BundleOutput, check_output_clash

BUNDLE = (
    'deploy_bundle(name="{name}", binary=":app", capabilities=["sm_90"], '
    'driver_version="13.0"{extra})\n'
)


def bundle(name: str, extra: str = "") -> str:
    return BUNDLE.format(name=name, extra=extra)


@pytest.fixture
def rule_runner() -> RuleRunner:
    runner = RuleRunner(
        rules=[
            *bundle_outputs.rules(),
            QueryRule(AllBundleOutputs, []),
            QueryRule(AllTargets, []),
        ],
        target_types=[DeployBundleTarget, GpuKernelTarget],
    )
    runner.write_files(
        {
            "src/imaging/BUILD": bundle("orin") + bundle("h200", ', output_path="bundles/h200"'),
            "src/copy/BUILD": bundle("orin"),
            # What a new user writes: a capability typo, in a directory no bundle uses; and
            # each other field the plugin checks, wrong.
            "src/scratch/BUILD": dedent(
                """\
                gpu_kernel(name="k", source="k.py", capabilities=["sm_9O"])
                gpu_kernel(name="ptx", source="k.py", ptx_version="nine")
                gpu_kernel(name="old_ptx", source="k.py", capabilities=["sm_90"], ptx_version="7.4")
                gpu_kernel(name="regs", source="k.py", max_registers=100000)
                gpu_kernel(name="defines", source="k.cu", defines=["-I/etc"])
                gpu_kernel(name="numba_defines", source="k.py", defines=["N=4"])
                gpu_kernel(name="includes", source="k.cu", include_dirs=["/usr/local/cuda/include"])
                deploy_bundle(name="driver", binary=":app", capabilities=[], driver_version="580.1")
                """
            ),
            "src/scratch/k.py": "",
            "src/scratch/k.cu": "",
        }
    )
    return runner


def test_an_invalid_target_elsewhere_does_not_fail_the_scan(rule_runner: RuleRunner) -> None:
    # The cause of the finding: Pants' Python inference reads `AllTargets`, which makes every
    # target; the plugin's checks run where a rule uses a target, so none of these fails it.
    assert len(rule_runner.request(AllTargets, [])) == 11
    outputs = rule_runner.request(AllBundleOutputs, [])
    assert sorted(outputs, key=lambda o: str(o.address)) == [
        BundleOutput(Address("src/copy", target_name="orin"), "orin"),
        BundleOutput(Address("src/imaging", target_name="h200"), "bundles/h200"),
        BundleOutput(Address("src/imaging", target_name="orin"), "orin"),
        BundleOutput(Address("src/scratch", target_name="driver"), "driver"),
    ]


def test_a_build_file_pants_cannot_read_fails_the_scan_as_it_fails_pants(
    rule_runner: RuleRunner,
) -> None:
    # Pants' own inference fails on it too: every bundle's `pex_binary` runs that.
    rule_runner.write_files({"src/garbled/BUILD": "deploy_bundle(name=\n"})  # not even Python
    with pytest.raises(ExecutionError, match="src/garbled/BUILD"):
        rule_runner.request(AllTargets, [])
    with pytest.raises(ExecutionError, match="src/garbled/BUILD"):
        rule_runner.request(AllBundleOutputs, [])


def test_two_bundles_of_one_path_are_still_refused_naming_both(rule_runner: RuleRunner) -> None:
    outputs = rule_runner.request(AllBundleOutputs, [])
    with pytest.raises(DeployBundleError) as e:
        check_output_clash(Address("src/imaging", target_name="orin"), "orin", outputs)
    assert str(e.value) == (
        "The deploy_bundle src/imaging:orin would write dist/orin/, where src/copy:orin "
        "(dist/orin) writes too: one would silently replace the other. Give them different "
        "names or set `output_path` on one of them."
    )
    check_output_clash(Address("src/imaging", target_name="h200"), "bundles/h200", outputs)
    with pytest.raises(DeployBundleError, match=r"src/imaging:h200 \(dist/bundles/h200\)"):
        check_output_clash(Address("src/new", target_name="b"), "bundles", outputs)


def test_the_default_output_path_is_the_target_name(rule_runner: RuleRunner) -> None:
    rule_runner.write_files({"src/a/b/BUILD": bundle("orin_cp310")})
    target = rule_runner.get_target(Address("src/a/b", target_name="orin_cp310"))
    field = target[DeployBundleOutputPathField]
    assert field.value_or_default(file_ending=None) == "orin_cp310"
    assert field.value_or_default(file_ending="tar.gz") == "orin_cp310.tar.gz"
