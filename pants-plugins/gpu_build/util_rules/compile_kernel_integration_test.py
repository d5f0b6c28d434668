"""The real compile rule with the real toolchain: a RuleRunner builds the cuda13 toolchain PEX from
the repo's lockfile and runs `python -m gpu_compiler compile` in it.

What the test needs (see its `dependencies` and `extra_env_vars` in pants-plugins/BUILD):
- the `gpu_compiler` and `gpu_spec` modules in the test sandbox (`files` dependencies): the test
  writes them into the RuleRunner's build root as `python_sources` targets, and the plugin builds
  the toolchain PEX from the target `[gpu-toolchains].compiler` names, as in a real repo;
- `3rdparty/python/cuda13.lock`, `pants.toml` and the example saxpy.py, from the sandbox
  (`files` dependencies) or else from the checkout at `$GPU_BUILD_REPO_ROOT`;
- the pex CLI that `./pants` builds locally (`PANTS_PEX_CLI_*`): Pants' default downloads it
  from GitHub, which is out of reach here;
- HOME, PATH and PYENV_ROOT to find the interpreters and share Pants' caches.

The toolchain PEX is one process like any other: with a warm `~/.cache/pants` it is a cache hit.
The test is skipped (saying why) only when the toolchain cannot be built for lack of network.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from textwrap import dedent
from typing import Iterator, Mapping

import pytest
import toml  # pants: no-infer-dep (installed with pantsbuild.pants)
from pants.backend.python import target_types_rules
from pants.backend.python.target_types import PythonSourcesGeneratorTarget, PythonSourceTarget
from pants.backend.python.util_rules import python_sources
from pants.core.goals.package import BuiltPackage
from pants.core.target_types import FilesGeneratorTarget, FileTarget
from pants.core.util_rules import distdir, source_files, system_binaries
from pants.engine.addresses import Address
from pants.engine.fs import Digest, DigestContents
from pants.engine.internals.scheduler import ExecutionError
from pants.testutil.rule_runner import PYTHON_BOOTSTRAP_ENV, QueryRule, RuleRunner

from gpu_build import register
from gpu_build.goals import gpu_resources
from gpu_build.goals.gpu_resources import GpuResources
from gpu_build.goals.package_kernel import GpuKernelPackageFieldSet
from gpu_build.target_types import GpuKernelTarget
from gpu_build.util_rules.compile_kernel import (
    CompiledKernels,
    CompileKernelRequest,
    GpuKernelBudgetError,
    GpuKernelCompileError,
)
from gpu_build.util_rules.kernel_field_set import GpuKernelFieldSet
from gpu_build.util_rules.toolchain import ToolchainPex, ToolchainPexRequest, ToolchainSpec

LOCKFILE = "3rdparty/python/cuda13.lock"
PANTS_TOML = "pants.toml"
SAXPY = "src/python/imaging/kernels/saxpy.py"
# Set by `./pants`: the locally built, pinned pex CLI, and the CA bundle pip needs.
PEX_CLI_ENV = (
    "PANTS_PEX_CLI_VERSION",
    "PANTS_PEX_CLI_URL_TEMPLATE",
    "PANTS_PEX_CLI_KNOWN_VERSIONS",
    "PANTS_CA_CERTS_PATH",
)
NO_NETWORK_SIGNS = (
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Failed to establish a new connection",
    "Name or service not known",
    "Max retries exceeded",
    "No matching distribution found",
    "Could not find a version that satisfies",
)
KERN = "src/python/kern"
COMPILER = "src/python/gpu_compiler"
SPEC = "src/spec/gpu_spec"
# The first-party code of the toolchain PEX, as targets of the RuleRunner's build root.
CODE_TARGET = 'resolve="cuda13", interpreter_constraints=["CPython>=3.11,<3.13"]'
CODE_SOURCES = 'sources=["**/*.py"]'  # the package and its subpackages, one target each
CODE_BUILD_FILES = {
    f"{COMPILER}/BUILD": (
        f'python_sources(name="compiler", {CODE_SOURCES}, {CODE_TARGET}, dependencies=["{SPEC}"])'
    ),
    f"{SPEC}/BUILD": f"python_sources({CODE_SOURCES}, {CODE_TARGET})",
}


def repo_file(path: str) -> bytes:
    """A repo file from the test sandbox (a `files` dependency), else from $GPU_BUILD_REPO_ROOT."""
    candidates = [Path(path)]
    if os.environ.get("GPU_BUILD_REPO_ROOT"):
        candidates.append(Path(os.environ["GPU_BUILD_REPO_ROOT"], path))
    for candidate in candidates:
        if candidate.is_file():
            return candidate.read_bytes()
    pytest.fail(
        f"{path} is neither in the test sandbox nor under $GPU_BUILD_REPO_ROOT "
        f"({os.environ.get('GPU_BUILD_REPO_ROOT')!r}): add a `files` dependency on it to "
        f"pants-plugins/BUILD, or `GPU_BUILD_REPO_ROOT=%(buildroot)s` to `[test].extra_env_vars` "
        f"in pants.toml."
    )


def repo_options() -> list[str]:
    """The repo's own pants.toml settings that the toolchain depends on, as flags."""
    config = toml.loads(repo_file(PANTS_TOML).decode())
    python = config["python"]
    toolchains = config["gpu-toolchains"]
    return [
        "--python-enable-resolves",
        f"--python-resolves={ {'cuda13': LOCKFILE}!r}",
        "--python-resolves-to-interpreter-constraints="
        + repr({"cuda13": python["resolves_to_interpreter_constraints"]["cuda13"]}),
        f"--python-pip-version={python['pip_version']}",
        f"--python-bootstrap-search-path={config['python-bootstrap']['search_path']!r}",
        f"--subprocess-environment-env-vars={config['subprocess-environment']['env_vars']!r}",
        f"--gpu-toolchains-toolchains={toolchains['toolchains']}",
        f"--gpu-toolchains-default-toolchain={toolchains['default_toolchain']}",
        "--source-root-patterns=['/src/python', '/src/spec']",
        f"--gpu-toolchains-compiler={COMPILER}:compiler",
    ]


