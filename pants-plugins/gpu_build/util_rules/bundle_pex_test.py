"""The app PEX's stripping process, built purely and asserted without the engine (as Pants' own
docker_binary_test does); scripts/strip_pex_test.py tests what it runs."""

from __future__ import annotations

from pathlib import PurePath

from pants.backend.python.util_rules.pex import Script, VenvPex
from pants.engine.fs import Digest
from pants.util.frozendict import FrozenDict

from gpu_build.subsystems.bundle import DEFAULT_STRIP
from gpu_build.util_rules.bundle_pex import OUT_DIR, strip_process


def test_strip_process_reads_the_pex_and_writes_it_under_its_own_directory() -> None:
    tool = VenvPex(
        digest=Digest("1" * 64, 100),
        append_only_caches=None,
        pex_filename="gpu_bundle_strip_pex.pex",
        pex=Script(PurePath("gpu_bundle_strip_pex.pex_pex_shim.sh")),
        python=Script(PurePath("gpu_bundle_strip_pex.pex_python_shim.sh")),
        bin=FrozenDict(),
        venv_rel_dir="venvs/abc",
    )
    pex = Digest("2" * 64, 300)
    process = strip_process(
        tool, pex, "imaging_h200/app.pex", DEFAULT_STRIP, -1, "src/python/imaging:imaging_h200"
    )
    assert process.venv_pex is tool and process.input_digest is pex
    assert process.argv == (
        "imaging_h200/app.pex",
        "__stripped/imaging_h200/app.pex",
        "--max-install-jobs",
        "-1",
        "*.pyx",
        "*.pxd",
        "*.pxi",
        "*.c",
        "*.cpp",
    )
    assert process.output_directories == (OUT_DIR,) and process.output_files is None
    assert process.description == (
        "Leave build-only files out of the wheels in imaging_h200/app.pex "
        "(src/python/imaging:imaging_h200)"
    )
