"""The `pants run` request of a deploy_bundle and its platform checks, built purely and asserted
without the engine; jit_mode_integration_test runs the example bundles for real."""

from __future__ import annotations

import json

import pytest
from pants.core.goals.package import BuiltPackage
from pants.engine.fs import EMPTY_DIGEST

from gpu_build.goals.run_bundle import BuiltFor, built_for, bundle_run_request, runnable_here
from gpu_build.util_rules.bundle_field_set import DeployBundleError


def platform(machine: str, python: str) -> bytes:
    env = {"platform_machine": machine, "python_version": python, "sys_platform": "linux"}
    return json.dumps({"marker_environment": env, "compatible_tags": []}).encode()


ORIN = BuiltFor("aarch64", "3.10", "3rdparty/platforms/jetson_orin_cp310.json")
H200 = BuiltFor("x86_64", "3.12", "3rdparty/platforms/h200_x86_64_cp312.json")


def test_runs_the_packaged_pex_beside_its_cache_strictly_by_the_resolved_python() -> None:
    request = bundle_run_request(
        BuiltPackage(EMPTY_DIGEST, ()), "imaging_h200", "app.pex", "/py/3.12/bin/python3.12"
    )
    assert request.digest == EMPTY_DIGEST
    assert request.args == ("/py/3.12/bin/python3.12", "{chroot}/imaging_h200/app.pex")
    assert dict(request.extra_env) == {"GPU_RUNTIME_STRICT": "1"}
    shebang = bundle_run_request(BuiltPackage(EMPTY_DIGEST, ()), "b", "app.pex")
    assert shebang.args == ("{chroot}/b/app.pex",)


def test_complete_platforms_are_read_and_bad_ones_named() -> None:
    assert built_for([(H200.source, platform("x86_64", "3.12"))]) == (H200,)
    for bad in (b"{}", b"not json", json.dumps({"marker_environment": {}}).encode()):
        with pytest.raises(DeployBundleError, match="x.json is no Pex complete platform"):
            built_for([("x.json", bad)])


def test_a_bundle_for_this_machine_runs_with_its_cpython() -> None:
    ics = runnable_here("src:b", [ORIN, H200], "x86_64")
    assert ics is not None and [str(c) for c in ics] == ["CPython==3.12.*"]
    assert runnable_here("src:b", [], "x86_64") is None  # built for this machine's interpreters


def test_a_bundle_for_another_machine_is_refused_in_one_line() -> None:
    with pytest.raises(DeployBundleError) as e:
        runnable_here("src/python/imaging:imaging_orin", [ORIN], "x86_64")
    message = str(e.value)
    assert "\n" not in message
    assert "built for aarch64 / CPython 3.10 (3rdparty/platforms/jetson_orin_cp310.json)" in message
    assert "this machine is x86_64" in message and "imaging_orin" in message
