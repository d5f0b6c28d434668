"""`pants package` of a `gpu_toolchain`, run with mocks (as Pants' docker_binary_test does): the
PEX it writes is the compiles' own toolchain PEX made a file, and it always passes the strip
step, which is what drops bytecode an earlier run left under PEX_ROOT."""

from __future__ import annotations

from typing import List

import pytest
from pants.backend.python.subsystems.setup import PythonSetup
from pants.backend.python.util_rules.pex import Pex, PexRequest
from pants.core.goals.package import BuiltPackage
from pants.engine.addresses import Address
from pants.engine.fs import EMPTY_DIGEST, Digest
from pants.engine.target import Target
from pants.testutil.option_util import create_subsystem
from pants.testutil.rule_runner import MockGet, run_rule_with_mocks
from pants.util.frozendict import FrozenDict

from gpu_build.goals.package_toolchain import GpuToolchainPackageFieldSet, package_gpu_toolchain
from gpu_build.subsystems.toolchains import GpuToolchains
from gpu_build.target_types import GpuToolchainTarget
from gpu_build.util_rules.bundle_pex import StrippedPex, StripPexRequest
from gpu_build.util_rules.toolchain import (
    CompilerSources,
    ToolchainSpec,
    UnknownToolchainError,
    toolchain_pex_request,
)

TOOLCHAINS = {"cuda13": {"resolve": "cuda13", "cuda": "13.0"}}
STRIPPED = Digest("5" * 64, 10)


def _package(target: Target):
    toolchains = create_subsystem(
        GpuToolchains, toolchains=TOOLCHAINS, default_toolchain="cuda13", compiler=None
    )
    python_setup = create_subsystem(
        PythonSetup,
        resolves={"cuda13": "3rdparty/python/cuda13.lock"},
        resolves_to_interpreter_constraints={"cuda13": ["CPython>=3.11,<3.13"]},
        interpreter_constraints=["CPython>=3.10,<3.13"],
    )
    pexes: List[PexRequest] = []
    strips: List[StripPexRequest] = []

    def build(request: PexRequest) -> Pex:
        pexes.append(request)
        return Pex(Digest("4" * 64, 10), request.output_filename, None)

    def strip(request: StripPexRequest) -> StrippedPex:
        strips.append(request)
        return StrippedPex(STRIPPED, FrozenDict({"": "ab" * 32}))

    built = run_rule_with_mocks(
        package_gpu_toolchain,
        rule_args=[
            GpuToolchainPackageFieldSet.create(target),
            toolchains,
            python_setup,
            CompilerSources(EMPTY_DIGEST),
        ],
        mock_gets=[
            MockGet(output_type=Pex, input_types=(PexRequest,), mock=build),
            MockGet(output_type=StrippedPex, input_types=(StripPexRequest,), mock=strip),
        ],
    )
    return built, pexes, strips, python_setup


def test_the_packaged_toolchain_is_the_compiles_pex_as_a_venv_file_and_normalised() -> None:
    target = GpuToolchainTarget({"toolchain": "cuda13"}, Address("src/tc", target_name="tc13"))
    built, (pex,), (strip,), python_setup = _package(target)
    assert isinstance(built, BuiltPackage) and built.digest == STRIPPED
    assert [a.relpath for a in built.artifacts] == ["src.tc/tc13.pex"]
    internal = toolchain_pex_request(
        ToolchainSpec("cuda13", "cuda13", "13.0"),
        python_setup,
        CompilerSources(EMPTY_DIGEST),
        output_filename="src.tc/tc13.pex",
        internal_only=True,
    )
    # The same request but for being a file that boots its own venv.
    assert pex.additional_args == ("--venv", "prepend", *internal.additional_args)
    assert (pex.requirements, pex.sources, pex.main, pex.interpreter_constraints) == (
        internal.requirements,
        internal.sources,
        internal.main,
        internal.interpreter_constraints,
    )
    assert not pex.internal_only and internal.internal_only
    # Nothing stripped, install jobs as pex wrote them; the step itself always runs.
    assert strip == StripPexRequest(Digest("4" * 64, 10), "src.tc/tc13.pex", "src/tc:tc13")


def test_an_unknown_toolchain_is_refused_naming_the_target() -> None:
    target = GpuToolchainTarget({"toolchain": "cuda99"}, Address("src/tc", target_name="tc"))
    with pytest.raises(
        UnknownToolchainError,
        match=r"The gpu_toolchain src/tc:tc asks for the GPU toolchain 'cuda99'",
    ):
        _package(target)
