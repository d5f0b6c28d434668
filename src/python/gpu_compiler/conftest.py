"""Fixtures the compiler's tests share."""

from __future__ import annotations

from typing import Callable, List

import pytest


@pytest.fixture
def cubin_differences() -> Callable[..., List[str]]:
    """Where a CompileResult's figures differ from its cubins' own (registers, shared, local and
    constant bytes as gpu_spec.resources.cubin reads them from the ELF the driver loads): the
    recorded ones (taken from the cubin) and, independently, the ones nvJitLink's info log gives."""
    from gpu_compiler.resources import parse_info_log
    from gpu_spec.resources.cubin import differences

    def of(result) -> List[str]:
        lines = []
        for m in result.modules:
            logged = parse_info_log(m.link_log)
            for what, figures in (
                ("recorded", {k.entry: k.resources for k in m.kernels}),
                ("info log", {k.entry: logged.get(k.entry, {}) for k in m.kernels}),
            ):
                lines += [f"{m.name} ({what}): {d}" for d in differences(m.cubin, figures)]
        return lines

    return of