def pex_cli_env() -> Mapping[str, str]:
    missing = [name for name in PEX_CLI_ENV if not os.environ.get(name)]
    if missing:
        pytest.fail(
            f"{missing} are not set: run through `./pants` (which sets them) with them listed in "
            f"this test's `extra_env_vars` (pants-plugins/BUILD); without them Pants downloads "
            f"the pex CLI from GitHub."
        )
    return {name: os.environ[name] for name in PEX_CLI_ENV}


def first_party_code() -> dict[str, bytes]:
    """The compiler's and gpu_spec's modules from the test sandbox (tests left out)."""
    code = {
        str(path): path.read_bytes()
        for root in (COMPILER, SPEC)
        for path in sorted(Path(root).rglob("*.py"))
        if not path.name.endswith("_test.py") and path.name != "conftest.py"
    }
    needed = {f"{COMPILER}/__main__.py", f"{COMPILER}/cli.py", f"{SPEC}/capabilities.py"}
    if not needed <= set(code):
        pytest.fail(
            f"The test sandbox lacks {sorted(needed - set(code))}: the toolchain PEX would not "
            f"run. Give this test `files` dependencies on the compiler's and gpu_spec's modules "
            f"in pants-plugins/BUILD."
        )
    return code


# Kernels that fail: a numba typing error on line 10, a CUDA C++ syntax error on line 5.
BROKEN_PY = dedent(
    '''\
    """A numba kernel that does not type-check: float32 + str on line 10."""

    from numba import cuda


    @cuda.jit
    def broken(out, x):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] + "oops"


    AOT_SIGNATURES = {"broken": ["void(float32[::1], float32[::1])"]}
    '''
)
BROKEN_CU = dedent(
    """\
    // A CUDA C++ syntax error on line 5.
    extern "C" __global__ void oops(float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) {
            out[i] = 1.0f +;
        }
    }
    """
)
# `__reduce_add_sync` needs sm_80: this compiles for sm_90 but not for sm_75 (line 4).
NEEDS_SM80_CU = dedent(
    """\
    // __reduce_add_sync exists from sm_80 on.
    extern "C" __global__ void warp_sum(unsigned* out, const unsigned* in) {
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        unsigned s = __reduce_add_sync(0xffffffffu, in[i]);
        if (threadIdx.x == 0) {
            out[blockIdx.x] = s;
        }
    }
    """
)
# A kernel that uses every resource a budget limits: 8 KiB of static shared memory, a local
# array indexed at run time (local memory), and 24 live accumulators (registers; with
# max_registers=16, spills).
HUNGRY_CU = dedent(
    """\
    extern "C" __global__ void hungry(float* out, const float* in, int n, int k) {
        __shared__ float tile[2048];
        float scratch[64];
        float acc[24];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        for (int j = 0; j < 64; ++j) scratch[j] = in[(i + j) % n];
        #pragma unroll
        for (int j = 0; j < 24; ++j) acc[j] = in[(i * 24 + j) % n];
        for (int r = 0; r < k; ++r) {
            #pragma unroll
            for (int j = 0; j < 24; ++j)
                acc[j] = acc[j] * acc[(j + 1) % 24] + scratch[(r + j) & 63];
        }
        float s = 0.0f;
        #pragma unroll
        for (int j = 0; j < 24; ++j) s += acc[j];
        tile[threadIdx.x % 2048] = s + scratch[k & 63];
        __syncthreads();
        if (i < n) out[i] = tile[(threadIdx.x + 1) % blockDim.x];
    }
    """
)
HUNGRY = 'source="hungry.cu", capabilities=["sm_90"]'
KERN_BUILD = dedent(
    f"""\
    gpu_kernel(name="hungry", {HUNGRY})
    gpu_kernel(name="hungry_registers", {HUNGRY}, budget_registers=8)
    gpu_kernel(name="hungry_spills", {HUNGRY}, max_registers=16, budget_spill_bytes=0)
    gpu_kernel(name="hungry_shared", {HUNGRY}, budget_shared_bytes=4096)
    gpu_kernel(name="hungry_local", {HUNGRY}, budget_local_bytes=0)
    gpu_kernel(
        name="hungry_occupancy", {HUNGRY}, budget_min_occupancy=1.0, budget_block_size=1024
    )
    gpu_kernel(
        name="hungry_roomy",
        {HUNGRY},
        budget_registers=255,
        budget_shared_bytes=49152,
        budget_local_bytes=4096,
        budget_min_occupancy=0.01,
    )
    gpu_kernel(name="saxpy", source="saxpy.py", capabilities=["sm_90"])
    gpu_kernel(name="saxpy_two", source="saxpy.py", capabilities=["sm_87", "sm_90"])
    gpu_kernel(name="needs_sm80", source="needs_sm80.cu", capabilities=["sm_75", "sm_90"])
    gpu_kernel(name="broken_numba", source="broken.py", capabilities=["sm_90"])
    gpu_kernel(name="broken_cu", source="broken.cu", capabilities=["sm_90"])
    gpu_kernel(
        name="future_ptx",
        source="saxpy.py",
        capabilities=["sm_90"],
        ptx_version="9.9",
    )
    """
)


