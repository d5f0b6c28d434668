"""`pants gpu-resources`: every kernel's registers, spills, shared, local and constant memory
and occupancy per capability, as a table and JSON, with what grew against a baseline.

The figures are the compiles' own (the same cache entries as `pants package`), read by
`gpu_build.util_rules.compile_kernel`; the rows, budget marks and the diff are
`gpu_spec.resources.report`'s. A kernel over its budget is reported (marked), not failed: the
report is where one looks at it.
"""

from __future__ import annotations

import json
import os

from pants.base.build_root import BuildRoot
from pants.core.util_rules.distdir import DistDir
from pants.core.util_rules.system_binaries import CpBinary
from pants.engine.console import Console
from pants.engine.fs import CreateDigest, Digest, DigestContents, FileContent, Workspace
from pants.engine.goal import Goal, GoalSubsystem
from pants.engine.process import Process, ProcessCacheScope, ProcessResult
from pants.engine.rules import Get, MultiGet, collect_rules, goal_rule
from pants.engine.target import Targets
from pants.option.option_types import BoolOption, StrOption
from pants.util.strutil import softwrap

from gpu_build.goals.deploy import abspath_in_build_root
from gpu_build.subsystems.budgets import GpuResourceBudgets
from gpu_build.util_rules.compile_kernel import (
    CompiledKernels,
    CompileKernelRequest,
    KernelResources,
    KernelResourcesRequest,
)
from gpu_build.util_rules.kernel_field_set import GpuKernelFieldSet, resource_budget
from gpu_spec.resources.report import baseline_rows, growth, report_json, report_row, table

BASELINE_COPY = "gpu-resources-baseline.json"


class GpuResourcesBaselineError(Exception):
    """The baseline is not a report of this goal nor a manifest."""


class GpuResourcesSubsystem(GoalSubsystem):
    name = "gpu-resources"
    help = softwrap(
        """
        Report every `gpu_kernel`'s resources per capability (registers, spill bytes, static
        shared, local and constant memory, occupancy at the budget's block size or the best
        one) as a table and as JSON; with `--baseline`, what grew since (for CI:
        `pants --changed-since=origin/main gpu-resources --baseline=... --fail-on-growth`).
        """
    )

    output = StrOption(
        default="gpu-resources.json",
        help="Where the JSON report is written, relative to the dist directory.",
    )
    baseline = StrOption(
        default=None,
        help=softwrap(
            """
            An earlier report of this goal, or a bundle's `cache/manifest.json`: each figure
            that grew (occupancy: fell) for the same kernel, capability and toolchain is listed.
            """
        ),
    )
    fail_on_growth = BoolOption(
        default=False, help="Exit 1 if any figure grew against `--baseline`."
    )


class GpuResources(Goal):
    subsystem_cls = GpuResourcesSubsystem
    environment_behavior = Goal.EnvironmentBehavior.LOCAL_ONLY


async def read_baseline(path: str, cp: CpBinary) -> bytes:
    """The baseline's bytes, copied in by a process (it may lie outside the build root, e.g. in
    dist/, which Pants does not read as a source)."""
    result = await Get(
        ProcessResult,
        Process(
            argv=(cp.path, "--", path, BASELINE_COPY),
            output_files=(BASELINE_COPY,),
            description=f"Read the gpu-resources baseline {path}",
            cache_scope=ProcessCacheScope.PER_SESSION,
        ),
    )
    contents = await Get(DigestContents, Digest, result.output_digest)
    return contents[0].content


@goal_rule
async def gpu_resources(
    console: Console,
    subsystem: GpuResourcesSubsystem,
    targets: Targets,
    budgets: GpuResourceBudgets,
    distdir: DistDir,
    workspace: Workspace,
    cp: CpBinary,
    build_root: BuildRoot,
) -> GpuResources:
    field_sets = [
        GpuKernelFieldSet.create(t) for t in targets if GpuKernelFieldSet.is_applicable(t)
    ]
    compiled = await MultiGet(
        Get(CompiledKernels, CompileKernelRequest(fs, check_budget=False)) for fs in field_sets
    )
    rows_by_target = await MultiGet(
        Get(KernelResources, KernelResourcesRequest(tuple(kernels))) for kernels in compiled
    )
    report = [
        report_row(
            str(fs.address),
            r.source,
            r.toolchain,
            r.capability,
            r.kernel,
            r.resources,
            resource_budget(fs, budgets),
            r.signature,
        )
        for fs, rows in zip(field_sets, rows_by_target)
        for r in rows
    ]
    console.print_stdout(table(report))
    path = os.path.join(distdir.relpath, subsystem.output)
    digest = await Get(Digest, CreateDigest([FileContent(path, report_json(report).encode())]))
    workspace.write_digest(digest)
    console.print_stderr(f"Wrote {path} ({len(report)} kernels).")
    if not subsystem.baseline:
        return GpuResources(exit_code=0)
    raw = await read_baseline(abspath_in_build_root(build_root, subsystem.baseline), cp)
    try:
        grown = growth(report, baseline_rows(json.loads(raw), subsystem.baseline))
    except ValueError as e:  # not JSON, or neither a report nor a manifest
        raise GpuResourcesBaselineError(f"`--gpu-resources-baseline`: {e}") from e
    for line in grown:
        console.print_stdout(f"grew: {line}")
    console.print_stderr(f"{len(grown)} figures grew against {subsystem.baseline}.")
    return GpuResources(exit_code=1 if grown and subsystem.fail_on_growth else 0)


def rules():
    return collect_rules()
