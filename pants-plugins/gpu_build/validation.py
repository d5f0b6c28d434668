"""The domain checks of `gpu_kernel` and `deploy_bundle` fields, run where a rule uses a target.

Pants builds every target of the repo whenever a goal runs Python dependency inference
(`AllTargets`), so a check in a field's `compute_value` or a target's `validate()` fails every
such goal on one broken target anywhere: a `capabilities=["sm_9O"]` in a scratch directory would
fail `pants package` of every bundle. Construction keeps Pants' own checks (types, `required`,
`valid_choices`, `valid_numbers`, source extensions); what the plugin knows of capabilities, PTX
versions, register caps, `defines`, `include_dirs` and drivers is checked here, by one pure
function per target kind, which the rules reach through one rule per kind
(`Get(ValidatedGpuKernel, GpuKernelValidationRequest(field_set))`): compile_kernel (and so
`package` of a kernel and a bundle's compiles), jit_index, bundle_kernels and package_bundle;
`run` and `experimental-deploy` of a bundle check it first too.
Each error is one line naming the target, the field, the value and the fix.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from pants.engine.addresses import Address
from pants.engine.rules import collect_rules, rule
from pants.engine.target import InvalidFieldException
from pants.util.strutil import softwrap

from gpu_build.target_types import (
    DeployBundleDriverVersionField,
    GpuKernelCapabilitiesField,
    GpuKernelDefinesField,
    GpuKernelIncludeDirsField,
    GpuKernelMaxRegistersField,
    GpuKernelPtxVersionField,
)
from gpu_build.util_rules.bundle_field_set import DeployBundleFieldSet
from gpu_build.util_rules.kernel_field_set import GpuKernelFieldSet
from gpu_spec.capabilities import check_max_registers, min_ptx_isa, parse_capability
from gpu_spec.compile.options import CUDA_ONLY_OPTIONS
from gpu_spec.errors import SpecError
from gpu_spec.metadata import LANG_CUDA, language_of
from gpu_spec.versions import is_version, parse_version

# A `defines` entry: NAME or NAME=VALUE (one line), as `-D` takes it.
_DEFINE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(=[^\n]*)?")


def check_each(entries: Iterable[str], problem: Callable[[str], Optional[str]]) -> None:
    """Refuses the first entry of a list field for which `problem` gives a message."""
    for entry in entries:
        message = problem(entry)
        if message is not None:
            raise InvalidFieldException(message)


def check_capabilities(alias: str, address: Address, value: Optional[Iterable[str]]) -> None:
    """A `capabilities` field (a kernel's or a bundle's): not empty, each one gpu_spec knows."""
    if value is None:
        return
    value = tuple(value)
    if not value:
        raise InvalidFieldException(
            f"The `{alias}` field in target {address} is empty: list at least one "
            f"capability, or leave the field out to use the default."
        )

    def problem(capability: str) -> Optional[str]:
        try:
            parse_capability(capability)
        except SpecError as e:
            return f"The `{alias}` field in target {address} has an invalid value: {e}"
        return None

    check_each(value, problem)


def _define_problem(address: Address) -> Callable[[str], Optional[str]]:
    alias = GpuKernelDefinesField.alias

    def problem(define: str) -> Optional[str]:
        if _DEFINE_RE.fullmatch(define):
            return None
        return (
            f"The `{alias}` field of {address} holds {define!r}, which is not a "
            f"definition `NAME` or `NAME=VALUE` with NAME a C identifier (NVRTC `-D`): "
            f"write it as e.g. 'TILE=16'; an include directory goes in `include_dirs`."
        )

    return problem


def _include_dir_problem(address: Address) -> Callable[[str], Optional[str]]:
    alias = GpuKernelIncludeDirsField.alias

    def problem(include_dir: str) -> Optional[str]:
        joined = GpuKernelIncludeDirsField.build_root_relative(address.spec_path, include_dir)
        # An absolute path would read the host's headers (/usr/local/cuda/include), which the
        # compile's cache key knows nothing of.
        if not (os.path.isabs(include_dir) or joined == ".." or joined.startswith("../")):
            return None
        return (
            f"The `{alias}` field in target {address} has {include_dir!r}, which "
            f"is outside the repository: include directories must be relative to the "
            f"BUILD file and stay inside the build root, so the compile stays hermetic."
        )

    return problem


def validate_gpu_kernel(field_set: GpuKernelFieldSet) -> None:
    """Raises InvalidFieldException (one line, naming the target and field) for the first
    field of the `gpu_kernel` that its rules cannot use."""
    address = field_set.address
    capabilities = field_set.capabilities.value
    check_capabilities(GpuKernelCapabilitiesField.alias, address, capabilities)

    ptx_version = field_set.ptx_version.value
    if ptx_version is not None and not is_version(ptx_version):
        raise InvalidFieldException(
            f"The `{GpuKernelPtxVersionField.alias}` field in target {address} must look like "
            f'`"8.5"`, got {ptx_version!r}.'
        )

    max_registers = field_set.max_registers.value
    if max_registers is not None:
        try:
            check_max_registers(max_registers)
        except SpecError as e:
            raise InvalidFieldException(
                f"The `{GpuKernelMaxRegistersField.alias}` field in target {address}: {e}."
            ) from None

    check_each(field_set.defines.value or (), _define_problem(address))
    check_each(field_set.include_dirs.value or (), _include_dir_problem(address))

    source = field_set.source.value or ""
    if language_of(source) != LANG_CUDA:
        for field in (getattr(field_set, name) for name in CUDA_ONLY_OPTIONS):
            if field.value:
                raise InvalidFieldException(
                    softwrap(
                        f"""
                        The `{field.alias}` field in target {address} applies to `.cu` sources
                        only, but `{source}` is a numba-cuda source. Remove the field.
                        """
                    )
                )
    for capability in capabilities or ():
        if ptx_version and parse_version(ptx_version) < parse_version(min_ptx_isa(capability)):
            raise InvalidFieldException(
                softwrap(
                    f"""
                    The `{GpuKernelPtxVersionField.alias}` field in target {address} is
                    {ptx_version}, but {capability} needs PTX ISA {min_ptx_isa(capability)} or
                    newer.
                    """
                )
            )


def validate_deploy_bundle(field_set: DeployBundleFieldSet) -> None:
    """Raises InvalidFieldException (one line, naming the target and field) for the first
    field of the `deploy_bundle` that its rules cannot use."""
    address = field_set.address
    check_capabilities(field_set.capabilities.alias, address, field_set.capabilities.value)
    driver = field_set.driver_version.value
    if driver is not None and (not is_version(driver) or parse_version(driver)[0] >= 100):
        raise InvalidFieldException(
            f"The `{DeployBundleDriverVersionField.alias}` field in target {address} must be the "
            f'CUDA version the driver supports, like `"12.6"` (nvidia-smi\'s "CUDA Version", '
            f"not the driver release such as 580.159), got {driver!r}."
        )


@dataclass(frozen=True)
class GpuKernelValidationRequest:
    field_set: GpuKernelFieldSet


@dataclass(frozen=True)
class ValidatedGpuKernel:
    address: Address


@rule
def validated_gpu_kernel(request: GpuKernelValidationRequest) -> ValidatedGpuKernel:
    validate_gpu_kernel(request.field_set)
    return ValidatedGpuKernel(request.field_set.address)


@dataclass(frozen=True)
class DeployBundleValidationRequest:
    field_set: DeployBundleFieldSet


@dataclass(frozen=True)
class ValidatedDeployBundle:
    address: Address


@rule
def validated_deploy_bundle(request: DeployBundleValidationRequest) -> ValidatedDeployBundle:
    validate_deploy_bundle(request.field_set)
    return ValidatedDeployBundle(request.field_set.address)


def rules():
    return collect_rules()
