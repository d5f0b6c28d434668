"""Pure tests of the compile rule's helpers: the process, options from fields, ptx_version checks.

Like Pants' docker_binary_test, the whole process is built by a plain function and asserted
without the engine; targets are constructed directly (Pants' own field checks run then).
"""

from __future__ import annotations

from typing import Any

import pytest
from pants.backend.python.util_rules.pex import VenvPexProcess
from pants.engine.addresses import Address
from pants.engine.fs import Digest
from pants.engine.process import ProcessCacheScope
from pants.option.ranked_value import Rank, RankedValue
from pants.testutil.option_util import create_subsystem
from pants.util.logging import LogLevel

from gpu_build.subsystems.toolchains import GpuToolchains, InvalidDefaultCapabilitiesError
from gpu_build.target_types import GpuKernelTarget
from gpu_build.util_rules.compile_kernel import (
    GpuKernelCompileError,
    check_compile_outputs,
    check_ptx_version,
    compile_failure,
    process_batches,
    top_level_entries,
)
from gpu_build.util_rules.compile_process import (
    KILL_AFTER_TIMEOUT,
    OUT_DIR,
    compile_argv,
    compile_process,
)
from gpu_build.util_rules.kernel_field_set import (
    GpuKernelFieldSet,
    compile_options,
    kernel_capabilities,
)
from gpu_build.util_rules.toolchain import (
    ToolchainPex,
    ToolchainSpec,
    UnknownToolchainError,
    toolchain_spec,
)
from gpu_build_testutil.venv_pex import fake_venv_pex
from gpu_spec.compile.options import CompileOptions

CUDA13 = ToolchainSpec(name="cuda13", resolve="cuda13", cuda="13.0")
CUDA12 = ToolchainSpec(name="cuda12", resolve="cuda12", cuda="12.6")
KERNELS = "src/python/imaging/kernels"


def field_set(spec_path: str = KERNELS, name: str = "k", **fields: Any) -> GpuKernelFieldSet:
    fields.setdefault("source", "k.cu")
    tgt = GpuKernelTarget(fields, Address(spec_path, target_name=name))
    assert GpuKernelFieldSet.is_applicable(tgt)
    return GpuKernelFieldSet.create(tgt)


def toolchains(**options: Any) -> GpuToolchains:
    options.setdefault(
        "toolchains",
        {
            "cuda13": {"resolve": "cuda13", "cuda": "13.0"},
            "cuda12": {"resolve": "cuda12", "cuda": "12.6"},
        },
    )
    options.setdefault("default_toolchain", "cuda13")
    options.setdefault("default_capabilities", ["sm_90", "sm_75", "sm_87", "sm_80"])
    return create_subsystem(GpuToolchains, **options)


# -----------------------------------------------------------------------------------------------
# compile_process and compile_argv


def test_top_level_entries_are_each_input_once() -> None:
    files = ("src/python/k/a.py", "src/python/k/b.cu", "3rdparty/h.cuh", "README")
    assert top_level_entries(files) == ("3rdparty", "README", "src")


def test_compile_process() -> None:
    pex = fake_venv_pex("gpu_toolchain_cuda12.pex")
    sources = Digest("2" * 64, 200)
    process = compile_process(
        toolchain=ToolchainPex(CUDA12, pex),
        source=f"{KERNELS}/sobel.cu",
        capabilities=("sm_75", "sm_87"),
        options=CompileOptions(lineinfo=True, include_dirs=(KERNELS,), sys_path=("src/python",)),
        input_digest=sources,
        inputs=("src",),
        timeout=600,
    )
    description = f"Compile {KERNELS}/sobel.cu for sm_75, sm_87 (cuda12)"
    assert process == VenvPexProcess(
        pex,
        description=description,
        argv=(
            "compile",
            "--source",
            f"{KERNELS}/sobel.cu",
            "--capability",
            "sm_75",
            "--capability",
            "sm_87",
            "--out-dir",
            OUT_DIR,
            # the sandbox's top-level entries: all the compile sees besides its toolchain
            "--input",
            "src",
            "--timeout",
            "600",
            "--sys-path",
            "src/python",
            "--lineinfo",
            f"--include-dir={KERNELS}",
        ),
        level=LogLevel.INFO,
        input_digest=sources,
        working_directory=None,
        extra_env=None,
        output_files=None,
        output_directories=(OUT_DIR,),
        # the compiler's own stop names the kernel file; Pants' kill a minute later backs it up
        timeout_seconds=600 + KILL_AFTER_TIMEOUT,
        execution_slot_variable=None,
        concurrency_available=0,
        cache_scope=ProcessCacheScope.SUCCESSFUL,
        append_only_caches=None,
    )
    # VenvPexProcess leaves `description` out of equality, as Process does.
    assert process.description == description


