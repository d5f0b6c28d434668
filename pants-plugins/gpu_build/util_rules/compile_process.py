"""The compile process of one source for its capabilities, built by pure functions from plain
inputs.

Like Pants' `DockerBinary.build_image`: the rule gathers the inputs through the engine, and
`compile_process` turns them into the whole process, which a test asserts without the engine.
The process writes `OUT_DIR/<capability>/` for each capability it compiles.
"""

from __future__ import annotations

from typing import Sequence

from pants.backend.python.util_rules.pex import VenvPexProcess
from pants.engine.fs import Digest
from pants.util.logging import LogLevel

from gpu_build.util_rules.compile_description import format_compile_description
from gpu_build.util_rules.toolchain import ToolchainPex
from gpu_spec.compile.options import CompileOptions

OUT_DIR = "__gpu_out"
# Pants' own kill, this long after the compiler's --timeout: the compiler's stop names the kernel
# file; Pants' ends a process that even that did not end (a hang inside a C library call).
KILL_AFTER_TIMEOUT = 60


def compile_argv(
    *,
    source: str,
    capabilities: Sequence[str],
    out_dir: str,
    options: CompileOptions,
    inputs: Sequence[str] = (),
    timeout: int | None = None,
) -> tuple[str, ...]:
    """The `python -m gpu_compiler` arguments for one process; paths are buildroot-relative.
    `inputs`: the paths the compile may see (`--input`), the sandbox's top-level entries."""
    argv = ["compile", "--source", source]
    for capability in capabilities:
        argv += ["--capability", capability]
    argv += ["--out-dir", out_dir]
    for path in inputs:
        argv += ["--input", path]
    if timeout:
        argv += ["--timeout", str(timeout)]
    # after `--out-dir`, the same for every capability and what JIT mode's index hands the
    # runtime (`gpu_build.util_rules.jit_index`), so that it compiles exactly as this process
    return (*argv, *options.argv())


def compile_process(
    *,
    toolchain: ToolchainPex,
    source: str,
    capabilities: Sequence[str],
    options: CompileOptions,
    input_digest: Digest,
    inputs: Sequence[str] = (),
    timeout: int | None = None,
) -> VenvPexProcess:
    """Runs the toolchain PEX on `input_digest` (the source and its dependencies), writing the
    PTX, cubins and metadata.json of each capability under `OUT_DIR/<capability>/`."""
    return VenvPexProcess(
        toolchain.pex,
        argv=compile_argv(
            source=source,
            capabilities=capabilities,
            out_dir=OUT_DIR,
            options=options,
            inputs=inputs,
            timeout=timeout,
        ),
        input_digest=input_digest,
        timeout_seconds=timeout + KILL_AFTER_TIMEOUT if timeout else None,
        output_directories=(OUT_DIR,),
        description=format_compile_description(
            source=source, capabilities=capabilities, toolchain=toolchain.spec.name
        ),
        # INFO: each compile that really runs (not a cache hit) shows up in the log.
        level=LogLevel.INFO,
    )
