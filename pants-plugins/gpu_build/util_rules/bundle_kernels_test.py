"""Pure tests of a bundle's kernel selection and checks, and of its binary: targets constructed
directly (Pants' own field checks run then), no engine."""

from __future__ import annotations

from typing import Any

import pytest
from pants.backend.python.target_types import PexBinary
from pants.engine.addresses import Address
from pants.engine.target import Target, Targets
from pants.testutil.option_util import create_subsystem

from gpu_build.subsystems.toolchains import GpuToolchains
from gpu_build.target_types import DeployBundleTarget, GpuKernelTarget
from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet
from gpu_build.util_rules.bundle_kernels import check_capabilities, check_driver, select_kernels
from gpu_build.util_rules.bundle_pex import bundle_binary, device_pex_field_set
from gpu_build.util_rules.kernel_field_set import GpuKernelFieldSet

APP = "src/python/imaging"
KERNELS = "src/python/imaging/kernels"


def bundle(**fields: Any) -> DeployBundleFieldSet:
    fields = {"binary": ":app", "capabilities": ["sm_87"], "driver_version": "12.6", **fields}
    return DeployBundleFieldSet.create(DeployBundleTarget(fields, Address(APP, target_name="b")))


def kernel(name: str, spec_path: str = KERNELS, **fields: Any) -> Target:
    return GpuKernelTarget({"source": f"{name}.py", **fields}, Address(spec_path, target_name=name))


def app() -> Target:
    return PexBinary({"entry_point": "app.py"}, Address(APP, target_name="app"))


def toolchains() -> GpuToolchains:
    return create_subsystem(
        GpuToolchains,
        toolchains={"cuda13": {"resolve": "cuda13", "cuda": "13.0"}},
        default_toolchain="cuda13",
        default_capabilities=["sm_87", "sm_90"],
    )


def test_select_kernels_explicit_and_from_the_binary_in_address_order() -> None:
    sobel, saxpy = kernel("sobel"), kernel("saxpy")
    selected = select_kernels(bundle(), Targets([sobel]), [app(), saxpy, sobel])
    assert selected == (saxpy, sobel)


def test_select_kernels_refuses_a_kernels_entry_that_is_no_gpu_kernel() -> None:
    with pytest.raises(DeployBundleError) as excinfo:
        select_kernels(bundle(), Targets([app()]), [])
    assert str(excinfo.value) == (
        f"The `kernels` field of {APP}:b lists {APP}:app, which is a `pex_binary`, "
        "not a `gpu_kernel`."
    )


def test_select_kernels_refuses_no_kernels() -> None:
    with pytest.raises(DeployBundleError, match=f"The deploy_bundle {APP}:b has no kernels"):
        select_kernels(bundle(), Targets([]), [app()])


def test_select_kernels_refuses_clashing_target_names() -> None:
    with pytest.raises(DeployBundleError) as excinfo:
        select_kernels(bundle(), Targets([kernel("saxpy"), kernel("saxpy", "other")]), [])
    message = str(excinfo.value)
    assert "target names clash" in message
    assert f"{{'saxpy': ['{KERNELS}:saxpy', 'other:saxpy']}}. Rename one." in message


def test_check_capabilities() -> None:
    check_capabilities(bundle(), GpuKernelFieldSet.create(kernel("saxpy")), toolchains())
    only_90 = GpuKernelFieldSet.create(kernel("saxpy", capabilities=["sm_90"]))
    with pytest.raises(DeployBundleError) as excinfo:
        check_capabilities(bundle(), only_90, toolchains())
    assert " ".join(str(excinfo.value).split()) == (
        f"The deploy_bundle {APP}:b ships sm_87, which the gpu_kernel {KERNELS}:saxpy is not "
        "compiled for (its capabilities: sm_90). Add them to that target's `capabilities`."
    )


def test_check_driver() -> None:
    saxpy = Address(KERNELS, target_name="saxpy")
    check_driver(bundle(), saxpy, "cuda12", "12.6", "8.5")
    with pytest.raises(DeployBundleError) as excinfo:
        check_driver(bundle(), saxpy, "cuda13", "13.0", "9.0", "sm_87")
    assert " ".join(str(excinfo.value).split()) == (
        f"The deploy_bundle {APP}:b targets a CUDA 12.6 driver, which cannot load what the GPU "
        f"toolchain 'cuda13' builds for {KERNELS}:saxpy (sm_87): cubins built by CUDA 13.0; PTX "
        "ISA 9.0, which needs a CUDA 13.0 driver. Fix: set the bundle's `toolchain` to one of "
        "CUDA 12.6 or older (see `[gpu-toolchains].toolchains`), or raise `driver_version` if "
        "the device's driver is newer."
    )


def test_bundle_binary() -> None:
    assert bundle_binary(bundle(), Targets([app()])) == app()
    with pytest.raises(DeployBundleError) as excinfo:
        bundle_binary(bundle(), Targets([kernel("saxpy")]))
    assert str(excinfo.value) == (
        f"The `binary` field of {APP}:b must name one `pex_binary` target, got "
        f"['{KERNELS}:saxpy']."
    )


def test_device_pex_field_set_takes_the_bundles_complete_platforms() -> None:
    assert device_pex_field_set(bundle(), app()).complete_platforms.value is None
    platforms = ("3rdparty/platforms:jetson_orin_cp310",)
    field_set = device_pex_field_set(bundle(complete_platforms=list(platforms)), app())
    assert field_set.complete_platforms.value == platforms
    assert field_set.address == Address(APP, target_name="app")
