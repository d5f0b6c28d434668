"""Parsing nvJitLink's verbose info log (pure), and one real compile (skipped without the
CUDA wheels) of a kernel with `__constant__` memory and a shared tile."""

from __future__ import annotations

import os

import pytest

from gpu_compiler.resources import RESOURCE_KEYS, parse_info_log, resources_for

try:
    import cuda.bindings.nvrtc  # noqa: F401
    import cuda.core  # noqa: F401

    _SKIP_REASON = None
except Exception as e:  # pragma: no cover - depends on the environment
    _SKIP_REASON = "CUDA Python wheels not importable: %s" % (e,)

REPO_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)

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
        "const_bytes": 0,
    }


def test_two_entries():
    all_ = parse_info_log(TWO_LOG)
    assert all_["a"] == {
        "registers": 64,
        "shared_bytes": 1296,
        "local_bytes": 0,
        "spill_stores": 0,
        "spill_loads": 0,
        "const_bytes": 48,  # cmem[2] on its own lines
    }
    assert all_["b"]["const_bytes"] == 0
    assert all_["b"]["registers"] == 12 and all_["b"]["shared_bytes"] == 2048


def test_unknown_entry_is_zeros():
    assert resources_for("", "nope") == {k: 0 for k in RESOURCE_KEYS}


