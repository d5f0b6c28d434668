"""The self-test runner on the CPU: through --dry-run, and through a fake backend that runs the
one kernel these tests give a reference for (saxpy) on host memory."""

from __future__ import annotations

import ctypes
import json
import struct
from typing import Any, Dict, List

import numpy as np
import pytest

import gpu_runtime
from gpu_runtime.conftest import FakeBackend, FakeDeviceArray
from gpu_runtime.selftest import main as selftest
from gpu_runtime.selftest.checks import SelfTest, compare
from gpu_runtime.selftest.inputs import Case, Memory, ReferenceTable, StridedView


def saxpy_case(spec, mem, rng):
    n = 1000
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    a = np.float32(2.0)
    out = mem.zeros(n, np.float32)
    return Case([out, a, mem.array(x), mem.array(y)], 4, 256, {0: a * x + y}, atol=1e-6)


TABLE = ReferenceTable({"saxpy": saxpy_case}, probe="saxpy")


def host_floats(ptr: int, n: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))


class HostSaxpyBackend(FakeBackend):
    """Runs saxpy (numba ABI: out, a, x, y) on host memory; other kernels do nothing."""

    def __init__(self, wrong: bool = False, **kw):
        super().__init__(**kw)
        self.wrong = wrong
        self.streams: List[Any] = []

    def launch(self, func, grid, block, stream, shared_mem, params):
        if "saxpy" not in func[2]:
            return
        p = params.param_bytes()
        n, out_ptr, x_ptr, y_ptr = (
            struct.unpack("<q", p[i])[0] if i == 2 else struct.unpack("<Q", p[i])[0]
            for i in (2, 4, 12, 19)
        )
        (a,) = struct.unpack("<f", p[7])
        out = host_floats(out_ptr, n)
        out[:] = a * host_floats(x_ptr, n) + (0 if self.wrong else host_floats(y_ptr, n))

    def create_stream(self):
        self.streams.append(object())
        return self.streams[-1]


def run_on_host(bundle, backend, table=TABLE, modes=("auto", "ptx")):
    test = SelfTest(
        table,
        Memory(host=True),
        lambda prefer: gpu_runtime.open_cache(bundle, prefer=prefer, backend=backend),
        dry_run=False,
    )
    return test.run(list(modes))