def build_root_files() -> dict[str, str | bytes]:
    """The RuleRunner's build root: the toolchain's code and lockfile, and the test kernels."""
    return {
        **first_party_code(),
        **CODE_BUILD_FILES,
        LOCKFILE: repo_file(LOCKFILE),
        f"{KERN}/saxpy.py": repo_file(SAXPY),
        f"{KERN}/broken.py": BROKEN_PY,
        f"{KERN}/broken.cu": BROKEN_CU,
        f"{KERN}/needs_sm80.cu": NEEDS_SM80_CU,
        f"{KERN}/hungry.cu": HUNGRY_CU,
        f"{KERN}/BUILD": KERN_BUILD,
    }


@pytest.fixture(scope="module")
def rule_runner() -> Iterator[RuleRunner]:
    runner = RuleRunner(
        rules=[
            *register.kernel_rules(),
            *gpu_resources.rules(),
            *system_binaries.rules(),
            *distdir.rules(),
            *source_files.rules(),
            *python_sources.rules(),
            *target_types_rules.rules(),
            QueryRule(ToolchainPex, [ToolchainPexRequest]),
            QueryRule(CompiledKernels, [CompileKernelRequest]),
            QueryRule(BuiltPackage, [GpuKernelPackageFieldSet]),
            QueryRule(DigestContents, [Digest]),
        ],
        target_types=[
            GpuKernelTarget,
            FileTarget,
            FilesGeneratorTarget,
            PythonSourceTarget,
            PythonSourcesGeneratorTarget,
        ],
    )
    runner.write_files(build_root_files())
    runner.set_options(repo_options(), env=pex_cli_env(), env_inherit=PYTHON_BOOTSTRAP_ENV)
    try:
        runner.request(
            ToolchainPex, [ToolchainPexRequest(ToolchainSpec("cuda13", "cuda13", "13.0"))]
        )
    except ExecutionError as e:
        if any(sign in str(e) for sign in NO_NETWORK_SIGNS):
            pytest.skip(f"The cuda13 toolchain PEX cannot be built here (no network?): {e}")
        raise
    yield runner