def test_argv_minimal_numba() -> None:
    argv = compile_argv(
        source=f"{KERNELS}/saxpy.py",
        capabilities=("sm_90",),
        out_dir=OUT_DIR,
        options=CompileOptions(sys_path=("src/python",)),
    )
    assert argv == (
        "compile",
        "--source",
        f"{KERNELS}/saxpy.py",
        "--capability",
        "sm_90",
        "--out-dir",
        OUT_DIR,
        "--sys-path",
        "src/python",
    )


def test_argv_every_option() -> None:
    options = CompileOptions(
        fast_math=True,
        lineinfo=True,
        max_registers=64,
        ptx_version="8.5",
        defines=("TILE=16", "FAST"),
        include_dirs=(KERNELS, "src/include"),
        name_expressions=("matmul<float, 16>", "matmul<double, 16>"),
        sys_path=("src/python", "lib"),
    )
    argv = compile_argv(
        source=f"{KERNELS}/matmul.cu",
        capabilities=("sm_87",),
        out_dir="out",
        options=options,
    )
    assert argv == (
        "compile",
        "--source",
        f"{KERNELS}/matmul.cu",
        "--capability",
        "sm_87",
        "--out-dir",
        "out",
        "--sys-path",
        "src/python",
        "--sys-path",
        "lib",
        "--ptx-version",
        "8.5",
        "--fast-math",
        "--lineinfo",
        "--max-registers",
        "64",
        "--define=TILE=16",
        "--define=FAST",
        f"--include-dir={KERNELS}",
        "--include-dir=src/include",
        "--name-expression=matmul<float, 16>",
        "--name-expression=matmul<double, 16>",
    )


def test_argv_max_registers_zero_is_not_dropped() -> None:
    # `is not None`, not truthiness: a (rejected elsewhere) 0 must still reach the compiler.
    argv = compile_argv(
        source="k.cu",
        capabilities=("sm_90",),
        out_dir="o",
        options=CompileOptions(max_registers=0),
    )
    assert argv[-2:] == ("--max-registers", "0")


# -----------------------------------------------------------------------------------------------
# process_batches and compile failures

ALL = ("sm_75", "sm_80", "sm_87", "sm_90")


def test_batches_cover_the_whole_target_in_one_process() -> None:
    # A bundle's subset still gets the target's full list: the process `package` runs too.
    assert process_batches(("sm_87",), ALL, batch=True) == (ALL,)
    assert process_batches(ALL, ALL, batch=True) == (ALL,)
    assert process_batches((), ALL, batch=True) == ()


def test_unbatched_is_one_process_per_wanted_capability() -> None:
    assert process_batches(("sm_87",), ALL, batch=False) == (("sm_87",),)
    assert process_batches(("sm_90", "sm_75"), ALL, batch=False) == (("sm_90",), ("sm_75",))


def test_compile_failure_names_target_file_and_the_failing_capabilities() -> None:
    address = Address(KERNELS, target_name="saxpy")
    source = f"{KERNELS}/saxpy.py"
    stderr = b"sm_90: src/python/imaging/kernels/saxpy.py: error: too old for sm_90\n"
    message = str(compile_failure(address, source, ALL, CUDA13, stderr))
    assert message.startswith(
        f"Failed to compile {source} (target {KERNELS}:saxpy) for sm_90 (of sm_75, sm_80, "
        f"sm_87, sm_90) with the GPU toolchain 'cuda13':\n\nsm_90: "
    ), message
    every = str(compile_failure(address, source, ("sm_90",), CUDA13, stderr))
    assert every.startswith(f"Failed to compile {source} (target {KERNELS}:saxpy) for sm_90 with")


