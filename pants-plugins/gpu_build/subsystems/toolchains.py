"""Options of the gpu_build backend: which toolchains exist and what a kernel gets by default.

Scope `[gpu-toolchains]`: a subsystem scope may not share a name with a target alias, so it cannot
be `[gpu-kernel]`.
"""

from __future__ import annotations

from typing import Any

from pants.backend.python.dependency_inference.subsystem import UnownedDependencyUsage
from pants.option.errors import OptionsError
from pants.option.option_types import (
    BoolOption,
    DictOption,
    EnumOption,
    IntOption,
    StrListOption,
    StrOption,
)
from pants.option.ranked_value import Rank
from pants.option.subsystem import Subsystem
from pants.util.strutil import softwrap

from gpu_spec.capabilities import parse_capability, sort_capabilities
from gpu_spec.errors import SpecError

# Where an option's value came from, by its rank, for an error that says where to fix it.
_SET_BY = {
    Rank.FLAG: "set by the flag `--{scope}-{flag}`",
    Rank.ENVIRONMENT: "set by the environment variable `PANTS_{env}`",
    Rank.CONFIG: "set in a config file (`pants.toml`, or one `--pants-config-files` names)",
    Rank.CONFIG_DEFAULT: "set in the `[DEFAULT]` section of a config file",
}


class InvalidDefaultCapabilitiesError(OptionsError):
    """`[gpu-toolchains].default_capabilities` is not a list of known capabilities."""


class GpuToolchains(Subsystem):
    options_scope = "gpu-toolchains"
    help = softwrap(
        """
        Pinned GPU kernel compile toolchains (numba-cuda, NVRTC, NVVM and nvJitLink from NVIDIA's
        wheels, each in its own Python resolve) and the defaults of `gpu_kernel` targets.
        """
    )

    toolchains = DictOption[Any](
        default={"cuda13": {"resolve": "cuda13", "cuda": "13.0"}},
        help=softwrap(
            """
            Toolchain name to `{"resolve": <python resolve>, "cuda": "<major.minor>"}`. The
            resolve's lockfile pins the compiler wheels; `cuda` is the CUDA version of those
            wheels, which fixes the PTX ISA they emit (13.0 -> 9.0, 12.6 -> 8.5) and so the
            oldest driver that can load their PTX.
            """
        ),
    )
    compiler = StrOption(
        default=None,
        help=softwrap(
            """
            The address of the `python_sources` target of the `gpu_compiler` package, e.g.
            `src/python/gpu_compiler:compiler`. Its sources and those of its dependencies are
            put into each toolchain PEX, which runs them as `python -m gpu_compiler`. Unset
            (the default): the compiler the gpu-build plugin wheel carries.
            """
        ),
    )
    default_toolchain = StrOption(
        default="cuda13",
        help="The toolchain a `gpu_kernel` without a `toolchain` field compiles with.",
    )
    default_capabilities = StrListOption(
        default=["sm_75", "sm_80", "sm_87", "sm_90"],
        help=softwrap(
            """
            Compute capabilities a `gpu_kernel` without a `capabilities` field is compiled for,
            e.g. `["sm_87", "sm_90"]`.
            """
        ),
    )
    unowned_dependency_behavior = EnumOption(
        default=UnownedDependencyUsage.LogWarning,
        help=softwrap(
            """
            What to do when a file a `gpu_kernel` includes or imports has no target that owns
            it (its compile would then fail for want of the file): a file found without an
            owner, or the file of an `#include "..."`, a relative import or an import of a
            first-party package not found at all. Warn, fail the build, or ignore it. Angle
            includes found nowhere and imports of other packages (numba, numpy) are never
            reported. Like
            `[python-infer].unowned_dependency_behavior`; a line with `pants: no-infer-dep` in a
            comment is skipped.
            """
        ),
    )
    compile_timeout = IntOption(
        default=600,
        help=softwrap(
            """
            Seconds one compile process may take (all capabilities of one source). A compile
            still running then stops with one line naming the kernel file and line it was in
            (a numba module that blocks at import: a read, a lock, a loop); Pants kills the
            process a minute later if even that does not end it. JIT mode has its own limit,
            `GPU_RUNTIME_COMPILE_TIMEOUT`. Changing it re-runs the compiles once (it is part of
            their command line), with the same bytes.
            """
        ),
    )
    batch_capabilities = BoolOption(
        default=True,
        help=softwrap(
            """
            Compile each `gpu_kernel` source in one process for all of its target's
            `capabilities` (per toolchain), rather than in one process per capability. numba's
            start-up (~1 s of import and NVVM set-up) then comes once per source instead of once
            per capability, at the same bytes (numba's naming counters are reset per compile).
            Either way a process covers one source, so editing a kernel re-runs only its own
            compiles; a `deploy_bundle` asks for its kernels' full capability lists (so it
            reuses the processes of `pants package` on the kernels) and ships its subset. `false`
            keeps one process (and one cache entry) per (source, capability), and a bundle then
            compiles only the capabilities it ships; `tests/bench/compile_bench.py` compares
            the two.
            """
        ),
    )

    def checked_default_capabilities(self) -> tuple[str, ...]:
        """`default_capabilities`, sorted; an invalid value is blamed on the option, named with
        where it was set, since no target's `capabilities` field is at fault."""
        value = tuple(self.default_capabilities)
        try:
            if not value:
                raise SpecError("it is empty: list at least one capability")
            for capability in value:
                parse_capability(capability)
        except SpecError as e:
            raise InvalidDefaultCapabilitiesError(
                f"The option `[gpu-toolchains].default_capabilities` "
                f"({self._set_by('default_capabilities')}) has an invalid value: {e}. Fix the "
                "option: it gives the capabilities of every `gpu_kernel` without a "
                "`capabilities` field."
            ) from e
        return tuple(sort_capabilities(value))

    def _set_by(self, option: str) -> str:
        flag = option.replace("_", "-")
        env = f"{self.options_scope}_{option}".replace("-", "_").upper()
        where = _SET_BY.get(self.options.get_rank(option), "its default")
        return where.format(scope=self.options_scope, flag=flag, env=env)
