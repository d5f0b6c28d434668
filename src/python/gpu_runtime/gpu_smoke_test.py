"""The GPU smoke script's plumbing, on the CPU (--dry-run): cases build, dispatch and pack."""

from __future__ import annotations

import json

from gpu_runtime import gpu_smoke
from gpu_runtime.conftest import FakeDeviceArray
from gpu_spec.manifest import ArgSpec, KernelSpec


def test_dry_run_over_a_bundle(bundle, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert gpu_smoke.main(["--cache", bundle, "--dry-run", "-q", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["failed"] == 0
    whats = [r["what"] for r in res["records"]]
    # every kernel signature of the bundle in both modes (the fake bundle has no blur)
    assert sum(w.startswith("[auto] cubin sm_90") for w in whats) == 7
    assert sum(w.startswith("[ptx] ptx sm_90") for w in whats) == 7
    assert "0 failed" in capsys.readouterr().out


def test_dry_run_on_an_older_device_uses_lower_cubin(bundle, tmp_path):
    out = tmp_path / "r.json"
    assert gpu_smoke.main(["--cache", bundle, "--dry-run", "--dry-run-device", "8.6,12.9", "-q",
                           "--modes", "auto", "--json", str(out)]) == 1  # CUDA 13 code, 12.9 driver
    res = json.loads(out.read_text())
    assert any("variant selection" in r["what"] for r in res["records"] if r["status"] == "failed")


def test_every_reference_builds_the_intended_signature():
    mem = gpu_smoke.Memory(dry_run=True)
    import numpy as np

    for layout in ("C", "A"):
        spec = KernelSpec(name="histogram_256", entry="e", abi="numba",
                          args=(ArgSpec("array", "uint8", 1, layout), ArgSpec("array", "uint32", 1, "C")))
        case = gpu_smoke.ref_histogram_256(spec, mem, np.random.default_rng(0))
        view = case.args[0].__cuda_array_interface__
        assert (view["strides"] is None) == (layout == "C")
        # the host read-back of a strided view is what the kernel would see
        host = mem.to_host(case.args[0])
        assert np.array_equal(np.bincount(host, minlength=256), case.expected[1])
    assert gpu_smoke.reference_for("matmul<double, 32>") is gpu_smoke.ref_matmul
    assert gpu_smoke.reference_for("nope") is None


def test_references_agree_with_independent_formulas():
    import numpy as np

    rng = np.random.default_rng(1)
    img = rng.random((5, 7), dtype=np.float32)
    blur = gpu_smoke._box_blur_ref(img)
    # interior pixel: plain 3x3 mean
    assert np.isclose(blur[2, 3], img[1:4, 2:5].mean(), rtol=1e-6)
    # corner: clamp-to-edge replicates the border
    p = np.pad(img, 1, mode="edge")
    assert np.isclose(blur[0, 0], p[0:3, 0:3].mean(), rtol=1e-6)
    sob = gpu_smoke._sobel_ref(img)
    gx = (img[1, 4] + 2 * img[2, 4] + img[3, 4]) - (img[1, 2] + 2 * img[2, 2] + img[3, 2])
    gy = (img[3, 2] + 2 * img[3, 3] + img[3, 4]) - (img[1, 2] + 2 * img[1, 3] + img[1, 4])
    assert np.isclose(sob[2, 3], np.hypot(gx, gy), rtol=1e-5)


def test_strided_view_interface():
    base = FakeDeviceArray((30,), "float32", 0x1000)
    v = gpu_smoke.StridedView(base, (10,), (3,), offset=1)
    cai = v.__cuda_array_interface__
    assert cai["data"][0] == 0x1004 and cai["strides"] == (12,) and cai["shape"] == (10,)
