"""`MAJOR.MINOR` versions (CUDA, drivers, PTX ISA): one parser, one order, one spelling."""

from __future__ import annotations

import re
from typing import Sequence, Tuple, Union

from gpu_spec.errors import SpecError

Version = Tuple[int, int]

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)$")


def parse_version(text: object) -> Version:
    """`"12.6"` -> `(12, 6)`; anything but `MAJOR.MINOR` is refused."""
    match = _VERSION_RE.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise SpecError(f"invalid version {text!r}: expected MAJOR.MINOR, e.g. 12.6")
    return int(match.group(1)), int(match.group(2))


def is_version(text: object) -> bool:
    return isinstance(text, str) and _VERSION_RE.match(text) is not None


def format_version(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def driver_version(value: Union[int, str, Sequence[int]]) -> Version:
    """A driver's CUDA version from `cuDriverGetVersion` (13000), `"13.0"` or `(13, 0)`."""
    if isinstance(value, bool):
        raise SpecError(f"invalid driver version {value!r}")
    if isinstance(value, int):
        return value // 1000, (value % 1000) // 10
    if isinstance(value, str):
        return parse_version(value)
    numbers = tuple(value) if isinstance(value, (tuple, list)) else ()
    if len(numbers) != 2 or not all(isinstance(n, int) for n in numbers):
        raise SpecError(f"invalid driver version {value!r}: expected (major, minor)")
    return numbers[0], numbers[1]
