"""Which device runs which bundle: the fleet tool's reading of Ansible inventories (YAML and INI,
nested groups, `--limit`) and its refusals, through the real `ansible-inventory`."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

YAML = """
all:
  vars:
    gpu_bundle_path: /opt/imaging
  children:
    jetsons:
      children:
        orin:
          hosts:
            orin-1:
            orin-2:
    h200:
      hosts:
        h200-1:
          ansible_port: 2222
    spare: {}
"""

INI = """
[orin]
orin-1 ansible_host=orin-1.lab.invalid
orin-2 ansible_host=orin-2.lab.invalid

[h200]
h200-1
orin-2

[all:vars]
gpu_bundle_path=/opt/imaging
"""


@pytest.fixture(scope="module")
def fleet_tool() -> ModuleType:
    """scripts/fleet_tool.py as a module (it is a script of the deploy PEX, not a package)."""
    path = REPO / "pants-plugins" / "gpu_build" / "scripts" / "fleet_tool.py"
    spec = importlib.util.spec_from_file_location("fleet_tool", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_nested_yaml_groups_map_to_bundles(fleet_tool: ModuleType, tmp_path: Path) -> None:
    inventory, env = write(tmp_path, "devices.yml", YAML), dict(os.environ)
    assert fleet_tool.inventory_groups(inventory, env) >= {"jetsons", "orin", "h200", "spare"}
    hosts = fleet_tool.inventory_hosts(inventory, None, env)
    assigned = fleet_tool.assign_bundles(hosts, {"jetsons": "/b/orin", "h200": "/b/h200"})
    assert assigned == {"orin-1": "/b/orin", "orin-2": "/b/orin", "h200-1": "/b/h200"}
    limited = fleet_tool.inventory_hosts(inventory, "orin-2:h200-1", env)
    assert sorted(limited) == ["h200-1", "orin-2"]


def test_a_host_in_two_groups_of_different_bundles_is_refused(
    fleet_tool: ModuleType, tmp_path: Path
) -> None:
    hosts = fleet_tool.inventory_hosts(write(tmp_path, "devices.ini", INI), None, dict(os.environ))
    with pytest.raises(
        fleet_tool.FleetError,
        match="host orin-2 is in groups orin, h200, which name different bundles",
    ):
        fleet_tool.assign_bundles(hosts, {"orin": "/b/orin", "h200": "/b/h200"})
    # The same bundle through both groups is no conflict.
    same = fleet_tool.assign_bundles(hosts, {"orin": "/b/x", "h200": "/b/x"})
    assert same == {"h200-1": "/b/x", "orin-1": "/b/x", "orin-2": "/b/x"}


def test_a_group_the_inventory_lacks_is_named_before_any_device_is_touched(
    fleet_tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    inventory = write(tmp_path, "devices.ini", INI)
    argv = ["--inventory", inventory, "--bundle", f"orni={tmp_path}", "--summary-json", "s.json"]
    assert fleet_tool.main(argv) == 1
    err = capsys.readouterr().err
    assert f"{inventory} has no group orni, which `bundles` names" in err, err
    assert not (Path.cwd() / "s.json").exists()


def test_an_unreadable_inventory_is_named(fleet_tool: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(fleet_tool.FleetError, match="ansible-inventory cannot read"):
        fleet_tool.inventory_listing(str(tmp_path / "missing.ini"), None, dict(os.environ))