def test_dry_run_over_a_bundle(bundle, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["--cache", bundle, "--dry-run", "-q", "--json", str(out)]
    assert selftest.main(argv, references=TABLE) == 0
    res = json.loads(out.read_text())
    by_status: Dict[str, List[Dict[str, Any]]] = {}
    for r in res["records"]:
        by_status.setdefault(r["status"], []).append(r)
    assert res["failed"] == 0 and res["passed"] == 1  # the sha256 of every file
    dry = [r["what"] for r in by_status["skipped"] if r.get("reason") == "dry run (no launch)"]
    assert dry == [
        "[auto] cubin sm_90 saxpy.saxpy(float32[::1], float32, float32[::1], float32[::1])",
        "[ptx] ptx sm_90 saxpy.saxpy(float32[::1], float32, float32[::1], float32[::1])",
    ]
    # the other 6 signatures in both modes have no reference; the probe is not run dry
    assert (
        sum(r.get("reason") == "no reference in the reference table" for r in by_status["skipped"])
        == 12
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "1 passed, 0 failed, 15 skipped"
    assert any(line.startswith("SKIP [auto] cubin sm_90 histogram.histogram_256") for line in lines)


def test_strict_makes_a_missing_reference_a_failure(bundle):
    assert selftest.main(["--cache", bundle, "--dry-run", "-q", "--strict"], references=TABLE) == 1


def test_dry_run_on_an_older_device_fails_selection(bundle, tmp_path):
    out = tmp_path / "r.json"
    argv = [
        "--cache",
        bundle,
        "--dry-run",
        "--dry-run-device",
        "8.6,12.9",
        "-q",
        "--modes",
        "auto",
        "--json",
        str(out),
    ]
    assert selftest.main(argv, references=TABLE) == 1  # CUDA 13 code, 12.9 driver
    res = json.loads(out.read_text())
    assert any("variant selection" in r["what"] for r in res["records"] if r["status"] == "failed")


def test_references_by_import_path(bundle, capsys):
    argv = [
        "--cache",
        bundle,
        "--dry-run",
        "-q",
        "--references",
        "gpu_runtime.selftest.main_test:TABLE",
    ]
    assert selftest.main(argv) == 0
    assert "[auto] cubin sm_90 saxpy.saxpy" in capsys.readouterr().out
    with pytest.raises(TypeError, match="not a ReferenceTable"):
        selftest.main(["--dry-run", "--references", "gpu_runtime.selftest.main_test:saxpy_case"])


def test_outputs_probe_and_param_layout_on_a_host_backend(bundle):
    backend = HostSaxpyBackend(load_delay=0.02)
    results = run_on_host(bundle, backend)
    assert results.failed == 0, results.records
    passed = [r["what"] for r in results.records if r["status"] == "passed"]
    assert passed[0].startswith("[auto] sha256 of all")
    assert [w.split()[0:2] for w in passed[1:3]] == [["[auto]", "cubin"], ["[ptx]", "ptx"]]
    assert passed[3:] == [
        "concurrent first use from 8 threads",
        "launch on a created stream",
    ]
    probe = [r for r in results.records if r["what"].startswith("concurrent")][0]
    assert probe["modules_loaded"] == 1
    assert len(backend.streams) == 1 and backend.launches[-1][3] is backend.streams[0]


def test_wrong_outputs_fail(bundle):
    results = run_on_host(bundle, HostSaxpyBackend(wrong=True), modes=("auto",))
    failed = {r["what"]: r for r in results.records if r["status"] == "failed"}
    sig = "saxpy.saxpy(float32[::1], float32, float32[::1], float32[::1])"
    assert failed[f"[auto] cubin sm_90 {sig}"]["result"].startswith("arg 0: max abs err")
    assert failed["launch on a created stream"]["result"].startswith("arg 0: max abs")
    assert failed["concurrent first use from 8 threads"]["modules_loaded"] == 1
    assert len(failed) == 3


def test_param_layout_mismatch_fails(bundle):
    backend = HostSaxpyBackend()
    entry = "_ZN6cudapy5saxpy5saxpyB2v1E5ArrayIfLi1E1C7mutable7alignedEfS2_S2_"
    backend.param_layouts[entry] = [(0, 8)] * 22
    results = run_on_host(bundle, backend, modes=("auto",))
    (rec,) = [r for r in results.records if "saxpy.saxpy" in r["what"]]
    assert rec["status"] == "failed" and rec["params"].startswith("MISMATCH ours=[(0, 8), (8, 8)")
    backend = HostSaxpyBackend()
    backend.param_layouts[entry] = (
        [(o, 8) for o in range(0, 56, 8)] + [(56, 4)] + [(o, 8) for o in range(64, 176, 8)]
    )
    results = run_on_host(bundle, backend, modes=("auto",))
    (rec,) = [r for r in results.records if "saxpy.saxpy" in r["what"]]
    assert rec["status"] == "passed" and rec["params"] == "ok"


def test_a_case_for_the_wrong_signature_fails_dispatch(bundle):
    def contiguous_only(spec, mem, rng):  # histogram_256's strided signature needs a view
        return Case([mem.zeros(10, np.uint8), mem.zeros(256, np.uint32)], 1, 256, {})

    table = ReferenceTable({"histogram_256": contiguous_only})
    results = run_on_host(bundle, HostSaxpyBackend(), table=table, modes=("auto",))
    (bad,) = [r for r in results.records if r["status"] == "failed"]
    assert "histogram_256(uint8[:]" in bad["what"]
    assert bad["error"] == "dispatch picked histogram_256(uint8[::1], uint32[::1])"
    assert "no probe kernel (None)" in results.records[-1]["reason"]


def test_a_raising_builder_is_that_check_failing(bundle, capsys):
    def broken(spec, mem, rng):
        raise ValueError("no such input")

    results = run_on_host(
        bundle, HostSaxpyBackend(), table=ReferenceTable({"sum_f32": broken}), modes=("auto",)
    )
    (bad,) = [r for r in results.records if r["status"] == "failed"]
    assert "histogram.sum_f32" in bad["what"] and bad["error"] == "ValueError: no such input"
    assert "Traceback" in capsys.readouterr().err


def test_reference_table_lookup():
    def b(spec, mem, rng):
        raise AssertionError

    t = ReferenceTable({"k": b, "matmul<float, 16>": b}, patterns=[(r"matmul<\w+, \d+>", b)])
    assert t.lookup("k") is b and t.lookup("matmul<double, 32>") is b
    assert t.lookup("matmul<double, 32>x") is None and t.lookup("nope") is None


def test_strided_view_and_host_read_back():
    base = FakeDeviceArray((30,), "float32", 0x1000)
    v = StridedView(base, (10,), (3,), offset=1)
    cai = v.__cuda_array_interface__
    assert cai["data"][0] == 0x1004 and cai["strides"] == (12,) and cai["shape"] == (10,)
    mem = Memory(host=True)
    data = np.arange(30, dtype=np.float32)
    assert np.array_equal(mem.to_host(mem.strided(mem.array(data), (10,), (3,), 1)), data[1::3])


def test_compare():
    f = np.array([1.0, 2.0], np.float32)
    assert compare(f, f + 1e-7, 1e-6, 0) == (True, "max abs err 1.19e-07")
    assert compare(f, f.astype(np.float64), 1, 1) == (False, "got float32(2,), want float64(2,)")
    i = np.array([1, 2, 3], np.uint32)
    assert compare(i, i[::-1].copy(), 0, 0) == (False, "2 elements differ")


def test_a_probe_without_a_reference_fails(bundle):
    results = run_on_host(bundle, HostSaxpyBackend(), ReferenceTable({}, probe="saxpy"), ("auto",))
    assert results.records[-1]["status"] == "failed"
    assert results.records[-1]["error"] == "no reference for the probe kernel 'saxpy'"