def field_set(rule_runner: RuleRunner, name: str) -> GpuKernelFieldSet:
    return GpuKernelFieldSet.create(rule_runner.get_target(Address(KERN, target_name=name)))


def compile_error(rule_runner: RuleRunner, name: str) -> str:
    with pytest.raises(ExecutionError) as excinfo:
        rule_runner.request(CompiledKernels, [CompileKernelRequest(field_set(rule_runner, name))])
    wrapped = list(excinfo.value.wrapped_exceptions)
    assert len(wrapped) == 1, wrapped
    assert isinstance(wrapped[0], GpuKernelCompileError), repr(wrapped[0])
    return str(wrapped[0])


def test_compile_saxpy_for_sm_90(rule_runner: RuleRunner) -> None:
    (compiled,) = rule_runner.request(
        CompiledKernels, [CompileKernelRequest(field_set(rule_runner, "saxpy"))]
    )
    assert compiled.address == Address(KERN, target_name="saxpy")
    assert (compiled.capability, compiled.toolchain) == ("sm_90", "cuda13")
    contents = {
        fc.path: fc.content for fc in rule_runner.request(DigestContents, [compiled.digest])
    }
    assert sorted(contents) == ["metadata.json", "saxpy__0.cubin", "saxpy__0.ptx"]

    ptx = contents["saxpy__0.ptx"].decode()
    assert "\n.version 9.0\n" in f"\n{ptx}"
    assert "\n.target sm_90\n" in f"\n{ptx}"
    assert ".entry" in ptx

    cubin = contents["saxpy__0.cubin"]
    assert cubin[:4] == b"\x7fELF"
    (e_flags,) = struct.unpack_from("<I", cubin, 48)
    assert (e_flags >> 8) & 0xFF == 90

    metadata = json.loads(contents["metadata.json"])
    assert metadata["capability"] == "sm_90"
    assert metadata["ptx_isa"] == "9.0"
    assert metadata["source"] == f"{KERN}/saxpy.py"
    assert metadata["modules"][0]["kernels"][0]["name"] == "saxpy"
    # No sandbox paths leak into the outputs.
    for content in contents.values():
        assert b"/pants-sandbox-" not in content and b"/tmp/" not in content


