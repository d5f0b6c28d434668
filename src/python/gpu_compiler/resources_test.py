"""Tests for parsing nvJitLink's verbose info log (pure)."""

from __future__ import annotations

from gpu_compiler.resources import RESOURCE_KEYS, parse_info_log, resources_for

# Captured from nvJitLink 13.0 (blur kernel, sm_90, max_register_count=16).
SPILL_LOG = """ptxas warning : For profile sm_90 adjusting per thread register count of 16 to lower bound of 24
ptxas info    : Overriding maximum register limit 256 for 'KERN' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'KERN' for 'sm_90'
ptxas info    : Function properties for KERN
ptxas         .     88 bytes stack frame, 88 bytes spill stores, 108 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers
ptxas info    : Compile time = 18.997 ms
info    : 16 bytes gmem
info    : Function properties for 'KERN':
info    : used 24 registers, used 1 barriers, 88 stack, 2320 bytes smem, 672 bytes cmem[0], 0 bytes lmem
"""

# Two entries, sm_75 style (cmem listed on the ptxas line).
TWO_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a' for 'sm_75'
ptxas info    : Function properties for a
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 496 bytes cmem[0], 48 bytes cmem[2]
ptxas info    : Compiling entry function 'b' for 'sm_75'
ptxas info    : Function properties for b
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 2048 bytes smem, 368 bytes cmem[0]
info    : Function properties for 'a':
info    : used 64 registers, used 1 barriers, 0 stack, 1296 bytes smem, 496 bytes cmem[0], 48 bytes cmem[2], 0 bytes lmem
info    : Function properties for 'b':
info    : used 12 registers, 0 stack, 2048 bytes smem, 368 bytes cmem[0], 0 bytes lmem
"""


def test_spills():
    r = resources_for(SPILL_LOG, "KERN")
    assert r == {
        "registers": 24,
        "shared_bytes": 2320,
        "local_bytes": 88,
        "spill_stores": 88,
        "spill_loads": 108,
    }


def test_two_entries():
    all_ = parse_info_log(TWO_LOG)
    assert all_["a"] == {
        "registers": 64,
        "shared_bytes": 1296,
        "local_bytes": 0,
        "spill_stores": 0,
        "spill_loads": 0,
    }
    assert all_["b"]["registers"] == 12 and all_["b"]["shared_bytes"] == 2048


def test_unknown_entry_is_zeros():
    assert resources_for("", "nope") == {k: 0 for k in RESOURCE_KEYS}
