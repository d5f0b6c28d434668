"""What a cubin itself says each kernel uses: registers, static shared, local and constant bytes.

Why: the build records resources from nvJitLink's info log (the only place spill figures are
given), and the driver reads them from the cubin's ELF when it loads a module
(`cuFuncGetAttribute`). Reading the same ELF here lets a test with no GPU check the recorded
figures against what the driver will see, for every kernel and capability a build compiles.

Where each figure lives in a cubin (ELF64, little-endian) built by CUDA 12-13:
- registers: the module-wide `.nv.info` section's EIATTR_REGCOUNT record for the kernel's
  symbol (CU_FUNC_ATTRIBUTE_NUM_REGS);
- local bytes per thread: its EIATTR_MIN_STACK_SIZE record, the kernel's own frame plus its
  deepest callee's (nvJitLink's "N stack"; 16 for a numba grid-sync kernel whose own
  EIATTR_FRAME_SIZE is 0, because cudaCGSynchronize has a 16-byte frame), else its frame size.
  Whether the driver's LOCAL_SIZE_BYTES counts the callees' part is what
  tests/gpu/resources_check.py settles on a GPU (it prints both where they differ);
- static shared bytes: the size of `.nv.shared.<kernel>` (SHARED_SIZE_BYTES), 0 where absent;
- user constant bytes: the `.nv.constant<N>` sections other than bank 0 (bank 0 holds the
  kernel's parameters and the driver's constants), the module-wide ones plus the kernel's own
  (CONST_SIZE_BYTES).
Records are `(format u8, attribute u8, ...)`: format 0x04 is followed by a u16 size and that many
bytes, 0x03 by a u16 value, 0x02 by a u16 of padding, 0x01 by nothing.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Dict, Iterator, List, Mapping, Tuple

EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_REGCOUNT = 0x2F
_CONST_BANK = re.compile(r"^\.nv\.constant(\d+)(?:\.(.+))?$")


class CubinFormatError(ValueError):
    """The bytes are not a cubin this reader understands (not ELF64 little-endian, cut short)."""


@dataclass(frozen=True)
class CubinKernel:
    registers: int
    shared_bytes: int
    local_bytes: int
    const_bytes: int
    frame_bytes: int = 0  # the kernel's own stack frame, without its callees'


@dataclass(frozen=True)
class _Section:
    name: str
    offset: int
    size: int
    entry_size: int


def _sections(data: bytes) -> List[_Section]:
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        raise CubinFormatError("not a little-endian ELF64 file")
    try:
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        entsize, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
        raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
        names_at = raw[names_index][4]
        return [_Section(_cstring(data, names_at + h[0]), h[4], h[5], h[9]) for h in raw]
    except (struct.error, IndexError, ValueError) as e:
        raise CubinFormatError(f"section table unreadable: {e}") from e


def _cstring(data: bytes, at: int) -> str:
    return data[at : data.index(b"\0", at)].decode("utf-8", "replace")


def _symbols(data: bytes, sections: List[_Section]) -> List[str]:
    """Symbol names by index (`.symtab` with `.strtab`)."""
    by_name = {s.name: s for s in sections}
    table, strings = by_name.get(".symtab"), by_name.get(".strtab")
    if table is None or strings is None or not table.entry_size:
        raise CubinFormatError("no symbol table")
    return [
        _cstring(data, strings.offset + struct.unpack_from("<I", data, table.offset + i)[0])
        for i in range(0, table.size, table.entry_size)
    ]


def _records(data: bytes, section: _Section) -> Iterator[Tuple[int, bytes]]:
    """(attribute, payload) of each EIATTR record of an `.nv.info` section."""
    at, end = section.offset, section.offset + section.size
    while at + 2 <= end:
        fmt, attr = data[at], data[at + 1]
        if fmt == 0x04:
            (size,) = struct.unpack_from("<H", data, at + 2)
            yield attr, data[at + 4 : at + 4 + size]
            at += 4 + size
        elif fmt in (0x02, 0x03):
            yield attr, data[at + 2 : at + 4]
            at += 4
        elif fmt == 0x01:
            at += 2
        else:
            raise CubinFormatError(f"unknown EIATTR format {fmt:#x} in {section.name}")


def kernel_resources(data: bytes) -> Dict[str, CubinKernel]:
    """{kernel symbol: its resources} for every kernel with a register count in the cubin."""
    sections = _sections(data)
    symbols = _symbols(data, sections)
    per_symbol: Dict[str, Dict[int, int]] = {}
    for section in (s for s in sections if s.name == ".nv.info"):
        for attr, payload in _records(data, section):
            if (
                attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE)
                and len(payload) == 8
            ):
                index, value = struct.unpack("<II", payload)
                per_symbol.setdefault(symbols[index], {})[attr] = value
    shared = {
        s.name[len(".nv.shared.") :]: s.size for s in sections if s.name.startswith(".nv.shared.")
    }
    module_const, own_const = 0, {}  # type: int, Dict[str, int]
    for s in sections:
        m = _CONST_BANK.match(s.name)
        if m and m.group(1) != "0":
            if m.group(2):
                own_const[m.group(2)] = own_const.get(m.group(2), 0) + s.size
            else:
                module_const += s.size
    return {
        name: CubinKernel(
            registers=attrs[EIATTR_REGCOUNT],
            shared_bytes=shared.get(name, 0),
            local_bytes=attrs.get(EIATTR_MIN_STACK_SIZE, attrs.get(EIATTR_FRAME_SIZE, 0)),
            const_bytes=module_const + own_const.get(name, 0),
            frame_bytes=attrs.get(EIATTR_FRAME_SIZE, 0),
        )
        for name, attrs in per_symbol.items()
        if EIATTR_REGCOUNT in attrs
    }


# The recorded resource keys a cubin also holds (spills are only in the compiler's log).
CUBIN_KEYS = ("registers", "shared_bytes", "local_bytes", "const_bytes")


def differences(cubin: bytes, recorded: Mapping[str, Mapping[str, int]]) -> List[str]:
    """One line per figure where `recorded` ({entry: resources}, as metadata.json and the
    manifest hold them) differs from the cubin, or per entry the cubin lacks; [] if they agree.
    Keys a record lacks (older manifests) are not compared."""
    in_cubin = kernel_resources(cubin)
    lines = []
    for entry, resources in recorded.items():
        own = in_cubin.get(entry)
        if own is None:
            lines.append(f"{entry}: no such kernel in the cubin")
            continue
        for key in CUBIN_KEYS:
            if key in resources and resources[key] != getattr(own, key):
                lines.append(f"{entry}: {key} recorded {resources[key]}, cubin {getattr(own, key)}")
    return lines
