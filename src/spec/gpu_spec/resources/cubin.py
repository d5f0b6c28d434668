"""What a cubin itself says each kernel uses: registers, static shared, local and constant bytes,
and its launch bound.

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
  The driver's LOCAL_SIZE_BYTES counts the callees' part: 16 for those kernels on an sm_90 GPU
  (tests/gpu/resources_check.py, 2026-12-06);
- static shared bytes: the size of `.nv.shared.<kernel>`, 0 where absent, less the reserved
  window where the module has one. From sm_90 a cubin declares `.nv.reservedSmem.offset0`, and
  the shared section of each kernel that has one begins with the 1 KiB the driver reserves per
  block (RESERVED_WINDOW_BYTES): nvJitLink's "2320 bytes smem" for an 18x18 float tile. The
  driver's SHARED_SIZE_BYTES is the kernel's own part (1296), measured on an sm_90 GPU for
  every kernel of the example bundles; the occupancy calculator adds the reservation back per
  block (`shared_section_bytes` keeps the section's size, what the info log reports);
- launch bound: the kernel's EIATTR_MAX_THREADS (`__launch_bounds__`, `.maxntid`) or
  EIATTR_REQNTID (`.reqntid`) record in its own `.nv.info.<kernel>` section, x*y*z threads per
  block, 0 where it has none; the driver's MAX_THREADS_PER_BLOCK is at most that;
- user constant bytes: the `.nv.constant<N>` sections other than bank 0 (bank 0 holds the
  kernel's parameters and the driver's constants), the module-wide ones plus the kernel's own
  (CONST_SIZE_BYTES).
Records are `(format u8, attribute u8, ...)`: format 0x04 is followed by a u16 size and that many
bytes, 0x03 by a u16 value, 0x02 by a u16 of padding, 0x01 (no value) by 2 bytes of padding
(CUDA 12.6's sm_87 cubins hold such records in the kernels' own `.nv.info.<kernel>` sections).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Dict, Iterator, List, Mapping, Tuple

EIATTR_MAX_THREADS = 0x05
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_REGCOUNT = 0x2F
RESERVED_WINDOW_SYMBOL = ".nv.reservedSmem.offset0"
RESERVED_WINDOW_BYTES = 1024
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
    launch_bound_threads: int = 0  # threads per block its launch bounds allow; 0: none
    shared_section_bytes: int = 0  # `.nv.shared.<kernel>`'s size, the reserved window included


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
            at += 4  # no value, but the record keeps its 4-byte alignment
        else:
            raise CubinFormatError(f"unknown EIATTR format {fmt:#x} in {section.name}")


def _launch_bound(data: bytes, section: _Section) -> int:
    """x*y*z of the kernel's max-threads or required-threads record (the smaller if both); 0 if
    neither."""
    bounds = [
        struct.unpack("<III", payload)
        for attr, payload in _records(data, section)
        if attr in (EIATTR_MAX_THREADS, EIATTR_REQNTID) and len(payload) == 12
    ]
    return min((x * y * z for x, y, z in bounds), default=0)


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
    window = RESERVED_WINDOW_BYTES if RESERVED_WINDOW_SYMBOL in symbols else 0
    bounds = {
        s.name[len(".nv.info.") :]: _launch_bound(data, s)
        for s in sections
        if s.name.startswith(".nv.info.")
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
            shared_bytes=max(0, shared.get(name, 0) - window),
            local_bytes=attrs.get(EIATTR_MIN_STACK_SIZE, attrs.get(EIATTR_FRAME_SIZE, 0)),
            const_bytes=module_const + own_const.get(name, 0),
            frame_bytes=attrs.get(EIATTR_FRAME_SIZE, 0),
            launch_bound_threads=bounds.get(name, 0),
            shared_section_bytes=shared.get(name, 0),
        )
        for name, attrs in per_symbol.items()
        if EIATTR_REGCOUNT in attrs
    }


# The recorded resource keys a cubin also holds (spills are only in the compiler's log).
CUBIN_KEYS = ("registers", "shared_bytes", "local_bytes", "const_bytes", "launch_bound_threads")


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
