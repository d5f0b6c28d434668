"""``python -m gpu_runtime platform [-o FILE]``: this interpreter's Pex complete platform.

A deploy_bundle is built for a device's interpreter without running it (`complete_platforms`),
so the build needs that interpreter's PEP 508 markers and its compatible wheel tags, most
specific first: the JSON `pex3 interpreter inspect --markers --tags` writes. A device rarely has
pex, so this computes the same thing with the standard library only, as
`packaging.markers.default_environment()` and `packaging.tags.sys_tags()` do for CPython on glibc
Linux (the glibc version from `os.confstr`), in the order pex's vendored packaging lists them:
linux_<arch> after the manylinux tags (packaging 26.3 moved it first; pex's files, like
3rdparty/platforms/h200_x86_64_cp312.json, have it last). It imports nothing from gpu_runtime
either: the file also runs on its own (`python3 complete_platform.py`) on a device with nothing
but python3. It keeps to Python 3.6's syntax (no `from __future__ import annotations`), so that
there, as run alone, it says which Python it needs rather than fail with a SyntaxError
(`python -m gpu_runtime` checks the same first, in gpu_runtime/__init__.py).
"""

import argparse
import json
import os
import platform
import sys
import sysconfig
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

HELP = "print (or write) this interpreter's Pex complete platform JSON, for complete_platforms"

# packaging.tags: the manylinux tags that are older names of manylinux_2_N.
_LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
_LAST_GLIBC_MINOR = 50  # packaging's guess at a past glibc major's last minor

Version = Tuple[int, int]
REQUIRES_PYTHON = (3, 7)  # gpu_runtime.PLATFORM_PYTHON, for this file run alone


class UnsupportedPlatform(Exception):
    """Not CPython on glibc Linux: the tags would be guesses, so pex must inspect it instead."""


