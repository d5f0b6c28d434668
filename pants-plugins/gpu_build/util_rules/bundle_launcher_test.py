"""The bundle launcher's script: well-formed sh, naming its PEX and sha256; bad input refused;
written only for a venv-mode binary.

Running it (venv made once, reused, a tampered PEX refused) is in
deploy_bundle_integration_test.py, on the bundle `pants package` builds.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pants.backend.python.target_types import PexBinary
from pants.engine.addresses import Address

from gpu_build.util_rules.bundle_launcher import (
    TAMPERED_EXIT,
    is_venv_mode,
    launcher_name,
    launcher_script,
    pex_identity,
)
from gpu_spec.launcher_env import INIT_CUDA_ENV, INIT_CUDA_PID_ENV, PREPARE_ONLY_ENV

SHA = "ab" * 32


def test_the_script_is_posix_sh_naming_its_pex_and_digest() -> None:
    script = launcher_script("app.pex", SHA).decode()
    assert script.startswith("#!/bin/sh\n")
    assert 'pex="$bundle/app.pex"' in script and f'venv="$venvs/{SHA}"' in script
    assert """' "$venv/pex" "$@"\n""" in script and 'exec "$venv/bin/python" -sE -c' in script
    subprocess.run(["sh", "-n"], input=script.encode(), check=True)  # parses as sh


def test_the_embedded_installer_is_valid_python() -> None:
    script = launcher_script("app.pex", SHA).decode()
    installer = script.split("<<'INSTALL' || status=$?\n")[1].split("\nINSTALL\n")[0]
    compile(installer, "installer", "exec")
    assert f'"$python" - "$pex" "$venv" {SHA}' in script


def test_names_and_bad_input() -> None:
    assert launcher_name("app.pex") == "app"
    assert launcher_name("tool") == "tool.run"
    with pytest.raises(ValueError, match="sha256"):
        launcher_script("app.pex", "nothex")
    with pytest.raises(ValueError, match="plain PEX file name"):
        launcher_script("../app.pex", SHA)


def test_only_a_venv_mode_binary_gets_a_launcher() -> None:
    def binary(**fields: str) -> PexBinary:
        return PexBinary({"entry_point": "app.py:main", **fields}, Address("src", target_name="a"))

    assert is_venv_mode(binary(execution_mode="venv"))
    assert not is_venv_mode(binary(execution_mode="zipapp")) and not is_venv_mode(binary())


def boot_code(init_cuda: bool = True) -> str:
    script = launcher_script("app.pex", SHA, init_cuda=init_cuda).decode()
    return script.split('exec "$venv/bin/python" -sE -c \'')[1].split('\' "$venv/pex"')[0]


FAKE_DRIVER = """
import os, time
def log(what):
    with open(os.environ["DRIVER_LOG"], "a") as f:
        f.write(f"{what} {time.monotonic()}\\n")
def cuInit(flags):
    log("cuInit")
    return (0,)
def cuDeviceGet(ordinal):
    log(f"cuDeviceGet({ordinal})")
    return (0, ordinal)
def cuDevicePrimaryCtxRetain(dev):
    time.sleep(0.5)  # the driver's set-up: long enough for the app to start meanwhile
    log("cuDevicePrimaryCtxRetain")
    return (0, 1)
"""

# What the venv's `pex` script would see: it records that and ends with its own status.
FAKE_VENV_PEX = """
import json, os, sys, threading, time
with open(os.environ["APP_LOG"], "w") as f:
    json.dump({"argv": sys.argv, "path0": sys.path[0], "name": __name__, "file": __file__,
               "started": time.monotonic(), "pid": os.getpid(),
               "init_pid": os.environ.get("GPU_BUNDLE_CUDA_INIT_PID")}, f)
sys.exit(3)
"""


