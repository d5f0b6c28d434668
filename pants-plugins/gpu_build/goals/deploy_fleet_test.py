"""The fleet deploy's process, built purely (no engine): the fleet tool's argv from a target and
the two option scopes, and the refusals of the fleet's own fields."""

from __future__ import annotations

import os
from typing import Any

import pytest
from pants.base.build_root import BuildRoot
from pants.engine.addresses import Address
from pants.testutil.option_util import create_subsystem

from gpu_build.goals.deploy_fleet import (
    DeviceFleetDeployFieldSet,
    fleet_field_errors,
    fleet_tool_argv,
)
from gpu_build.subsystems.deploy import GpuBundleDeploy, GpuFleetDeploy
from gpu_build.target_types import DeviceFleetTarget

ADDRESS = Address("src/fleet", target_name="fleet")
ROOT = os.path.abspath(os.sep)  # a build root that exists (BuildRoot checks), as "/"
SUMMARY = os.path.join(ROOT, "dist", "fleet.fleet-summary.json")


def field_set(**fields: Any) -> DeviceFleetDeployFieldSet:
    values = {"inventory": "devices.ini", "bundles": {"orin": ":orin", "h200": ":h200"}}
    return DeviceFleetDeployFieldSet.create(DeviceFleetTarget({**values, **fields}, ADDRESS))


def deploy_options(**options: Any) -> GpuBundleDeploy:
    defaults: dict = dict(
        destination=None,
        port=22,
        identity_file=None,
        ssh_options=[],
        remote_python="python3",
        limit_kbps=0,
        env_vars=["SSH_AUTH_SOCK"],
    )
    return create_subsystem(GpuBundleDeploy, **{**defaults, **options})


def argv(fs: DeviceFleetDeployFieldSet, fleet: GpuFleetDeploy, deploy: GpuBundleDeploy) -> list:
    build_root = BuildRoot()
    build_root.path = ROOT
    return fleet_tool_argv(
        fs,
        fleet,
        deploy,
        bundle_dirs={"orin": "imaging_orin", "h200": "imaging_h200"},
        ssh="/usr/bin/ssh",
        sftp="/usr/bin/sftp",
        summary_json=SUMMARY,
        build_root=build_root,
    )


def test_the_fields_and_options_become_the_fleet_tools_arguments() -> None:
    fs = field_set(rollout=["1", "25%", "100%"], max_fail_percentage=10, health_check="./app -t")
    fleet = create_subsystem(GpuFleetDeploy, ansible_resolve="ansible", check=True, limit="orin")
    deploy = deploy_options(
        identity_file="keys/fleet", ssh_options=["ConnectTimeout=5"], remote_python="python3.10"
    )
    assert argv(fs, fleet, deploy) == [
        *("--inventory", "src/fleet/devices.ini"),
        *("--bundle", "orin=imaging_orin", "--bundle", "h200=imaging_h200"),
        *("--rollout", "1", "--rollout", "25%", "--rollout", "100%"),
        *("--max-fail-percentage", "10", "--forks", "5"),
        *("--health-check", "./app -t", "--health-timeout", "60"),
        *("--remote-python", "python3.10", "--ssh", "/usr/bin/ssh"),
        *("--identity", os.path.join(ROOT, "keys", "fleet")),
        *("--ssh-option", "ConnectTimeout=5"),
        "--deploy-arg=--ssh",
        "--deploy-arg=/usr/bin/ssh",
        "--deploy-arg=--sftp",
        "--deploy-arg=/usr/bin/sftp",
        "--deploy-arg=--limit-kbps",
        "--deploy-arg=0",
        "--deploy-arg=--ssh-option",
        "--deploy-arg=ConnectTimeout=5",
        "--check",
        *("--limit", "orin"),
        *("--summary-json", SUMMARY),
    ]


def test_no_dry_run_and_no_limit_by_default() -> None:
    fleet = create_subsystem(GpuFleetDeploy, ansible_resolve="ansible", check=False, limit=None)
    args = argv(field_set(), fleet, deploy_options())
    assert "--check" not in args and "--limit" not in args and "--identity" not in args
    assert args[args.index("--rollout") : args.index("--rollout") + 2] == ["--rollout", "100%"]
    assert args[args.index("--max-fail-percentage") + 1] == "0"


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"rollout": ["1", "0%"]}, "`rollout` has '0%'"),
        ({"rollout": ["one"]}, "`rollout` has 'one'"),
        ({"rollout": ["-1"]}, "`rollout` has '-1'"),
        ({"rollout": []}, "`rollout` has no batch"),
        ({"max_fail_percentage": 101}, "`max_fail_percentage` is 101"),
        ({"max_fail_percentage": -1}, "`max_fail_percentage` is -1"),
        ({"bundles": {}}, "`bundles` is empty"),
    ],
)
def test_a_bad_field_is_named_with_its_fix(fields: dict, fragment: str) -> None:
    errors = fleet_field_errors(field_set(**fields))
    assert any(fragment in e for e in errors), errors


def test_good_fields_pass() -> None:
    assert (
        fleet_field_errors(field_set(rollout=["1", "50%", "100%"], max_fail_percentage=100)) == []
    )