def marker_environment() -> Dict[str, str]:
    """The PEP 508 markers of this interpreter, as packaging (so pex) computes them."""
    info = sys.implementation.version
    implementation_version = f"{info.major}.{info.minor}.{info.micro}"
    if info.releaselevel != "final":
        implementation_version += info.releaselevel[0] + str(info.serial)
    return {
        "implementation_name": sys.implementation.name,
        "implementation_version": implementation_version,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_python_implementation": platform.python_implementation(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def glibc_version() -> Optional[Version]:
    """The running glibc's (major, minor), or None where the C library is not glibc (musl)."""
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.35"
    except (AttributeError, OSError, ValueError):
        return None
    if not value or not value.startswith("glibc "):
        return None
    try:
        major, minor = value.split()[1].split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def _manylinux_allowed(arch: str, glibc: Version) -> bool:
    """PEP 600's `_manylinux` override module, where a distribution ships one (as packaging)."""
    try:
        import _manylinux
    except ImportError:
        return True
    if hasattr(_manylinux, "manylinux_compatible"):
        result = _manylinux.manylinux_compatible(glibc[0], glibc[1], arch)
        if result is not None:
            return bool(result)
        return True
    legacy = {(2, 5): "manylinux1", (2, 12): "manylinux2010", (2, 17): "manylinux2014"}
    if glibc in legacy and hasattr(_manylinux, f"{legacy[glibc]}_compatible"):
        return bool(getattr(_manylinux, f"{legacy[glibc]}_compatible"))
    return True


def manylinux_tags(archs: Sequence[str], glibc: Version, host: bool = True) -> Iterator[str]:
    """manylinux_2_N_<arch> from the running glibc down to 2_17 (2_5 on x86), with the
    manylinux2014/2010/1 aliases right after the glibc they name (packaging's order); for
    another machine than this one (`host=False`), without this host's `_manylinux` override."""
    too_old = (2, 4) if set(archs) & {"x86_64", "i686"} else (2, 16)
    glibc_max = [glibc] + [(major, _LAST_GLIBC_MINOR) for major in range(glibc[0] - 1, 1, -1)]
    for arch in archs:
        for major, max_minor in glibc_max:
            min_minor = too_old[1] if major == too_old[0] else -1
            for minor in range(max_minor, min_minor, -1):
                if (major, minor) > glibc:
                    continue
                if host and not _manylinux_allowed(arch, (major, minor)):
                    continue
                yield f"manylinux_{major}_{minor}_{arch}"
                if (major, minor) in _LEGACY_MANYLINUX:
                    yield f"{_LEGACY_MANYLINUX[(major, minor)]}_{arch}"


def linux_platforms(
    machine_platform: str, glibc: Version, is_32bit: bool, host: bool = True
) -> List[str]:
    """The platform tags of a Linux interpreter whose sysconfig platform is e.g. linux-aarch64."""
    linux = machine_platform.replace("-", "_").replace(".", "_")
    if is_32bit:  # a 32-bit interpreter on a 64-bit kernel
        linux = {"linux_x86_64": "linux_i686", "linux_aarch64": "linux_armv8l"}.get(linux, linux)
    arch = linux.split("_", 1)[1]
    archs = {"armv8l": ["armv8l", "armv7l"]}.get(arch, [arch])
    return list(manylinux_tags(archs, glibc, host)) + [f"linux_{a}" for a in archs]


def _py_versions(version: Version) -> List[str]:
    """py312, py3, py311 ... py30: packaging's order for interpreter-independent tags."""
    major, minor = version
    return [f"py{major}{minor}", f"py{major}"] + [f"py{major}{m}" for m in range(minor - 1, -1, -1)]


def cpython_tags(
    version: Version, abis: Sequence[str], platforms: Sequence[str], nodot: Optional[str] = None
) -> List[str]:
    """packaging.tags.sys_tags() for CPython `version` with these ABIs on these platforms."""
    major, minor = version
    interpreter = f"cp{nodot or f'{major}{minor}'}"
    tags = [f"{interpreter}-{abi}-{p}" for abi in abis for p in platforms]
    use_abi3 = version >= (3, 2) and not any(abi.endswith("t") for abi in abis)  # free-threaded
    if use_abi3:
        tags += [f"{interpreter}-abi3-{p}" for p in platforms]
    tags += [f"{interpreter}-none-{p}" for p in platforms]
    if use_abi3:
        tags += [f"cp{major}{m}-abi3-{p}" for m in range(minor - 1, 1, -1) for p in platforms]
    tags += [f"{py}-none-{p}" for py in _py_versions(version) for p in platforms]
    tags.append(f"{interpreter}-none-any")
    tags += [f"{py}-none-any" for py in _py_versions(version)]
    return tags


def _cpython_abis() -> List[str]:
    """This CPython's own ABI tag (cp312, cp313t, cp312d) then, for a debug build, the plain one."""
    nodot = f"{sys.version_info[0]}{sys.version_info[1]}"
    debug_var = sysconfig.get_config_var("Py_DEBUG")
    debug = "d" if debug_var or (debug_var is None and hasattr(sys, "gettotalrefcount")) else ""
    threaded = (
        "t" if sys.version_info >= (3, 13) and sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    )
    abis = [f"cp{nodot}{threaded}{debug}"]
    if debug:
        abis.append(f"cp{nodot}{threaded}")
    return abis


def complete_platform(
    machine: Optional[str] = None, glibc: Optional[Version] = None
) -> Dict[str, object]:
    """The running interpreter's complete platform: {"compatible_tags", "marker_environment"}.

    With `machine` (e.g. "aarch64") and `glibc`, that of a device not at hand whose CPython is
    this one's minor version: this interpreter's tags and markers, as if it ran on that machine
    with that glibc (the device's kernel release and version are unknown: left empty). No
    `_manylinux` module of this host is consulted for it.
    """
    if sys.implementation.name != "cpython" or not sys.platform.startswith("linux"):
        raise UnsupportedPlatform(f"{sys.implementation.name} on {sys.platform}")
    markers = marker_environment()
    if machine is None:
        glibc = glibc or glibc_version()
        if glibc is None:
            raise UnsupportedPlatform("a Linux whose C library is not glibc (musl?)")
        platforms = linux_platforms(sysconfig.get_platform(), glibc, sys.maxsize <= 2**32)
    else:
        if glibc is None:
            raise ValueError("a machine needs its glibc version")
        platforms = linux_platforms(f"linux-{machine}", glibc, False, host=False)
        markers.update(platform_machine=machine, platform_release="", platform_version="")
    nodot = sysconfig.get_config_var("py_version_nodot")
    tags = cpython_tags(sys.version_info[:2], _cpython_abis(), platforms, nodot and str(nodot))
    return {"compatible_tags": tags, "marker_environment": markers}


def to_json(complete: Dict[str, object]) -> str:
    """The form of the files in 3rdparty/platforms/ (what derive_platform.py writes)."""
    return json.dumps(complete, indent=1, sort_keys=True) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        default=None,
        help="write the JSON to FILE (e.g. 3rdparty/platforms/<device>.json) instead of stdout",
    )
    parser.add_argument(
        "--machine",
        metavar="ARCH",
        default=None,
        help=(
            "for a device not at hand: its CPU architecture as `uname -m` prints it (aarch64 "
            "for a Jetson); run this with a CPython of the device's minor version (3.10 for "
            "JetPack 6), and give --glibc"
        ),
    )
    parser.add_argument(
        "--glibc",
        metavar="X.Y",
        default=None,
        help="the device's glibc version (`ldd --version`; 2.35 for JetPack 6's Ubuntu 22.04)",
    )