def run_boot(tmp_path: Path, boot: str, **env: str) -> tuple:
    (tmp_path / "fake" / "cuda" / "bindings").mkdir(parents=True, exist_ok=True)
    (tmp_path / "fake" / "cuda" / "bindings" / "driver.py").write_text(FAKE_DRIVER)
    venv = tmp_path / "venv"
    venv.mkdir(exist_ok=True)
    (venv / "pex").write_text(FAKE_VENV_PEX)
    logs = {"DRIVER_LOG": str(tmp_path / "driver.log"), "APP_LOG": str(tmp_path / "app.json")}
    for log in logs.values():
        Path(log).unlink(missing_ok=True)
    full_env = {k: v for k, v in os.environ.items() if k != INIT_CUDA_ENV}
    full_env.update(PYTHONPATH=str(tmp_path / "fake"), **logs, **env)
    proc = subprocess.run(
        [sys.executable, "-s", "-c", boot, str(venv / "pex"), "a", "--b"],
        env=full_env,
        capture_output=True,
        text=True,
    )
    driver_log = Path(logs["DRIVER_LOG"])
    calls = (
        [line.split() for line in driver_log.read_text().splitlines()]
        if driver_log.exists()
        else []
    )
    return proc, json.loads(Path(logs["APP_LOG"]).read_text()), calls


def test_the_boot_starts_cuda_in_a_thread_and_runs_the_venvs_pex_as_python_would(
    tmp_path: Path,
) -> None:
    proc, app, calls = run_boot(tmp_path, boot_code())
    assert proc.returncode == 3, proc.stderr  # the app's own exit status
    venv_pex = str(tmp_path / "venv" / "pex")
    assert app["argv"] == [venv_pex, "a", "--b"] and app["name"] == "__main__"
    assert app["path0"] == str(tmp_path / "venv") and app["file"] == venv_pex
    assert app["init_pid"] == str(app["pid"])  # for gpu_runtime's forked-child error
    assert [name for name, _ in calls] == ["cuInit", "cuDeviceGet(0)", "cuDevicePrimaryCtxRetain"]
    retained = float(calls[-1][1])
    assert app["started"] < retained  # the app ran while the driver was busy: they overlap
    # and the process waited for the driver call to return before it exited (not a daemon)


def test_the_boot_leaves_cuda_alone_when_told_to(tmp_path: Path) -> None:
    proc, app, calls = run_boot(tmp_path, boot_code(init_cuda=False))
    assert proc.returncode == 3 and calls == [] and app["init_pid"] is None, proc.stderr
    proc, app, calls = run_boot(tmp_path, boot_code(init_cuda=True), **{INIT_CUDA_ENV: "0"})
    assert proc.returncode == 3 and calls == [] and app["init_pid"] is None, proc.stderr
    proc, app, calls = run_boot(tmp_path, boot_code(init_cuda=False), **{INIT_CUDA_ENV: "1"})
    assert proc.returncode == 3 and len(calls) == 3, proc.stderr
    proc, app, calls = run_boot(tmp_path, boot_code(init_cuda=False), **{INIT_CUDA_ENV: "yes"})
    assert f"{INIT_CUDA_ENV}=yes is neither 0 nor 1; using 0" in proc.stderr and calls == []


