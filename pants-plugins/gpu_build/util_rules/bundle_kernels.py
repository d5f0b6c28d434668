"""Which `gpu_kernel`s a deploy_bundle ships, and the checks they pass before anything is built.

The kernels are those of the `kernels` field plus those the binary depends on. Each passes its
own fields' checks (`gpu_build/validation.py`), must be compiled for every capability the
bundle ships, and the bundle's driver must load what the chosen toolchain builds: checked here
from the toolchain alone, and again from each compile's metadata once it has run
(`check_driver`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from pants.engine.addresses import Address
from pants.engine.collection import Collection
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import Target, Targets, TransitiveTargets, TransitiveTargetsRequest
from pants.util.strutil import softwrap

from gpu_build import validation
from gpu_build.subsystems.toolchains import GpuToolchains
from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet
from gpu_build.util_rules.kernel_field_set import GpuKernelFieldSet, uncovered_capabilities
from gpu_build.util_rules.toolchain import toolchain_spec
from gpu_build.validation import GpuKernelValidationRequest, ValidatedGpuKernel
from gpu_spec.compatibility import driver_problems
from gpu_spec.versions import parse_version


def select_kernels(
    field_set: DeployBundleFieldSet, explicit: Targets, closure: Iterable[Target]
) -> tuple[Target, ...]:
    """The bundle's `gpu_kernel` targets: its `kernels` plus those the binary depends on."""
    for tgt in explicit:
        if not GpuKernelFieldSet.is_applicable(tgt):
            raise DeployBundleError(
                f"The `kernels` field of {field_set.address} lists {tgt.address}, which is a "
                f"`{tgt.alias}`, not a `gpu_kernel`."
            )
    found = {
        tgt.address: tgt for tgt in (*explicit, *closure) if GpuKernelFieldSet.is_applicable(tgt)
    }
    if not found:
        raise DeployBundleError(
            f"The deploy_bundle {field_set.address} has no kernels: list `gpu_kernel` targets "
            f"in its `kernels` field or in the binary's dependencies."
        )
    by_name: dict[str, list[str]] = {}
    for address in found:
        by_name.setdefault(address.target_name, []).append(str(address))
    clashes = {name: addrs for name, addrs in by_name.items() if len(addrs) > 1}
    if clashes:
        raise DeployBundleError(
            f"The deploy_bundle {field_set.address} has kernels whose target names clash (the "
            f"runtime finds kernels by target name): {clashes}. Rename one."
        )
    return tuple(found[a] for a in sorted(found))


def check_capabilities(
    field_set: DeployBundleFieldSet, kernel: GpuKernelFieldSet, subsystem: GpuToolchains
) -> None:
    offered, missing = uncovered_capabilities(kernel, subsystem, field_set.capabilities.value or ())
    if missing:
        raise DeployBundleError(
            softwrap(
                f"""
                The deploy_bundle {field_set.address} ships {', '.join(missing)}, which the
                gpu_kernel {kernel.address} is not compiled for (its capabilities:
                {', '.join(offered)}). Add them to that target's `capabilities`.
                """
            )
        )


def check_driver(
    field_set: DeployBundleFieldSet,
    kernel: Address,
    toolchain: str,
    toolchain_cuda: str,
    ptx_isa: str,
    capability: str | None = None,
) -> None:
    driver = field_set.driver_version.value or ""
    problems = driver_problems(parse_version(driver), toolchain_cuda, ptx_isa)
    if problems:
        what = f"{kernel} ({capability})" if capability else str(kernel)
        raise DeployBundleError(
            softwrap(
                f"""
                The deploy_bundle {field_set.address} targets a CUDA {driver} driver, which
                cannot load what the GPU toolchain {toolchain!r} builds for {what}:
                {'; '.join(problems)}. Fix: set the bundle's `toolchain` to one of CUDA
                {driver} or older (see `[gpu-toolchains].toolchains`), or raise
                `driver_version` if the device's driver is newer.
                """
            )
        )


@dataclass(frozen=True)
class BundleKernelsRequest:
    field_set: DeployBundleFieldSet
    binary: Address
    explicit: Targets  # the targets of the `kernels` field


class BundleKernels(Collection[GpuKernelFieldSet]):
    """The bundle's kernels, checked, in address order."""


@rule
async def bundle_kernels(request: BundleKernelsRequest, subsystem: GpuToolchains) -> BundleKernels:
    field_set = request.field_set
    transitive = await Get(TransitiveTargets, TransitiveTargetsRequest([request.binary]))
    kernels = [
        GpuKernelFieldSet.create(tgt)
        for tgt in select_kernels(field_set, request.explicit, transitive.closure)
    ]
    await MultiGet(Get(ValidatedGpuKernel, GpuKernelValidationRequest(k)) for k in kernels)
    for kernel in kernels:
        check_capabilities(field_set, kernel, subsystem)
        # Refuse before building anything when the toolchain alone rules the driver out.
        spec = toolchain_spec(
            subsystem,
            field_set.toolchain.value or kernel.toolchain.value,
            origin=f"The target {field_set.address}",
        )
        isa = kernel.ptx_version.value or spec.ptx_isa
        check_driver(field_set, kernel.address, spec.name, spec.cuda, isa)
    return BundleKernels(kernels)


def rules():
    return [*collect_rules(), *validation.rules()]