def test_compile_outputs_without_metadata_are_refused_in_one_line() -> None:
    address = Address(KERNELS, target_name="saxpy")
    source = f"{KERNELS}/saxpy.py"
    files = {"sm_87": ("saxpy.ptx", "saxpy.cubin", "metadata.json"), "sm_90": ("saxpy.ptx",)}
    with pytest.raises(GpuKernelCompileError) as e:
        check_compile_outputs(address, source, CUDA13, files, b"a log\n")
    message = str(e.value)
    assert message.startswith(
        f"The compile of {source} (target {KERNELS}:saxpy) with the GPU toolchain 'cuda13' "
        "wrote no metadata.json for sm_90 ("
    ), message
    assert "`[gpu-toolchains].compiler`" in message and "\n" not in message
    with pytest.raises(GpuKernelCompileError, match="wrote nothing for sm_90"):
        check_compile_outputs(address, source, CUDA13, {**files, "sm_90": ()}, b"a log\n")
    check_compile_outputs(address, source, CUDA13, {"sm_87": files["sm_87"]}, b"")


# -----------------------------------------------------------------------------------------------
# compile_options


def test_options_defaults() -> None:
    assert compile_options(field_set(source="k.py"), "src/python") == CompileOptions(
        sys_path=("src/python",)
    )


def test_options_from_every_field() -> None:
    options = compile_options(
        field_set(
            source="matmul.cu",
            fast_math=True,
            lineinfo=True,
            max_registers=96,
            capabilities=["sm_90"],
            ptx_version="8.7",
            defines=["TILE=16"],
            include_dirs=[".", "include", "../shared/include", "./a/../b"],
            name_expressions=["matmul<float, 16>"],
        ),
        "src/python",
    )
    assert options == CompileOptions(
        fast_math=True,
        lineinfo=True,
        max_registers=96,
        ptx_version="8.7",
        defines=("TILE=16",),
        # Relative to the BUILD file's directory in the field; to the buildroot in the argv
        # (the compile runs at the sandbox root).
        include_dirs=(
            KERNELS,
            f"{KERNELS}/include",
            "src/python/imaging/shared/include",
            f"{KERNELS}/b",
        ),
        name_expressions=("matmul<float, 16>",),
        sys_path=("src/python",),
    )


def test_options_include_dirs_of_a_root_build_file() -> None:
    options = compile_options(field_set(spec_path="", include_dirs=[".", "inc"]), "")
    assert options.include_dirs == (".", "inc")


# -----------------------------------------------------------------------------------------------
# check_ptx_version


def test_no_ptx_version_is_always_fine() -> None:
    for capability in ("sm_75", "sm_90", "sm_120"):
        check_ptx_version(Address("a", target_name="k"), CompileOptions(), capability, CUDA13)


@pytest.mark.parametrize(
    "spec, ptx_version, capability",
    [
        (CUDA13, "9.0", "sm_90"),
        (CUDA13, "8.5", "sm_90"),
        (CUDA13, "7.8", "sm_90"),
        (CUDA13, "7.4", "sm_87"),
        (CUDA13, "6.3", "sm_75"),
        (CUDA12, "8.5", "sm_87"),
        (CUDA12, "8.0", "sm_90"),
    ],
)
def test_ptx_version_accepted(spec: ToolchainSpec, ptx_version: str, capability: str) -> None:
    check_ptx_version(
        Address("a", target_name="k"),
        CompileOptions(ptx_version=ptx_version),
        capability,
        spec,
    )