def test_package_saxpy(rule_runner: RuleRunner) -> None:
    tgt = rule_runner.get_target(Address(KERN, target_name="saxpy"))
    package = rule_runner.request(BuiltPackage, [GpuKernelPackageFieldSet.create(tgt)])
    assert [a.relpath for a in package.artifacts] == ["src.python.kern/saxpy"]
    files = sorted(fc.path for fc in rule_runner.request(DigestContents, [package.digest]))
    assert files == [
        "src.python.kern/saxpy/sm_90/metadata.json",
        "src.python.kern/saxpy/sm_90/saxpy__0.cubin",
        "src.python.kern/saxpy/sm_90/saxpy__0.ptx",
    ]


def digest_files(rule_runner: RuleRunner, digest: Digest) -> dict[str, bytes]:
    return {fc.path: fc.content for fc in rule_runner.request(DigestContents, [digest])}


def test_one_process_for_two_capabilities_and_a_subset_of_it(rule_runner: RuleRunner) -> None:
    both = rule_runner.request(
        CompiledKernels, [CompileKernelRequest(field_set(rule_runner, "saxpy_two"))]
    )
    assert [k.capability for k in both] == ["sm_87", "sm_90"]
    files = {k.capability: digest_files(rule_runner, k.digest) for k in both}
    for capability, contents in files.items():
        assert sorted(contents) == ["metadata.json", "saxpy__0.cubin", "saxpy__0.ptx"]
        assert json.loads(contents["metadata.json"])["capability"] == capability
        assert f"\n.target {capability}\n" in f"\n{contents['saxpy__0.ptx'].decode()}"
    # A bundle's subset: the same process's outputs, that capability only.
    (only,) = rule_runner.request(
        CompiledKernels,
        [CompileKernelRequest(field_set(rule_runner, "saxpy_two"), capabilities=("sm_90",))],
    )
    assert only.capability == "sm_90" and only.digest == both[1].digest
    # The second capability of the process has the bytes of a process of its own (the target
    # `saxpy`: the same source, sm_90 only).
    (alone,) = rule_runner.request(
        CompiledKernels, [CompileKernelRequest(field_set(rule_runner, "saxpy"))]
    )
    assert alone.digest == both[1].digest


def test_a_capability_the_target_lacks_is_refused(rule_runner: RuleRunner) -> None:
    with pytest.raises(ExecutionError) as excinfo:
        rule_runner.request(
            CompiledKernels,
            [CompileKernelRequest(field_set(rule_runner, "saxpy_two"), capabilities=("sm_75",))],
        )
    message = str(excinfo.value)
    assert f"The gpu_kernel {KERN}:saxpy_two is not compiled for sm_75" in message
    assert "sm_87, sm_90" in message


def test_the_failing_capability_is_named(rule_runner: RuleRunner) -> None:
    message = compile_error(rule_runner, "needs_sm80")
    assert message.startswith(
        f"Failed to compile {KERN}/needs_sm80.cu (target {KERN}:needs_sm80) for sm_75 "
        f"(of sm_75, sm_90) with the GPU toolchain 'cuda13':"
    ), message
    assert f"sm_75: {KERN}/needs_sm80.cu" in message
    assert f"{KERN}/needs_sm80.cu(4): error" in message
    assert "sm_90:" not in message


def test_numba_typing_error_names_target_file_and_line(rule_runner: RuleRunner) -> None:
    message = compile_error(rule_runner, "broken_numba")
    assert f"{KERN}:broken_numba" in message
    assert f"{KERN}/broken.py:10" in message
    assert "sm_90" in message
    # The compiler's own diagnosis, with no sandbox path.
    assert "pants-sandbox" not in message


def test_cuda_cpp_syntax_error_names_target_file_and_line(rule_runner: RuleRunner) -> None:
    message = compile_error(rule_runner, "broken_cu")
    assert f"{KERN}:broken_cu" in message
    assert f"{KERN}/broken.cu(5)" in message
    assert "error" in message
    assert "pants-sandbox" not in message


def test_impossible_ptx_version_refused_naming_the_target(rule_runner: RuleRunner) -> None:
    message = compile_error(rule_runner, "future_ptx")
    assert f"{KERN}:future_ptx" in message
    assert "9.9" in message
    assert "cuda13" in message


