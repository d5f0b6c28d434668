"""The documentation check's table and failure reporting, through a fake GPU (no device)."""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

import gpu_runtime
from gpu_runtime.conftest import FakeBackend
from gpu_runtime.driver import devarray
from gpu_runtime_testutil.fake_driver import FakeDriver
from gpu_spec.conftest import _kernel, library_specs, ptr, scal, write_bundle
from numba_docs import check

# cpointer's add_one as gpu_compiler records it: (CPointer(uint8), uint32)
ADD_ONE = [
    (
        "add_one__0",
        [
            _kernel(
                "add_one",
                "_Zadd_one",
                "void(CPointer(uint8), uint32)",
                "numba",
                [ptr("uint8"), scal("uint32")],
                ["u64", "u32"],
            )
        ],
    )
]


class RunsAddOne(FakeBackend):
    """Runs add_one on the fake driver's host memory, as the GPU would."""

    def launch(self, func, grid, block, stream, shared_mem, params):
        address, n = struct.unpack("<QI", b"".join(params.param_bytes()))
        data = (ctypes.c_uint8 * n).from_address(address)
        for i in range(min(n, grid[0] * block[0])):
            data[i] = (data[i] + 1) % 256


@pytest.fixture
def driver(monkeypatch):
    d = FakeDriver()
    monkeypatch.setattr(devarray, "driver_api", lambda: d)
    monkeypatch.setattr(devarray, "_ensure_context", lambda device: 0 if device is None else device)
    return d


@pytest.fixture
def bundle(tmp_path):
    extra = {"cpointer": ("src/python/numba_docs/kernels/cpointer.py", "numba", ADD_ONE)}
    return write_bundle(
        str(tmp_path / "numba_docs_h200"),
        library_specs(["saxpy", "cpointer"], caps=["sm_90"], extra=extra),
        bundle="numba_docs_h200",
    )


def test_a_case_that_runs_and_one_missing_from_the_bundle(bundle, driver):
    cache = gpu_runtime.open_cache(bundle, backend=RunsAddOne())
    row = check.run_case(cache, "cpointer")
    assert row[:6] == ("cpointer", "yes", "yes", "0", "ok", "cubin sm_90")
    assert check.run_case(cache, "vecadd") == (
        "vecadd",
        "no",
        "-",
        "-",
        "FAIL",
        "-",
        "not in the bundle's manifest",
    )


def test_wrong_results_and_errors_fail(bundle, driver):
    row = check.run_case(gpu_runtime.open_cache(bundle, backend=FakeBackend()), "cpointer")
    assert row[2:5] == ("yes", "1", "FAIL")  # ran, nothing was added
    row = check.run_case(
        gpu_runtime.open_cache(bundle, backend=FakeBackend(), prefer="ptx"), "cpointer"
    )
    assert row[:3] == ("cpointer", "yes", "yes") and row[5] == "ptx sm_90"


def test_table_and_exit_status(bundle, driver, monkeypatch, capsys):
    monkeypatch.setenv("GPU_RUNTIME_CACHE", bundle)
    monkeypatch.setattr(gpu_runtime.driver.device, "CudaBackend", lambda ordinal=None: RunsAddOne())
    assert check.main(["--only", "cpointer"]) == 0
    out = capsys.readouterr().out
    assert "kernel   | built | ran | max error | ok | variant" in out
    assert "all documentation kernels passed" in out
    assert check.main(["--only", "cpointer", "--only", "cg"]) == 1
    assert "FAILED: cg" in capsys.readouterr().out
    monkeypatch.setenv("GPU_RUNTIME_CACHE", str(np.__file__))  # not a cache
    assert check.main([]) == 2
