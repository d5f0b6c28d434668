"""PTX kernel parameters: their types, and the packed parameter buffer of one launch.

A packed launch is a tuple of (PTX type name, value) pairs, one per `.param` of the entry.
`PackedArgs.launch_args()` turns them into numpy scalars of the exact width of each parameter,
which is what `cuda.core.launch` copies into the driver's buffer; the byte image (each value at
its natural alignment, little-endian) is laid out only when asked for, by `Kernel.pack` and by
the self-test's comparison with the driver's parameter offsets.
"""

from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

import numpy as np

from gpu_runtime.errors import DispatchError

_PTX_RE = re.compile(r"^(?:\.?align\s+(\d+)\s+)?\.?([busf])(8|16|32|64)(?:\s*\[\s*(\d+)\s*\])?$")
# fmt: off
_STRUCT_CODES = {("u", 8): "<B", ("u", 16): "<H", ("u", 32): "<I", ("u", 64): "<Q",
                 ("b", 8): "<B", ("b", 16): "<H", ("b", 32): "<I", ("b", 64): "<Q",
                 ("s", 8): "<b", ("s", 16): "<h", ("s", 32): "<i", ("s", 64): "<q",
                 ("f", 16): "<H", ("f", 32): "<f", ("f", 64): "<d"}
_NP_TYPES = {("u", 8): np.uint8, ("u", 16): np.uint16, ("u", 32): np.uint32, ("u", 64): np.uint64,
             ("b", 8): np.uint8, ("b", 16): np.uint16, ("b", 32): np.uint32, ("b", 64): np.uint64,
             ("s", 8): np.int8, ("s", 16): np.int16, ("s", 32): np.int32, ("s", 64): np.int64,
             ("f", 16): np.uint16, ("f", 32): np.float32, ("f", 64): np.float64}
# fmt: on
# cuda.core's launcher takes numpy scalars; a by-value struct of these sizes travels as one.
_BYTES_AS_SCALAR = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.complex128}

PackedValue = Tuple[str, Any]  # (PTX type name, int | float | bytes)


@dataclass(frozen=True)
class ParamType:
    """A PTX `.param` type: "u64", "f32", "b8[16]", "align 8 b8[16]" (leading dots optional)."""

    kind: str  # "u" | "s" | "b" | "f"
    bits: int
    count: int  # 1 for a scalar, N for `.b8 name[N]`
    align: int
    is_array: bool

    @property
    def size(self) -> int:
        return self.bits // 8 * self.count

    @property
    def name(self) -> str:
        base = f"{self.kind}{self.bits}"
        return f"align {self.align} {base}[{self.count}]" if self.is_array else base


@functools.lru_cache(maxsize=None)
def parse_param_type(text: str) -> ParamType:
    """Memoized: every launch parses its kernel's parameter types (a handful of distinct names)."""
    m = _PTX_RE.match(text.strip())
    if not m:
        raise DispatchError(f"unknown PTX parameter type {text!r}")
    align, kind, bits, count = m.group(1), m.group(2), int(m.group(3)), m.group(4)
    if kind == "f" and bits == 8:
        raise DispatchError(f"unknown PTX parameter type {text!r}")
    n = int(count) if count is not None else 1
    return ParamType(
        kind=kind,
        bits=bits,
        count=n,
        align=int(align) if align else bits // 8,
        is_array=count is not None,
    )


@dataclass(frozen=True)
class PackedArgs:
    values: Tuple[PackedValue, ...]  # one per .param

    # A launch passes `launch_args()`; the byte image is for `Kernel.pack` and the self-test, so
    # the hot path never lays the buffer out.
    @property
    def image(self) -> bytes:
        """The parameter buffer, each value at its natural alignment."""
        return _layout(self.values)[0]

    @property
    def offsets(self) -> Tuple[int, ...]:
        return _layout(self.values)[1]

    @property
    def sizes(self) -> Tuple[int, ...]:
        return tuple(parse_param_type(tname).size for tname, _ in self.values)

    def launch_args(self) -> List[Any]:
        """numpy scalars for cuda.core.launch, each of the exact width of its parameter."""
        out = []
        for tname, value in self.values:
            pt = parse_param_type(tname)
            if pt.is_array:
                out.append(_bytes_as_scalar(value, tname))
            else:
                out.append(_NP_TYPES[(pt.kind, pt.bits)](value))
        return out


def build_image(values: Sequence[PackedValue]) -> PackedArgs:
    return PackedArgs(values=tuple(values))


def _bytes_as_scalar(data: bytes, tname: str) -> Any:
    n = len(data)
    dt = _BYTES_AS_SCALAR.get(n)
    if dt is None:
        raise DispatchError(
            f"a {n}-byte by-value parameter ({tname}) cannot be passed through cuda.core's "
            f"launcher (it takes scalars of 1, 2, 4, 8 or 16 bytes); pass the struct through "
            f"device memory"
        )
    return np.frombuffer(data, dtype=dt)[0]


def _encode(pt: ParamType, value: Any) -> bytes:
    if pt.is_array:
        return bytes(value)
    return struct.pack(_STRUCT_CODES[(pt.kind, pt.bits)], value)


def _layout(values: Sequence[PackedValue]) -> Tuple[bytes, Tuple[int, ...]]:
    image = bytearray()
    offsets = []
    for tname, value in values:
        pt = parse_param_type(tname)
        off = -(-len(image) // pt.align) * pt.align
        image.extend(b"\0" * (off - len(image)))
        offsets.append(off)
        data = _encode(pt, value)
        assert len(data) == pt.size, (tname, value)
        image.extend(data)
    return bytes(image), tuple(offsets)
