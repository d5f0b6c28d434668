"""package_deploy_bundle's checks that run before anything is built (the rest: integration)."""

from __future__ import annotations

from typing import NoReturn

import pytest
from pants.backend.python.target_types import PexBinary
from pants.engine.addresses import Address, UnparsedAddressInputs
from pants.engine.fs import CreateDigest, Digest, MergeDigests
from pants.engine.target import InvalidFieldException, Targets
from pants.testutil.rule_runner import MockGet, run_rule_with_mocks

from gpu_build.goals.package_bundle import package_deploy_bundle
from gpu_build.target_types import DeployBundleTarget
from gpu_build.util_rules.bundle_archive import CreateDeterministicTarGz
from gpu_build.util_rules.bundle_cache import (
    BundleCompiles,
    BundleCompilesRequest,
    KernelCache,
    KernelCacheRequest,
)
from gpu_build.util_rules.bundle_field_set import DeployBundleError, DeployBundleFieldSet
from gpu_build.util_rules.bundle_kernels import BundleKernels, BundleKernelsRequest
from gpu_build.util_rules.bundle_outputs import AllBundleOutputs
from gpu_build.util_rules.bundle_pex import DevicePex, DevicePexRequest
from gpu_build.util_rules.bundle_signing import (
    ManifestSignature,
    PinnedKeys,
    SignManifestRequest,
)
from gpu_build.validation import (
    DeployBundleValidationRequest,
    ValidatedDeployBundle,
    validated_deploy_bundle,
)

APP = "src/python/imaging"


def built(_: object) -> NoReturn:
    raise AssertionError("built something before the bundle's checks")


def package(binary: PexBinary, driver_version: str = "13.0") -> None:
    bundle = DeployBundleTarget(
        {
            "binary": f":{binary.address.target_name}",
            "capabilities": ["sm_90"],
            "driver_version": driver_version,
        },
        Address(APP, target_name="imaging_h200"),
    )

    def targets(inputs: UnparsedAddressInputs) -> Targets:
        return Targets([binary] if inputs.values else [])

    run_rule_with_mocks(
        package_deploy_bundle,
        rule_args=[DeployBundleFieldSet.create(bundle), AllBundleOutputs()],
        mock_gets=[
            MockGet(
                ValidatedDeployBundle, (DeployBundleValidationRequest,), validated_deploy_bundle
            ),
            MockGet(Targets, (UnparsedAddressInputs,), targets),
            MockGet(PinnedKeys, (), lambda: PinnedKeys(())),
            MockGet(BundleKernels, (BundleKernelsRequest,), lambda _: BundleKernels()),
            MockGet(DevicePex, (DevicePexRequest,), built),
            MockGet(BundleCompiles, (BundleCompilesRequest,), built),
            MockGet(Digest, (CreateDigest,), built),
            MockGet(KernelCache, (KernelCacheRequest,), built),
            MockGet(ManifestSignature, (SignManifestRequest,), built),
            MockGet(Digest, (MergeDigests,), built),
            MockGet(Digest, (CreateDeterministicTarGz,), built),
        ],
    )


def test_a_venv_app_named_cache_is_refused_before_anything_is_built() -> None:
    binary = PexBinary(
        {"entry_point": "app.py:main", "execution_mode": "venv"}, Address(APP, target_name="cache")
    )
    with pytest.raises(DeployBundleError) as e:
        package(binary)
    assert str(e.value) == (
        f"The deploy_bundle {APP}:imaging_h200 cannot have the pex_binary {APP}:cache as its "
        "app: a venv PEX gets a launcher named after its target, `cache`, which is the bundle's "
        "`cache/` directory of kernels. Rename the pex_binary (e.g. to `app`)."
    )


def test_a_zipapp_named_cache_gets_no_launcher_and_is_built() -> None:
    binary = PexBinary({"entry_point": "app.py:main"}, Address(APP, target_name="cache"))
    with pytest.raises(AssertionError, match="built something"):
        package(binary)


def test_a_bundle_whose_fields_are_invalid_is_refused_before_anything_is_built() -> None:
    """The bundle builds as a target (so it fails no goal that does not use it); packaging it
    refuses it in one line first."""
    binary = PexBinary({"entry_point": "app.py:main"}, Address(APP, target_name="app"))
    with pytest.raises(InvalidFieldException) as e:
        package(binary, driver_version="580.159")
    assert str(e.value) == (
        f"The `driver_version` field in target {APP}:imaging_h200 must be the CUDA version the "
        'driver supports, like `"12.6"` (nvidia-smi\'s "CUDA Version", not the driver release '
        "such as 580.159), got '580.159'."
    )
