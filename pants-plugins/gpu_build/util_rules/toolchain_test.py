"""The toolchain PEX is the whole locked resolve, CUDA's header wheels included: what makes a
header wheel's version part of every compile's key.

A compile process runs in the toolchain PEX, whose digest is one of its inputs; the PEX is built
from the entire lockfile of the toolchain's resolve. So the header wheels (`nvidia-cuda-runtime`,
`nvidia-cuda-crt`, `nvidia-cuda-cccl`) must be pinned in each toolchain's lockfile at its CUDA
version, and the PEX request must take the entire lockfile: a new header version is a new
lockfile, a new PEX, new compile keys (gpu_compiler's own test shows JIT mode's key moving too).
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePath
from typing import Dict, List

import pytest
import toml  # pants: no-infer-dep (installed with pantsbuild.pants)
from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.util_rules.pex import PexRequest, Script, VenvPex
from pants.backend.python.util_rules.pex_requirements import PexRequirements, Resolve
from pants.engine.fs import EMPTY_DIGEST
from pants.testutil.option_util import create_subsystem
from pants.testutil.rule_runner import MockGet, run_rule_with_mocks
from pants.util.frozendict import FrozenDict

from gpu_build.util_rules.toolchain import (
    CompilerSources,
    ToolchainPexRequest,
    ToolchainSpec,
    UnknownToolchainError,
    build_toolchain_pex,
)

# Per CUDA major: the header wheels a toolchain's lockfile must pin at its CUDA version.
HEADER_WHEELS = {
    "13": ["nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-cuda-cccl"],
    "12": ["nvidia-cuda-runtime-cu12", "nvidia-cuda-nvcc-cu12", "nvidia-cuda-cccl-cu12"],
}


def _repo_root() -> Path:
    for candidate in (Path.cwd(), Path(os.environ.get("GPU_BUILD_REPO_ROOT", "."))):
        if (candidate / "pants.toml").is_file() and (candidate / "3rdparty").is_dir():
            return candidate
    pytest.skip("pants.toml and 3rdparty/ are not in the sandbox nor at $GPU_BUILD_REPO_ROOT")


def _locked_versions(lockfile: Path) -> Dict[str, str]:
    text = lockfile.read_text()
    body = json.loads(text[text.index("{", text.index("--- END PANTS LOCKFILE METADATA")) :])
    (resolve,) = body["locked_resolves"]
    return {r["project_name"]: r["version"] for r in resolve["locked_requirements"]}


def _toolchains(root: Path) -> List[dict]:
    config = toml.loads((root / "pants.toml").read_text())
    entries = eval(config["gpu-toolchains"]["toolchains"], {})  # the option's literal dict
    resolves = config["python"]["resolves"]
    return [dict(name=n, lockfile=resolves[e["resolve"]], **e) for n, e in entries.items()]


def test_each_toolchain_lockfile_pins_cudas_headers_at_its_cuda_version():
    root = _repo_root()
    toolchains = _toolchains(root)
    assert {t["name"] for t in toolchains} >= {"cuda13", "cuda12"}
    for toolchain in toolchains:
        versions = _locked_versions(root / toolchain["lockfile"])
        cuda = str(toolchain["cuda"])
        for wheel in HEADER_WHEELS[cuda.split(".")[0]]:
            assert wheel in versions, (toolchain["name"], wheel, sorted(versions))
            assert versions[wheel].startswith(cuda + "."), (toolchain["name"], wheel, versions)


def test_the_toolchain_pex_is_built_from_the_entire_lockfile():
    spec = ToolchainSpec(name="cuda13", resolve="cuda13", cuda="13.0")
    python_setup = create_subsystem(
        PythonSetup,
        resolves={"cuda13": "3rdparty/python/cuda13.lock"},
        resolves_to_interpreter_constraints={"cuda13": ["CPython>=3.11,<3.13"]},
        interpreter_constraints=["CPython>=3.10,<3.13"],
    )
    asked: List[PexRequest] = []

    def build(request: PexRequest) -> VenvPex:
        asked.append(request)
        return VenvPex(
            digest=EMPTY_DIGEST,
            append_only_caches=None,
            pex_filename="gpu_toolchain_cuda13.pex",
            pex=Script(PurePath("gpu_toolchain_cuda13.pex_pex_shim.sh")),
            python=Script(PurePath("gpu_toolchain_cuda13.pex_python_shim.sh")),
            bin=FrozenDict(),
            venv_rel_dir="venvs/abc",
        )

    run_rule_with_mocks(
        build_toolchain_pex,
        rule_args=[ToolchainPexRequest(spec), python_setup, CompilerSources(EMPTY_DIGEST)],
        mock_gets=[MockGet(output_type=VenvPex, input_types=(PexRequest,), mock=build)],
    )
    (request,) = asked
    requirements = request.requirements
    assert isinstance(requirements, PexRequirements), requirements
    assert requirements.from_superset == Resolve("cuda13", use_entire_lockfile=True)


def test_a_toolchain_newer_than_the_ptx_isa_table_is_refused_by_name():
    # CUDA 13.2 has no documented row in gpu_spec.ptx_isa: refused, not mapped to a guessed ISA.
    spec = ToolchainSpec(name="cuda13_2", resolve="cuda13", cuda="13.2")
    with pytest.raises(UnknownToolchainError) as e:
        assert spec.ptx_isa is None  # raises
    assert str(e.value).startswith(
        "GPU toolchain 'cuda13_2' of `[gpu-toolchains].toolchains`: the toolchain's CUDA 13.2 is "
        "not in gpu_spec's PTX ISA table (it knows CUDA 11.0 to 13.1)"
    )
