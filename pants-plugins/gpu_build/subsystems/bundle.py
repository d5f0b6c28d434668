"""`[gpu-bundle]`: how `deploy_bundle` builds the app PEX it ships."""

from __future__ import annotations

from pants.option.option_types import IntOption, StrListOption
from pants.option.subsystem import Subsystem
from pants.util.strutil import softwrap

# Cython sources and the C/C++ generated from them: read by a build, never by a running app
DEFAULT_STRIP = ["*.pyx", "*.pxd", "*.pxi", "*.c", "*.cpp"]


class GpuBundle(Subsystem):
    options_scope = "gpu-bundle"
    help = "How `deploy_bundle` builds the app PEX of a device bundle."

    strip_wheel_files = StrListOption(
        default=DEFAULT_STRIP,
        help=softwrap(
            f"""
            Files left out of the wheels in a bundle's app PEX: fnmatch patterns matched against
            each file's path inside its wheel (`*` also matches `/`), e.g. `"*/tests/*"`. The
            default, {DEFAULT_STRIP}, leaves out Cython sources and the C/C++ generated from
            them, which only a build reads: about 90 MB of cuda-bindings' 106 MB unpacked, which
            the PEX's first run on the device would otherwise write under PEX_ROOT. The stripped
            wheels get new fingerprints, so they never share a PEX_ROOT directory with the
            unstripped ones. `[]` ships the wheels whole. `pants run` and `pants test` use the
            `pex_binary` as it is.
            """
        ),
    )
    max_install_jobs = IntOption(
        default=-1,
        help=softwrap(
            """
            How many processes the app PEX's first run on the device uses to install its wheels
            under PEX_ROOT: PEX-INFO's `max_install_jobs`, as pex's own `--max-install-jobs`
            sets it. -1: pex's heuristic (in parallel when the wheels average over 1 MB, as a
            bundle's numpy and cuda-bindings do); 1: one at a time (pex's default); N: up to N.
            """
        ),
    )