@pytest.mark.parametrize(
    "spec, ptx_version, capability, why",
    [
        # Newer than the toolchain writes.
        (CUDA13, "9.1", "sm_90", "newer than the toolchain"),
        (CUDA13, "9.9", "sm_90", "newer than the toolchain"),
        (CUDA12, "9.0", "sm_87", "newer than the toolchain"),
        (CUDA12, "8.6", "sm_87", "newer than the toolchain"),
        # Older than the capability needs.
        (CUDA13, "7.4", "sm_90", "too old for sm_90"),
        (CUDA13, "6.3", "sm_80", "too old for sm_80"),
        # In range but no PTX ISA of that number.
        (CUDA13, "8.9", "sm_90", "not a known PTX ISA"),
    ],
)
def test_ptx_version_refused_naming_the_target(
    spec: ToolchainSpec, ptx_version: str, capability: str, why: str
) -> None:
    address = Address(KERNELS, target_name="saxpy")
    with pytest.raises(GpuKernelCompileError) as excinfo:
        check_ptx_version(address, CompileOptions(ptx_version=ptx_version), capability, spec)
    message = str(excinfo.value)
    assert f"{KERNELS}:saxpy" in message
    assert "`ptx_version`" in message
    assert repr(spec.name) in message
    assert f"PTX ISA {spec.ptx_isa}" in message
    assert capability in message
    assert why in message


def test_toolchain_spec_ptx_isa() -> None:
    assert CUDA13.ptx_isa == "9.0"
    assert CUDA12.ptx_isa == "8.5"
    with pytest.raises(UnknownToolchainError, match="CUDA 10.7"):
        _ = ToolchainSpec(name="old", resolve="old", cuda="10.7").ptx_isa


# -----------------------------------------------------------------------------------------------
# toolchain_spec and kernel_capabilities


def test_toolchain_spec_lookup() -> None:
    subsystem = toolchains()
    assert toolchain_spec(subsystem, None, origin="x") == CUDA13
    assert toolchain_spec(subsystem, "cuda12", origin="x") == CUDA12


def test_toolchain_spec_unknown_lists_the_defined_ones() -> None:
    with pytest.raises(UnknownToolchainError) as excinfo:
        toolchain_spec(toolchains(), "cuda11", origin="The target src:k")
    message = str(excinfo.value)
    assert "The target src:k" in message
    assert "'cuda11'" in message
    assert "['cuda12', 'cuda13']" in message


@pytest.mark.parametrize("entry", [{"cuda": "13.0"}, {"resolve": "cuda13"}, "cuda13"])
def test_toolchain_spec_malformed_entry(entry: Any) -> None:
    with pytest.raises(UnknownToolchainError, match="'bad'"):
        toolchain_spec(toolchains(toolchains={"bad": entry}), "bad", origin="x")


def test_kernel_capabilities_from_the_target() -> None:
    fs = field_set(capabilities=["sm_90", "sm_87"])
    assert kernel_capabilities(fs, toolchains()) == ("sm_87", "sm_90")


def test_kernel_capabilities_default_sorted_and_checked() -> None:
    assert kernel_capabilities(field_set(), toolchains()) == ("sm_75", "sm_80", "sm_87", "sm_90")
    with pytest.raises(Exception, match="sm_999"):
        kernel_capabilities(field_set(), toolchains(default_capabilities=["sm_999"]))


@pytest.mark.parametrize(
    "rank, where",
    [
        (Rank.CONFIG, "set in a config file (`pants.toml`"),
        (Rank.ENVIRONMENT, "set by the environment variable `PANTS_GPU_TOOLCHAINS_DEFAULT_"),
        (Rank.FLAG, "set by the flag `--gpu-toolchains-default-capabilities`"),
    ],
)
@pytest.mark.parametrize("bad", [["sm_9O"], []])
def test_a_bad_default_capabilities_is_blamed_on_the_option(
    rank: Rank, where: str, bad: list
) -> None:
    subsystem = toolchains(default_capabilities=RankedValue(rank, bad))
    with pytest.raises(InvalidDefaultCapabilitiesError) as e:
        kernel_capabilities(field_set(), subsystem)
    message = str(e.value)
    assert message.startswith("The option `[gpu-toolchains].default_capabilities` (" + where)
    assert "Fix the option" in message and "\n" not in message
    assert "field in target" not in message  # the target's own field is not at fault