# Captured from nvJitLink 13.0.88 (cuda.core Linker, verbose) linking nvcc 13.0's PTX of
# testdata/constant_tile.cu for sm_90: ptxas lists no cmem, nvJitLink's module line lists the
# module's `__constant__` bank; the 18x18 float tile's 1296 bytes are 2320 with the 1 KiB
# reserved region nvJitLink's figure (the cubin's shared section) holds on sm_90.
CONST_LOG_SM90 = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'nothing' for 'sm_90'
ptxas info    : Function properties for nothing
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compiling entry function 'tile' for 'sm_90'
ptxas info    : Function properties for tile
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 1 barriers, 1296 bytes smem
info    : 0 bytes gmem, 320 bytes cmem[3]
info    : Function properties for 'tile':
info    : used 14 registers, used 1 barriers, 0 stack, 2320 bytes smem, 548 bytes cmem[0], 0 bytes lmem
info    : Function properties for 'nothing':
info    : used 10 registers, used 0 barriers, 0 stack, 0 bytes smem, 536 bytes cmem[0], 0 bytes lmem
"""

# The same for sm_75: ptxas lists the module's cmem[3] too, and the shared figure has no reserve.
CONST_LOG_SM75 = """ptxas info    : 0 bytes gmem, 320 bytes cmem[3]
ptxas info    : Compiling entry function 'tile' for 'sm_75'
ptxas info    : Function properties for tile
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 11 registers, used 1 barriers, 1296 bytes smem, 372 bytes cmem[0]
info    : 0 bytes gmem, 320 bytes cmem[3]
info    : Function properties for 'tile':
info    : used 11 registers, used 1 barriers, 0 stack, 1296 bytes smem, 372 bytes cmem[0], 0 bytes lmem
"""


# Captured from nvJitLink 12.6.85 (the cuda12 toolchain) linking matmul.cu's two matmul_ld
# kernels for sm_87: nvJitLink's own lines carry an `@O@` prefix, and ptxas lists no smem (the
# tiles are placed at link time), so the shared figures are only on the prefixed lines.
LOG_CUDA12 = """@O@info    : 0 bytes gmem
@O@info    : Function properties for '_Z9matmul_ldIdLi16EEvPKT_iS2_iPS0_iiiiS0_':
@O@info    : used 38 registers, used 1 barriers, 0 stack, 4096 bytes smem, 416 bytes cmem[0], 0 bytes lmem
@O@info    : Function properties for '_Z9matmul_ldIfLi16EEvPKT_iS2_iPS0_iiiiS0_':
@O@info    : used 36 registers, used 1 barriers, 0 stack, 3072 bytes smem, 412 bytes cmem[0], 0 bytes lmem
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z9matmul_ldIfLi16EEvPKT_iS2_iPS0_iiiiS0_' for 'sm_87'
ptxas info    : Function properties for _Z9matmul_ldIfLi16EEvPKT_iS2_iPS0_iiiiS0_
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 36 registers, used 1 barriers, 412 bytes cmem[0]
ptxas info    : Compiling entry function '_Z9matmul_ldIdLi16EEvPKT_iS2_iPS0_iiiiS0_' for 'sm_87'
ptxas info    : Function properties for _Z9matmul_ldIdLi16EEvPKT_iS2_iPS0_iiiiS0_
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 38 registers, used 1 barriers, 416 bytes cmem[0]
"""


def test_cuda12_nvjitlink_lines_with_their_channel_prefix_are_read():
    got = parse_info_log(LOG_CUDA12)
    assert got["_Z9matmul_ldIfLi16EEvPKT_iS2_iPS0_iiiiS0_"]["shared_bytes"] == 3072
    assert got["_Z9matmul_ldIdLi16EEvPKT_iS2_iPS0_iiiiS0_"] == {
        "registers": 38,
        "shared_bytes": 4096,
        "local_bytes": 0,
        "spill_stores": 0,
        "spill_loads": 0,
        "const_bytes": 0,
    }


def test_user_constant_memory_is_the_modules_for_every_kernel():
    got = parse_info_log(CONST_LOG_SM90)
    assert got["tile"]["const_bytes"] == 320 and got["nothing"]["const_bytes"] == 320
    assert got["tile"]["shared_bytes"] == 2320 and got["nothing"]["shared_bytes"] == 0
    # cmem[0] (the parameters) is never counted.
    assert resources_for(CONST_LOG_SM75, "tile") == {
        "registers": 11,
        "shared_bytes": 1296,
        "local_bytes": 0,
        "spill_stores": 0,
        "spill_loads": 0,
        "const_bytes": 320,  # nvJitLink's module line wins over ptxas' (not both)
    }


def test_ptxas_module_lines_count_where_nvjitlink_gives_none():
    ptxas_only = "\n".join(x for x in CONST_LOG_SM75.splitlines() if x.startswith("ptxas"))
    assert resources_for(ptxas_only, "tile")["const_bytes"] == 320
    assert resources_for(SPILL_LOG, "KERN")["const_bytes"] == 0  # `16 bytes gmem`, no cmem


@pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or "")
@pytest.mark.parametrize(
    "cap, section", [("sm_75", 1296), ("sm_80", 1296), ("sm_87", 1296), ("sm_90", 2320)]
)
def test_a_real_compile_records_constant_and_shared_bytes(
    monkeypatch, cubin_differences, cap, section
):
    from gpu_compiler.compile import CompileOptions, compile_source

    monkeypatch.chdir(REPO_ROOT)
    r = compile_source("src/python/gpu_compiler/testdata/constant_tile.cu", cap, CompileOptions())
    got = {k.name: k.resources for m in r.modules for k in m.kernels}
    assert set(got) == {"tile", "nothing"}
    assert set(got["tile"]) == set(RESOURCE_KEYS)
    # Every kernel of the module may read its 320 bytes of `__constant__`.
    assert got["tile"]["const_bytes"] == 320 and got["nothing"]["const_bytes"] == 320
    # The 18x18 float tile, as the driver gives it on every capability; nvJitLink's log counts
    # the 1 KiB reserved window an sm_90 cubin lays out in the section too.
    assert got["tile"]["shared_bytes"] == 1296 and got["nothing"]["shared_bytes"] == 0
    logged = {n: f for m in r.modules for n, f in parse_info_log(m.link_log).items()}
    assert logged["tile"]["shared_bytes"] == section
    # And each figure is what the cubin itself says (what the driver's cuFuncGetAttribute reads).
    assert cubin_differences(r) == []
