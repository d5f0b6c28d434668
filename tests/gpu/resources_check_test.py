"""tests/gpu/resources_check.py with no GPU: the script's own plumbing, end to end.

A real compile of gpu_compiler's testdata/constant_tile.cu for sm_90 is laid out both ways the
script reads (a compile's output directory, and a bundle's cache/ with its manifest), and the
script runs against a stand-in for `cuda.bindings.driver` that answers as a GPU whose figures the
test chooses. What only a GPU can say (that the real driver agrees) stays with the GPU run; this
proves the script reaches every kernel of both layouts, compares what it says it compares, and
fails, naming the kernel and figure, where one differs (a script whose paths were wrong would
have failed on its first GPU run, not here).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator

import pytest

try:
    import numba.cuda  # noqa: F401

    _SKIP_REASON = None
except Exception as e:  # pragma: no cover - depends on the environment
    _SKIP_REASON = f"numba-cuda / CUDA Python wheels not importable: {e}"

pytestmark = pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or "")

REPO = Path(__file__).resolve().parents[2]
SOURCE = "src/python/gpu_compiler/testdata/constant_tile.cu"


class StandInDriver:
    """The driver calls resources_check makes, answered from `answers` ({entry: figures}) for
    an sm_90 device; the active blocks are `occupancy` (gpu_spec's arithmetic) unless given."""

    def __init__(self, answers: Dict[str, Dict[str, Any]]) -> None:
        from cuda.bindings import driver as real

        self.CUresult = real.CUresult
        self.CUfunction_attribute = real.CUfunction_attribute
        self.CUdevice_attribute = real.CUdevice_attribute
        self.answers = answers
        self.loaded: list = []
        ok = real.CUresult.CUDA_SUCCESS
        attr = real.CUfunction_attribute
        self._names = {
            attr.CU_FUNC_ATTRIBUTE_NUM_REGS: "registers",
            attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: "local_bytes",
            attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: "shared_bytes",
            attr.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: "const_bytes",
            attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: "max_threads_per_block",
        }
        major = real.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        self.cuInit = lambda flags: (ok,)
        self.cuDeviceGet = lambda i: (ok, 0)
        self.cuDeviceGetAttribute = lambda a, dev: (ok, 9 if a == major else 0)
        self.cuDevicePrimaryCtxRetain = lambda dev: (ok, "ctx")
        self.cuCtxSetCurrent = lambda ctx: (ok,)
        self.cuModuleUnload = lambda module: (ok,)
        self.cuModuleLoadData = lambda data: (ok, self._load(data))
        self.cuModuleGetFunction = lambda module, name: (ok, name.decode())
        self.cuFuncGetAttribute = lambda a, entry: (ok, self.answers[entry][self._names[a]])
        self.cuOccupancyMaxActiveBlocksPerMultiprocessor = lambda entry, block, dyn: (
            ok,
            self.answers[entry]["active_blocks"][block],
        )

    def _load(self, data: bytes) -> bytes:
        self.loaded.append(data)
        return data


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> Iterator[SimpleNamespace]:
    """The compile's output directory and a bundle cache of it, and the compile's figures."""
    from gpu_compiler.compile import CompileOptions, compile_source, write_outputs
    from gpu_spec.manifest.build import build_manifest
    from gpu_spec.manifest.model import MANIFEST_NAME, dumps_manifest
    from gpu_spec.manifest.paths import variant_dir
    from gpu_spec.resources import occupancy

    tmp = tmp_path_factory.mktemp("resources_check")
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        result = compile_source(SOURCE, "sm_90", CompileOptions())
    finally:
        os.chdir(cwd)
    compiled = tmp / "compile" / "sm_90"
    write_outputs(result, str(compiled))
    # The bundle's cache/: the same files in the variant's directory, and the manifest.
    spec = {"name": "constant_tile", "target": "t:constant_tile",
            "outputs": [{"toolchain": "cuda13", "metadata": result.metadata()}]}  # fmt: skip
    cache = tmp / "bundle" / "cache"
    shutil.copytree(compiled, cache / variant_dir("constant_tile", "cuda13", "sm_90"))
    (cache / MANIFEST_NAME).write_text(dumps_manifest(build_manifest("probe", "13.0", [spec])))
    blocks = [64, 256]
    truth = {}
    for k in (k for m in result.modules for k in m.kernels):
        r = k.resources
        truth[k.entry] = dict(
            r,
            max_threads_per_block=occupancy.max_threads_per_block(
                "sm_90", registers=r["registers"]
            ),
            active_blocks={
                b: occupancy.occupancy(
                    "sm_90", registers=r["registers"], shared_bytes=r["shared_bytes"], block_size=b
                ).active_blocks
                for b in blocks
            },
        )
    yield SimpleNamespace(compiled=compiled, cache=cache, truth=truth, blocks=blocks)
    shutil.rmtree(tmp, ignore_errors=True)


def _run(monkeypatch, capsys, layouts, answers, tmp_path) -> tuple:
    import resources_check

    driver = StandInDriver(answers)
    monkeypatch.setattr(resources_check, "cu", driver)
    out_json = tmp_path / "rows.json"
    blocks = ",".join(map(str, layouts.blocks))
    argv = ["resources_check.py", str(layouts.compiled), str(layouts.cache),
            "--block-sizes", blocks, "--json", str(out_json)]  # fmt: skip
    monkeypatch.setattr("sys.argv", argv)
    rc = resources_check.main()
    return rc, capsys.readouterr().out, driver


def test_every_kernel_of_both_layouts_is_loaded_and_equal(monkeypatch, capsys, layouts, tmp_path):
    rc, out, driver = _run(monkeypatch, capsys, layouts, layouts.truth, tmp_path)
    assert rc == 0, out
    # tile and nothing, once from the compile and once from the bundle: the real cubin each time
    assert "4 kernels on sm_90: 4 equal" in out
    assert len(driver.loaded) == 2 and driver.loaded[0] == driver.loaded[1]
    assert driver.loaded[0][:4] == b"\x7fELF"


def test_a_figure_the_driver_disagrees_with_fails_naming_kernel_and_figure(
    monkeypatch, capsys, layouts, tmp_path
):
    answers = {e: dict(f) for e, f in layouts.truth.items()}
    answers["tile"]["registers"] += 1
    answers["nothing"]["local_bytes"] = 16
    rc, out, _ = _run(monkeypatch, capsys, layouts, answers, tmp_path)
    assert rc == 1
    tile = [line for line in out.splitlines() if line.startswith("constant_tile.cu.tile")]
    assert tile and "'registers': (14, 15)" in tile[0], out
    nothing = [line for line in out.splitlines() if ".nothing" in line]
    assert all("'local_bytes': (0, 16)" in line for line in nothing) and len(nothing) == 2
    # where local differs, the cubin's own frame and stack are shown beside it
    assert all("'cubin frame, stack': (0, 0)" in line for line in nothing), out
    assert "4 kernels on sm_90: 0 equal" in out and out.rstrip().endswith("4 differ")
