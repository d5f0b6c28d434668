"""Read the target SM of a CUDA cubin from its ELF header (pure Python).

Why: a cheap, GPU-free check that a cubin was built for the capability its
metadata claims (used by the tests, and usable by the runtime before loading).

Encoding, measured on cubins from nvJitLink 13.0 and matching LLVM's
``llvm/BinaryFormat/ELF.h``: ``e_machine`` is EM_CUDA (190) and
``e_ident[EI_OSABI]`` is 0x41 (ELFOSABI_CUDA). The SM number (major*10+minor,
e.g. 90 = 0x5a) sits in ``e_flags`` at a place that depends on
``e_ident[EI_ABIVERSION]``:

* ABI version 8 (``ELFABIVERSION_CUDA_V2``; what CUDA 13 emits for every SM):
  bits 8-15 (``EF_CUDA_SM_MASK = 0xff00``), ``EF_CUDA_ACCELERATORS = 0x8``
  marks ``sm_XYa``. Seen: sm_75 0x06004b04, sm_80 0x06005004,
  sm_87 0x06005704, sm_90 0x06005a04, sm_100 0x06006402, sm_120 0x06007802.
* ABI version 7 and older (``ELFABIVERSION_CUDA_V1``; CUDA 12 and earlier):
  the low byte (``EF_CUDA_SM = 0xff``), with the virtual (PTX) SM in bits
  16-23.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

EM_CUDA = 190
ELFOSABI_CUDA = 0x41


@dataclass(frozen=True)
class CubinHeader:
    abi_version: int
    e_flags: int
    sm: int  # e.g. 90

    @property
    def capability(self) -> str:
        return "sm_%d" % self.sm


def read_cubin_header(data: bytes) -> CubinHeader:
    """Parse the ELF64 header of a cubin; ValueError if it is not one."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    osabi, abi_version = data[7], data[8]
    (e_machine,) = struct.unpack_from("<H", data, 18)
    (e_flags,) = struct.unpack_from("<I", data, 48)
    if e_machine != EM_CUDA:
        raise ValueError("ELF e_machine is %d, not EM_CUDA (190)" % e_machine)
    if osabi != ELFOSABI_CUDA:
        raise ValueError("ELF OS/ABI is 0x%x, not CUDA (0x41)" % osabi)
    if abi_version >= 8:
        sm = (e_flags >> 8) & 0xFF
    else:
        sm = e_flags & 0xFF
    return CubinHeader(abi_version=abi_version, e_flags=e_flags, sm=sm)
