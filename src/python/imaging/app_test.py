"""The example app on the CPU: `--self-test --dry-run` runs the example's references through
gpu_runtime's runner."""

from __future__ import annotations

import pytest

from gpu_runtime.conftest import library_specs, write_bundle
from gpu_spec.conftest import arr, numba_array_params
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


@pytest.fixture
def example_bundle(tmp_path):
    """A fake bundle of the example's libraries, blur included."""
    specs = library_specs(
        ["saxpy", "blur", "histogram", "matmul", "sobel"],
        extra={"blur": ("src/python/imaging/kernels/blur.py", "numba", BLUR)},
    )
    return write_bundle(str(tmp_path / "dist" / "imaging_h200"), specs)


def run_app(capsys, *argv):
    rc = app.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_self_test_dry_run(example_bundle, capsys):
    rc, out, _ = run_app(capsys, "--self-test", "--dry-run", "--cache", example_bundle, "-q")
    assert rc == 0
    lines = out.splitlines()
    # 8 signatures in 2 modes, all dry; the sha256 check; the probe is not run dry
    assert lines[-1] == "1 passed, 0 failed, 17 skipped"
    assert sum("reason=dry run (no launch)" in line for line in lines) == 16
    assert any(line.startswith("SKIP [ptx] ptx sm_90 blur.box_blur_3x3(") for line in lines)
