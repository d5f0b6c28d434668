"""What a device can load: the one statement of CUDA's compatibility rules used everywhere.

- A cubin for `sm_XY` runs on a device of the same major and an equal or higher minor
  (binary compatibility); it needs no JIT, but a driver loads cubins only from toolchains of its
  own CUDA major or older (minor-version compatibility). So the toolchain's CUDA version decides,
  never the PTX ISA a module was relabelled to.
- PTX for `sm_XY` is JIT-compiled by the driver for any device of capability >= XY, if the driver
  knows its PTX ISA (`min_driver_for_ptx`).

The plugin asks these before building a bundle for a `driver_version`; the runtime asks them of
the driver it finds.
"""

from __future__ import annotations

from typing import List

from gpu_spec.capabilities import Capability
from gpu_spec.ptx_isa import min_driver_for_ptx
from gpu_spec.versions import Version, format_version, parse_version


def cubin_runs_on(cubin: Capability, device: Capability) -> bool:
    return cubin[0] == device[0] and cubin[1] <= device[1]


def ptx_runs_on(ptx: Capability, device: Capability) -> bool:
    return ptx <= device


def driver_loads_cubin(driver: Version, toolchain_cuda: str) -> bool:
    """Whether a driver of CUDA `driver` loads a cubin built by a `toolchain_cuda` toolchain."""
    return parse_version(toolchain_cuda)[0] <= driver[0]


def ptx_min_driver(ptx_isa: str) -> Version:
    return parse_version(min_driver_for_ptx(ptx_isa))


def driver_loads_ptx(driver: Version, ptx_isa: str) -> bool:
    """Whether a driver of CUDA `driver` JIT-compiles PTX of ISA `ptx_isa`."""
    return ptx_min_driver(ptx_isa) <= driver


def driver_problems(driver: Version, toolchain_cuda: str, ptx_isa: str) -> List[str]:
    """What of one compile output (its cubin, its PTX) a driver of CUDA `driver` cannot load."""
    problems = []
    if not driver_loads_cubin(driver, toolchain_cuda):
        problems.append(f"cubins built by CUDA {toolchain_cuda}")
    if not driver_loads_ptx(driver, ptx_isa):
        needed = format_version(ptx_min_driver(ptx_isa))
        problems.append(f"PTX ISA {ptx_isa}, which needs a CUDA {needed} driver")
    return problems