def test_a_driver_that_fails_leaves_the_app_to_run_and_report_it(tmp_path: Path) -> None:
    (tmp_path / "fake" / "cuda").mkdir(parents=True)  # cuda.bindings missing: ImportError
    boot = boot_code()
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "pex").write_text(FAKE_VENV_PEX)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "fake"), APP_LOG=str(tmp_path / "a.json"))
    proc = subprocess.run(
        [sys.executable, "-s", "-c", boot, str(venv / "pex")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 3 and proc.stderr == "", proc.stderr  # nothing printed by us
    assert INIT_CUDA_PID_ENV in boot


def test_prepare_only_makes_the_venv_compiles_it_and_runs_no_app(tmp_path: Path) -> None:
    """What the deploy tool runs on the device before a switch: with the venv already recorded
    (as the install step leaves it), GPU_BUNDLE_PREPARE_ONLY=1 compiles the venv's bytecode and
    exits 0 without starting the app; without it, the app's interpreter runs the venv's pex."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "app.pex").write_bytes(b"not run")
    launcher = bundle / "app"
    launcher.write_bytes(launcher_script("app.pex", SHA))
    launcher.chmod(0o755)
    venv = tmp_path / "venvs" / SHA
    (venv / "bin").mkdir(parents=True)
    (venv / "pex").write_text("")
    calls = tmp_path / "calls"
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$1 $2" >> {calls}\n')
    python.chmod(0o755)
    env = dict(os.environ, GPU_BUNDLE_VENVS=str(tmp_path / "venvs"))
    done = subprocess.run([str(launcher)], env={**env, PREPARE_ONLY_ENV: "1"}, timeout=60)
    assert done.returncode == 0
    # bytecode, then one import of the runtime's modules: no app started
    assert calls.read_text() == "-m compileall\n-sE -c\n"
    calls.unlink()
    subprocess.run([str(launcher)], env=env, check=True, timeout=60)
    assert calls.read_text() == "-sE -c\n"  # the app's interpreter on the venv's pex


@pytest.mark.parametrize("packed", [True, False])
def test_the_launcher_checks_the_pex_by_the_identity_the_build_computed(
    tmp_path: Path, packed: bool
) -> None:
    """`pex_identity` (the build, from the digest's file hashes) and the launcher's own check
    (on the device, from the files) are one formula: the right PEX passes the check, a changed
    file of it (a packed PEX's module, a zipapp's byte) is refused before anything runs."""
    bundle = tmp_path / "bundle"
    pex = bundle / "app.pex"
    if packed:
        (pex / ".deps").mkdir(parents=True)
        files = {
            "PEX-INFO": b"{}",
            "__main__.py": b"import sys; sys.exit(5)\n",
            ".deps/numpy-2.2.6-cp312-cp312-manylinux_2_17_x86_64.whl": b"PK zip",
            "imaging/app.py": b"print('app')\n",
        }
        for rel, data in files.items():
            (pex / rel).parent.mkdir(parents=True, exist_ok=True)
            (pex / rel).write_bytes(data)
        changed = pex / "imaging" / "app.py"
    else:
        bundle.mkdir()
        files = {"": b"import sys; sys.exit(5)\n"}
        pex.write_bytes(files[""])
        changed = pex
    identity = pex_identity({rel: hashlib.sha256(d).hexdigest() for rel, d in files.items()})
    launcher = bundle / "app"
    launcher.write_bytes(launcher_script("app.pex", identity))
    launcher.chmod(0o755)
    env = dict(
        os.environ, GPU_BUNDLE_VENVS=str(tmp_path / "venvs"), GPU_BUNDLE_PYTHON=sys.executable
    )
    # the right PEX passes the check; this stand-in then exits 5 where pex would print its venv
    run = subprocess.run([str(launcher)], env=env, capture_output=True, text=True, timeout=60)
    assert (
        run.returncode != TAMPERED_EXIT and "damaged or was altered" not in run.stderr
    ), run.stderr
    if packed:
        # its run wrote no bytecode into the bundle; bytecode that `python3 app.pex` writes there
        # is not part of the PEX's identity
        assert not list(pex.rglob("__pycache__")), list(pex.rglob("*"))
        (pex / "__pycache__").mkdir()
        (pex / "__pycache__" / "__main__.cpython-311.pyc").write_bytes(b"bytecode")
        run = subprocess.run([str(launcher)], env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode != TAMPERED_EXIT, run.stderr
    with open(changed, "ab") as f:
        f.write(b"\n")
    run = subprocess.run([str(launcher)], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == TAMPERED_EXIT and "damaged or was altered" in run.stderr, run.stderr
