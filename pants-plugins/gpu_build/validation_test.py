"""Pure tests of the plugin's field checks: each bad value gives exactly its one-line message,
good values pass. Targets are constructed directly (only Pants' own field checks run then: a bad
value must not fail construction, since Pants builds every target for Python inference)."""

from __future__ import annotations

from typing import Any

import pytest
from pants.engine.addresses import Address
from pants.engine.target import InvalidFieldException

from gpu_build.target_types import DeployBundleTarget, GpuKernelTarget
from gpu_build.util_rules.bundle_field_set import DeployBundleFieldSet
from gpu_build.util_rules.kernel_field_set import GpuKernelFieldSet
from gpu_build.validation import (
    DeployBundleValidationRequest,
    GpuKernelValidationRequest,
    ValidatedDeployBundle,
    ValidatedGpuKernel,
    validate_deploy_bundle,
    validate_gpu_kernel,
    validated_deploy_bundle,
    validated_gpu_kernel,
)
from gpu_spec.capabilities import CAPABILITIES

KERNEL = Address("src/k", target_name="k")
BUNDLE = Address("app", target_name="bundle")
VALID = ", ".join(CAPABILITIES)


def kernel(**fields: Any) -> GpuKernelFieldSet:
    return GpuKernelFieldSet.create(GpuKernelTarget({"source": "k.py", **fields}, KERNEL))


def bundle(**fields: Any) -> DeployBundleFieldSet:
    values = {"binary": ":app", "capabilities": ["sm_90"], "driver_version": "13.0", **fields}
    return DeployBundleFieldSet.create(DeployBundleTarget(values, BUNDLE))


def refused(field_set: GpuKernelFieldSet | DeployBundleFieldSet) -> str:
    with pytest.raises(InvalidFieldException) as e:
        if isinstance(field_set, DeployBundleFieldSet):
            validate_deploy_bundle(field_set)
        else:
            validate_gpu_kernel(field_set)
    message = str(e.value)
    assert "\n" not in message, message
    return message


# -----------------------------------------------------------------------------------------------
# gpu_kernel


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"capabilities": ["sm_80", "sm_9O"]},
            "The `capabilities` field in target src/k:k has an invalid value: invalid GPU "
            f"capability 'sm_9O': expected one of {VALID}",
        ),
        (
            {"capabilities": []},
            "The `capabilities` field in target src/k:k is empty: list at least one capability, "
            "or leave the field out to use the default.",
        ),
        (
            {"ptx_version": "nine"},
            "The `ptx_version` field in target src/k:k must look like `\"8.5\"`, got 'nine'.",
        ),
        (
            {"max_registers": 100000},
            "The `max_registers` field in target src/k:k: max_registers=100000 is more than a "
            "thread can have on any supported GPU (255); use a value from 1 to 255.",
        ),
        (
            {"source": "k.cu", "defines": ["TILE=16", "-I/etc"]},
            "The `defines` field of src/k:k holds '-I/etc', which is not a definition `NAME` or "
            "`NAME=VALUE` with NAME a C identifier (NVRTC `-D`): write it as e.g. 'TILE=16'; an "
            "include directory goes in `include_dirs`.",
        ),
        (
            {"include_dirs": ["/usr/local/cuda/include"]},
            "The `include_dirs` field in target src/k:k has '/usr/local/cuda/include', which is "
            "outside the repository: include directories must be relative to the BUILD file and "
            "stay inside the build root, so the compile stays hermetic.",
        ),
        (
            {"source": "k.cu", "include_dirs": ["../../.."]},
            "The `include_dirs` field in target src/k:k has '../../..', which is outside the "
            "repository: include directories must be relative to the BUILD file and stay inside "
            "the build root, so the compile stays hermetic.",
        ),
        (
            {"defines": ["N=4"]},
            "The `defines` field in target src/k:k applies to `.cu` sources only, but `k.py` is "
            "a numba-cuda source. Remove the field.",
        ),
        (
            {"name_expressions": ["saxpy<float>"]},
            "The `name_expressions` field in target src/k:k applies to `.cu` sources only, but "
            "`k.py` is a numba-cuda source. Remove the field.",
        ),
        (
            {"capabilities": ["sm_87", "sm_90"], "ptx_version": "7.4"},
            "The `ptx_version` field in target src/k:k is 7.4, but sm_90 needs PTX ISA 7.8 or "
            "newer.",
        ),
    ],
)
def test_each_bad_kernel_field_gives_its_one_line_message(
    fields: dict[str, Any], message: str
) -> None:
    assert refused(kernel(**fields)) == message


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"capabilities": ["sm_90", "sm_75", "sm_120"]},
        {"capabilities": ["sm_87"], "ptx_version": "7.4"},
        {"ptx_version": "9.0", "max_registers": 255, "fast_math": True, "lineinfo": True},
        {"include_dirs": ["inc", "../shared"]},  # numba: for the `.cu` files it links
        {
            "source": "k.cu",
            "defines": ["TILE=16", "FAST", "_X=a b", "Y="],
            "include_dirs": ["."],
            "name_expressions": ["saxpy<float>"],
        },
    ],
)
def test_good_kernel_fields_pass(fields: dict[str, Any]) -> None:
    field_set = kernel(**fields)
    validate_gpu_kernel(field_set)
    assert validated_gpu_kernel(GpuKernelValidationRequest(field_set)) == ValidatedGpuKernel(KERNEL)


