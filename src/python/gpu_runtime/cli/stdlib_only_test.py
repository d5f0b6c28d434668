"""`python3 -m gpu_runtime platform` on a device's bare python3, and a lazy `import gpu_runtime`.

The docs' Orin steps run the command on the device before any bundle is there: no numpy, no
cuda-bindings, nothing but a copy of gpu_runtime. Those are made unimportable here (a package of
each name that raises ImportError, first on PYTHONPATH), gpu_spec too, so that the package must
get by on the standard library alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gpu_runtime

UNIMPORTABLE = ("numpy", "cuda", "numba", "cupy", "gpu_spec", "gpu_compiler")


def _bare_device(tmp_path: Path) -> dict:
    """The env of a python3 that has gpu_runtime (copied alone) and none of UNIMPORTABLE."""
    stubs = tmp_path / "stubs"
    for name in UNIMPORTABLE:
        (stubs / name).mkdir(parents=True)
        (stubs / name / "__init__.py").write_text(
            f"raise ImportError('no {name} on this device')\n"
        )
    copy = tmp_path / "copy"
    shutil.copytree(
        os.path.dirname(gpu_runtime.__file__),
        copy / "gpu_runtime",
        ignore=shutil.ignore_patterns("*_test.py", "conftest.py", "__pycache__"),
    )
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": f"{stubs}:{copy}"}


def _run(args: list, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-S", *args], env=env, cwd=cwd, capture_output=True, text=True
    )


def test_platform_runs_without_numpy_or_cuda(tmp_path):
    env = _bare_device(tmp_path)
    stub_check = _run(["-c", "import numpy"], env, tmp_path)
    assert stub_check.returncode != 0 and "no numpy on this device" in stub_check.stderr
    done = _run(["-m", "gpu_runtime", "platform"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    printed = json.loads(done.stdout)
    assert sorted(printed) == ["compatible_tags", "marker_environment"]
    assert printed["compatible_tags"] and printed["marker_environment"]["python_version"]
    written = _run(["-m", "gpu_runtime", "platform", "-o", "device.json"], env, tmp_path)
    assert written.returncode == 0, written.stderr
    assert json.loads((tmp_path / "device.json").read_text()) == printed


def test_the_command_line_help_needs_only_the_standard_library(tmp_path):
    done = _run(["-m", "gpu_runtime", "--help"], _bare_device(tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "platform" in done.stdout and "verify" in done.stdout and "cache" in done.stdout


def test_import_gpu_runtime_imports_no_numpy(tmp_path):
    """With numpy importable (this test's own environment), `import gpu_runtime` still leaves it
    alone; the first public name used imports what it needs."""
    code = (
        "import sys, json\n"
        "present = set(sys.modules)\n"  # a .pth of the environment may import cuda at start
        "import gpu_runtime\n"
        "stdlib = getattr(sys, 'stdlib_module_names', ())\n"
        "new = sorted({m.split('.')[0] for m in set(sys.modules) - present} - set(stdlib))\n"
        "numpy_before = 'numpy' in sys.modules\n"
        "from gpu_runtime import DeviceArray\n"
        "print(json.dumps([new, numpy_before, 'numpy' in sys.modules, DeviceArray.__name__]))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    new, numpy_before, numpy_after, name = json.loads(done.stdout)
    assert new == ["gpu_runtime"] or sys.version_info < (3, 10), new  # and the standard library
    assert not numpy_before and not {"numpy", "cuda", "gpu_spec"} & set(new), new
    assert numpy_after and name == "DeviceArray"


def test_every_public_name_is_the_object_of_its_module():
    from gpu_runtime import DeviceArray, GpuRuntimeError, open_cache
    from gpu_runtime.api import open_cache as api_open_cache
    from gpu_runtime.driver.devarray import DeviceArray as devarray_DeviceArray
    from gpu_runtime.errors import GpuRuntimeError as errors_GpuRuntimeError

    assert open_cache is api_open_cache and DeviceArray is devarray_DeviceArray
    assert GpuRuntimeError is errors_GpuRuntimeError
    for name in gpu_runtime.__all__:
        assert getattr(gpu_runtime, name) is not None, name
    assert set(gpu_runtime.__all__) <= set(dir(gpu_runtime))
    namespace: dict = {}
    exec("from gpu_runtime import *", namespace)
    assert set(gpu_runtime.__all__) <= set(namespace)


def test_subpackages_are_attributes_on_use_and_unknown_names_fail():
    assert gpu_runtime.driver.__name__ == "gpu_runtime.driver"
    try:
        gpu_runtime.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("gpu_runtime.no_such_name did not raise AttributeError")