def budget_error(rule_runner: RuleRunner, name: str) -> str:
    with pytest.raises(ExecutionError) as excinfo:
        rule_runner.request(CompiledKernels, [CompileKernelRequest(field_set(rule_runner, name))])
    wrapped = list(excinfo.value.wrapped_exceptions)
    assert len(wrapped) == 1 and isinstance(wrapped[0], GpuKernelBudgetError), repr(wrapped)
    return str(wrapped[0])


@pytest.mark.parametrize(
    "name, figure",
    [
        ("hungry_registers", "registers"),
        ("hungry_spills", "spill_bytes"),
        ("hungry_shared", "shared_bytes"),
        ("hungry_local", "local_bytes"),
        ("hungry_occupancy", "occupancy"),
    ],
)
def test_a_kernel_over_each_budget_fails_naming_it(
    rule_runner: RuleRunner, name: str, figure: str
) -> None:
    message = budget_error(rule_runner, name)
    assert message.startswith(f"The gpu_kernel {KERN}:{name} is over its resource budget"), message
    (line,) = message.splitlines()[1:]  # one kernel, one capability, one figure over
    assert line.startswith(f"{KERN}/hungry.cu (target {KERN}:{name}): kernel hungry on sm_90: ")
    assert f": {figure} " in line and "budget" in line and "(fix: " in line, line


def test_a_kernel_within_its_budget_compiles(rule_runner: RuleRunner) -> None:
    (compiled,) = rule_runner.request(
        CompiledKernels, [CompileKernelRequest(field_set(rule_runner, "hungry_roomy"))]
    )
    assert compiled.capability == "sm_90"


def report(rule_runner: RuleRunner, *args: str) -> tuple[int, str, dict]:
    # A goal's run sets the options anew: the repo's, as the fixture set them, come first.
    result = rule_runner.run_goal_rule(
        GpuResources,
        global_args=repo_options(),
        args=[*args, f"{KERN}:hungry", f"{KERN}:saxpy"],
        env=pex_cli_env(),
        env_inherit=PYTHON_BOOTSTRAP_ENV,
    )
    data = json.loads(Path(rule_runner.build_root, "dist", "gpu-resources.json").read_text())
    return result.exit_code, result.stdout + result.stderr, data


def test_the_report_and_its_baseline_catch_more_registers(rule_runner: RuleRunner) -> None:
    code, out, data = report(rule_runner)
    assert code == 0, out
    rows = {r["kernel"]: r for r in data["kernels"]}
    assert sorted(rows) == ["hungry", "saxpy"]
    hungry = rows["hungry"]
    assert hungry["capability"] == "sm_90" and hungry["toolchain"] == "cuda13"
    assert hungry["shared_bytes"] >= 8192 and hungry["local_bytes"] > 0 and hungry["registers"] > 0
    assert 0 < hungry["occupancy"] <= 1 and hungry["over_budget"] == []
    assert f"{KERN}:hungry" in out and "sm_90" in out
    baseline = Path(rule_runner.build_root, "baseline.json")
    baseline.write_text(json.dumps(data))

    # The same kernel with 24 more live accumulators: more registers per thread.
    rule_runner.write_files({f"{KERN}/hungry.cu": HUNGRY_CU.replace("24", "48")})
    code, out, grown = report(rule_runner, f"--gpu-resources-baseline={baseline}")
    assert code == 0, out  # reported, not failed
    after = {r["kernel"]: r for r in grown["kernels"]}["hungry"]
    assert after["registers"] > hungry["registers"], (hungry, after)
    assert (
        f"grew: {KERN}:hungry hungry on sm_90 (cuda13): registers {hungry['registers']} -> " in out
    )
    assert f"{KERN}:saxpy" not in "".join(line for line in out.splitlines() if "grew" in line)
    code, out, _ = report(
        rule_runner, f"--gpu-resources-baseline={baseline}", "--gpu-resources-fail-on-growth"
    )
    assert code == 1, out
    rule_runner.write_files({f"{KERN}/hungry.cu": HUNGRY_CU})
