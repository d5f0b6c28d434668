"""Fixtures the compiler's tests share."""

from __future__ import annotations

from typing import Callable, List

import pytest


@pytest.fixture
def cubin_differences() -> Callable[..., List[str]]:
    """Where a CompileResult's figures differ from its cubins' own (registers, shared, local and
    constant bytes and the launch bound as gpu_spec.resources.cubin reads them from the ELF the
    driver loads): the recorded ones (taken from the cubin) and, independently, the ones
    nvJitLink's info log gives (whose shared figure is the section's size, the reserved window
    of an sm_90 cubin included, and which gives no launch bound)."""
    from gpu_compiler.resources import parse_info_log
    from gpu_spec.resources.cubin import differences, kernel_resources

    def logged_differences(m) -> List[str]:
        logged, own = parse_info_log(m.link_log), kernel_resources(m.cubin)
        lines = []
        for k in m.kernels:
            log, cubin = logged.get(k.entry, {}), own.get(k.entry)
            if cubin is None:
                continue  # differences() names it
            expected = {
                "registers": cubin.registers,
                "shared_bytes": cubin.shared_section_bytes,
                "local_bytes": cubin.local_bytes,
                "const_bytes": cubin.const_bytes,
            }
            lines += [
                f"{m.name} (info log): {k.entry}: {key} logged {log.get(key)}, cubin {value}"
                for key, value in expected.items()
                if log.get(key) != value
            ]
        return lines

    def of(result) -> List[str]:
        lines = []
        for m in result.modules:
            recorded = {k.entry: k.resources for k in m.kernels}
            lines += [f"{m.name} (recorded): {d}" for d in differences(m.cubin, recorded)]
            lines += logged_differences(m)
        return lines

    return of
