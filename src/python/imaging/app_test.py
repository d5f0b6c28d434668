"""The example app on the CPU: GPU-side errors are one clear message and exit status 2, and
`--self-test --dry-run` runs the example's references through gpu_runtime's runner."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gpu_runtime.driver.device
from gpu_runtime.conftest import FakeBackend, library_specs, write_bundle
from gpu_runtime.errors import DeviceError
from gpu_runtime.selftest.inputs import HostArray
from gpu_spec.conftest import MATMUL_WITH_LD, arr, numba_array_params
from imaging import app

BLUR = [
    (
        "box_blur_3x3__0",
        [
            {
                "name": "box_blur_3x3",
                "entry": "_Zblur",
                "abi": "numba",
                "signature": "void(float32[:, ::1], float32[:, ::1])",
                "args": [arr("float32", 2), arr("float32", 2)],
                "params": numba_array_params(2) * 2,
            }
        ],
    )
]


class HostDeviceArray(HostArray):
    """app's DeviceArray on host memory: launches go to a fake backend, which computes nothing."""

    @classmethod
    def from_numpy(cls, a):
        return cls(np.array(a))

    @classmethod
    def empty(cls, shape, dtype):
        return cls(np.zeros(shape, dtype))

    zeros = empty

    def to_numpy(self, stream=None):
        return self.a.copy()


@pytest.fixture
def example_bundle(tmp_path):
    """A fake bundle of the example's libraries, blur included."""
    specs = library_specs(
        ["saxpy", "blur", "histogram", "matmul", "sobel"],
        extra={
            "blur": ("src/python/imaging/kernels/blur.py", "numba", BLUR),
            "matmul": ("src/python/imaging/kernels/matmul.cu", "cuda_cpp", MATMUL_WITH_LD),
        },
    )
    return write_bundle(str(tmp_path / "dist" / "imaging_h200"), specs)


@pytest.fixture
def fake_gpu(monkeypatch):
    """Every CudaBackend the app opens is this fake GPU; its DeviceArrays live on the host."""
    backend = FakeBackend()
    monkeypatch.setattr(gpu_runtime.driver.device, "CudaBackend", lambda ordinal=None: backend)
    monkeypatch.setattr(app, "DeviceArray", HostDeviceArray)
    return backend


def run_app(capsys, *argv):
    rc = app.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_missing_cache_is_a_message_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPU_RUNTIME_CACHE", str(tmp_path / "nowhere"))
    rc, _, err = run_app(capsys)
    assert rc == app.EXIT_GPU_ERROR == 2
    assert err.startswith("error: no manifest.json in ") and "Traceback" not in err


def test_no_cache_anywhere_and_strict(tmp_path, monkeypatch, capsys):
    for var in ("GPU_RUNTIME_CACHE", "PEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GPU_RUNTIME_STRICT", "1")
    monkeypatch.setattr("sys.argv", [str(tmp_path / "app.pex")])
    rc, _, err = run_app(capsys)
    assert rc == 2 and err.startswith("error: No GPU kernel cache found")
    assert os.path.join(str(tmp_path), "cache") in err and "strict mode" in err


def test_tampered_file_is_refused(example_bundle, fake_gpu, monkeypatch, capsys):
    cubin = os.path.join(example_bundle, "blur", "cuda13", "sm_90", "box_blur_3x3__0.cubin")
    with open(cubin, "ab") as f:
        f.write(b"x")
    monkeypatch.setenv("GPU_RUNTIME_CACHE", example_bundle)
    rc, out, err = run_app(capsys)
    assert rc == 2 and "<KernelCache of bundle 'imaging_h200'" in out
    assert err.startswith(
        "error: cache file blur/cuda13/sm_90/box_blur_3x3__0.cubin does not match"
    )
    assert fake_gpu.loads == []


def test_no_compatible_variant(example_bundle, fake_gpu, monkeypatch, capsys):
    fake_gpu.info = FakeBackend(capability=(7, 5), driver=(12, 4), name="Tesla T4").info
    monkeypatch.setenv("GPU_RUNTIME_CACHE", example_bundle)
    rc, _, err = run_app(capsys)
    assert rc == 2
    assert err.startswith("error: No GPU code in library 'blur' in bundle 'imaging_h200' can run")
    assert "device: Tesla T4 (sm_75)" in err


def test_no_driver(example_bundle, monkeypatch, capsys):
    class NoDriver(FakeBackend):
        def device_info(self):
            raise DeviceError("no usable CUDA device (device 0): CUDA_ERROR_NO_DEVICE")

    monkeypatch.setattr(gpu_runtime.driver.device, "CudaBackend", lambda ordinal=None: NoDriver())
    monkeypatch.setenv("GPU_RUNTIME_CACHE", example_bundle)
    rc, _, err = run_app(capsys, "--self-test")
    assert (rc, err) == (2, "error: no usable CUDA device (device 0): CUDA_ERROR_NO_DEVICE\n")


def test_a_failing_check_is_exit_1_not_2(example_bundle, fake_gpu, monkeypatch, capsys):
    monkeypatch.setenv("GPU_RUNTIME_CACHE", example_bundle)
    rc, out, _ = run_app(capsys)  # the fake GPU computes nothing: only sobel's zeros are right
    assert rc == 1 and out.splitlines()[-1].startswith("1 passed, 5 failed")
    assert [launch[0][1] for launch in fake_gpu.launches] == [
        "blur/box_blur_3x3__0",
        "sobel/sobel",
        "histogram/histogram_256__0",
        "saxpy/saxpy__0",
        "matmul/matmul",
        "matmul/matmul",  # matmul_ld<float, 16>, the same module
    ]


def test_self_test_dry_run(example_bundle, capsys):
    rc, out, _ = run_app(capsys, "--self-test", "--dry-run", "--cache", example_bundle, "-q")
    assert rc == 0
    lines = out.splitlines()
    # 10 signatures in 2 modes, all dry; the sha256 check; the probe is not run dry
    assert lines[-1] == "1 passed, 0 failed, 21 skipped"
    assert sum("reason=dry run (no launch)" in line for line in lines) == 20
    assert any(line.startswith("SKIP [ptx] ptx sm_90 blur.box_blur_3x3(") for line in lines)