def test_the_first_bad_field_is_the_one_named() -> None:
    # As the rules check them: capabilities before ptx_version, and each field's first bad entry
    # as written.
    message = refused(kernel(capabilities=["sm_90", "sm_9O", "sm_8X"], ptx_version="nine"))
    assert "'sm_9O'" in message and "`ptx_version`" not in message
    with pytest.raises(InvalidFieldException, match="'-DX'"):
        validated_gpu_kernel(
            GpuKernelValidationRequest(kernel(source="k.cu", defines=["-DX", "1X"]))
        )


def test_an_unknown_capability_builds_as_written_for_the_check_to_name() -> None:
    # Construction sorts the known ones oldest first and keeps an unknown one, last.
    field_set = kernel(capabilities=["sm_90", "sm_9O", "sm_75", "sm_90", "sm_8X", "sm_9O"])
    assert field_set.capabilities.value == ("sm_75", "sm_90", "sm_9O", "sm_8X")


# -----------------------------------------------------------------------------------------------
# deploy_bundle


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"capabilities": ["sm_88x"]},
            "The `capabilities` field in target app:bundle has an invalid value: invalid GPU "
            f"capability 'sm_88x': expected one of {VALID}",
        ),
        (
            {"capabilities": []},
            "The `capabilities` field in target app:bundle is empty: list at least one "
            "capability, or leave the field out to use the default.",
        ),
        (
            {"driver_version": "580.159"},
            "The `driver_version` field in target app:bundle must be the CUDA version the driver "
            'supports, like `"12.6"` (nvidia-smi\'s "CUDA Version", not the driver release such '
            "as 580.159), got '580.159'.",
        ),
        (
            {"driver_version": "12"},
            "The `driver_version` field in target app:bundle must be the CUDA version the driver "
            'supports, like `"12.6"` (nvidia-smi\'s "CUDA Version", not the driver release such '
            "as 580.159), got '12'.",
        ),
    ],
)
def test_each_bad_bundle_field_gives_its_one_line_message(
    fields: dict[str, Any], message: str
) -> None:
    assert refused(bundle(**fields)) == message


@pytest.mark.parametrize(
    "fields",
    [{}, {"driver_version": "12.6"}, {"capabilities": ["sm_87", "sm_90", "sm_87"]}],
)
def test_good_bundle_fields_pass(fields: dict[str, Any]) -> None:
    field_set = bundle(**fields)
    validate_deploy_bundle(field_set)
    assert validated_deploy_bundle(DeployBundleValidationRequest(field_set)) == (
        ValidatedDeployBundle(BUNDLE)
    )