def _glibc_arg(value: str) -> Optional[Version]:
    parts = value.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def run(args: argparse.Namespace) -> int:
    machine = getattr(args, "machine", None)
    glibc_text = getattr(args, "glibc", None)
    glibc = None if glibc_text is None else _glibc_arg(glibc_text)
    if glibc_text is not None and glibc is None:
        print(f"error: --glibc {glibc_text}: give MAJOR.MINOR, e.g. 2.35", file=sys.stderr)
        return 2
    if (machine is None) != (glibc is None):
        print(
            "error: a device not at hand needs both --machine and --glibc (e.g. --machine "
            "aarch64 --glibc 2.35 for JetPack 6); on the device, give neither",
            file=sys.stderr,
        )
        return 2
    try:
        text = to_json(complete_platform(machine, glibc))
    except UnsupportedPlatform as error:
        print(
            f"error: {error} is not supported here (CPython on glibc Linux only): run "
            "`pex3 interpreter inspect --markers --tags --indent 1` on the device instead",
            file=sys.stderr,
        )
        return 2
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        with open(args.output, "w") as f:
            f.write(text)
    except OSError as error:
        print(
            f"error: cannot write {args.output}: {error.strerror}: pick a writable path",
            file=sys.stderr,
        )
        return 2
    markers = json.loads(text)["marker_environment"]
    glibc = glibc or glibc_version() or (0, 0)
    print(
        f"wrote {args.output}: CPython {markers['python_full_version']} "
        f"{markers['platform_machine']}, glibc {glibc[0]}.{glibc[1]}; use it as a file target "
        "in a deploy_bundle's complete_platforms",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":  # the file alone, copied to a device without gpu_runtime
    if sys.version_info < REQUIRES_PYTHON:
        raise SystemExit(
            "error: complete_platform.py needs Python %d.%d or newer, and this is Python %s "
            "(%s): run it with a newer python3"
            % (REQUIRES_PYTHON + (sys.version.split()[0], sys.executable or "python"))
        )
    _parser = argparse.ArgumentParser(prog="complete_platform.py", description=HELP)
    add_arguments(_parser)
    raise SystemExit(run(_parser.parse_args()))
