"""gpu_spec.resources.cubin on a small ELF laid out as a CUDA 13 cubin is (the compiler's tests
check it on real cubins of every example kernel and capability:
src/python/gpu_compiler/compile_test.py)."""

from __future__ import annotations

import struct
from typing import List, Tuple

import pytest

from gpu_spec.resources.cubin import CubinFormatError, CubinKernel, differences, kernel_resources


def _elf(sections: List[Tuple[str, bytes, int]]) -> bytes:
    """An ELF64 with the given (name, contents, entry size) sections after the null one, and
    `.shstrtab` last."""
    names = b"\0"
    offsets = []
    for name, _, _ in sections + [(".shstrtab", b"", 0)]:
        offsets.append(len(names))
        names += name.encode() + b"\0"
    body = b""
    placed = []
    for (_, data, entsize), name_at in zip(sections + [(".shstrtab", names, 0)], offsets):
        placed.append((name_at, 64 + len(body), len(data), entsize))
        body += data
    shoff = 64 + len(body)
    header = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    header += struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 0, 0)
    header = header[:0x3A] + struct.pack("<HHH", 64, len(placed) + 1, len(placed))
    table = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    for name_at, offset, size, entsize in placed:
        table += struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, offset, size, 0, 0, 0, entsize)
    return header + body + table


def _cubin(reserved_window: bool = False) -> bytes:
    """Two kernels, `tile` (an 18x18 float tile, a launch bound of 256 x 1 x 1) and `nothing`;
    with `reserved_window`, laid out as an sm_90 cubin is: the `.nv.reservedSmem.offset0`
    symbol, and the 1 KiB window at the start of the tile's shared section."""
    strings = b"\0tile\0nothing\0.nv.reservedSmem.offset0\0"
    names = (1, 6, 14) if reserved_window else (1, 6)
    symtab = b"\0" * 24 + b"".join(struct.pack("<IBBHQQ", at, 0x12, 0, 0, 0, 0) for at in names)
    info = b"".join(
        struct.pack("<BBHII", 0x04, attr, 8, symbol, value)
        for attr, symbol, value in ((0x11, 1, 16), (0x2F, 1, 14), (0x2F, 2, 10), (0x12, 2, 24))
    ) + struct.pack(
        "<BBH", 0x03, 0x1B, 255
    )  # a u16 record (EIATTR_MAXREG_COUNT) is skipped
    tile_info = (
        struct.pack("<BBH", 0x01, 0x35, 0)  # a no-value record: 4 bytes like the others
        + struct.pack("<BBHIII", 0x04, 0x05, 12, 256, 1, 1)  # EIATTR_MAX_THREADS
        + struct.pack("<BBH", 0x03, 0x19, 0x90)
    )
    return _elf(
        [
            (".strtab", strings, 0),
            (".symtab", symtab, 24),
            (".nv.info", info, 0),
            (".nv.info.tile", tile_info, 0),
            (".nv.shared.tile", b"\0" * (2320 if reserved_window else 1296), 0),
            (".nv.constant3", b"\0" * 320, 0),
            (".nv.constant0.tile", b"\0" * 548, 0),
        ]
    )


def test_each_kernel_s_figures_from_its_records_and_sections():
    assert kernel_resources(_cubin()) == {
        # local: the frame where no stack record is given
        "tile": CubinKernel(
            registers=14,
            shared_bytes=1296,
            local_bytes=16,
            const_bytes=320,
            frame_bytes=16,
            launch_bound_threads=256,
            shared_section_bytes=1296,
        ),
        # no shared section: 0; no frame of its own but a callee's 24 (the stack record);
        # bank 0 (the parameters) never counts; no launch bound: 0
        "nothing": CubinKernel(
            registers=10, shared_bytes=0, local_bytes=24, const_bytes=320, frame_bytes=0
        ),
    }


def test_the_reserved_window_of_an_sm_90_cubin_is_not_the_kernel_s_shared_memory():
    # What the driver's SHARED_SIZE_BYTES gives for such a kernel on an sm_90 GPU: 1296.
    got = kernel_resources(_cubin(reserved_window=True))
    assert (got["tile"].shared_bytes, got["tile"].shared_section_bytes) == (1296, 2320)
    assert got["nothing"].shared_bytes == 0


def test_differences_name_the_kernel_the_figure_and_both_values():
    agree = {
        "registers": 14,
        "shared_bytes": 1296,
        "local_bytes": 16,
        "const_bytes": 320,
        "launch_bound_threads": 256,
    }
    assert differences(_cubin(), {"tile": dict(agree, spill_stores=8)}) == []
    assert differences(_cubin(), {"tile": dict(agree, registers=15), "gone": {}}) == [
        "tile: registers recorded 15, cubin 14",
        "gone: no such kernel in the cubin",
    ]
    # An older manifest's record without const_bytes is compared on what it has.
    assert differences(_cubin(), {"nothing": {"registers": 10}}) == []


@pytest.mark.parametrize(
    "data", [b"", b"PTX .version 9.0", b"\x7fELF\x01\x01" + b"\0" * 58, _cubin()[:80]]
)
def test_what_is_not_a_whole_cubin_is_refused(data):
    with pytest.raises(CubinFormatError):
        kernel_resources(data)
