"""One lowering for several capabilities gives the bytes of one lowering per capability.

In this process: a plain kernel, one calling a helper device function of another module (with
`lineinfo`), several signatures (with `fast_math`), each compiled for sm_75, sm_87 and sm_90
inside `shared_lowering()` and outside it: PTX, cubin and kernel entries must be equal, and
inside it each (kernel, signature) must have been lowered once. Kernels whose device functions
live in numba's own modules (numba.cuda.random, cooperative groups) are compared across
processes, as the CLI runs them, in cli_test.py: numba keeps those functions compiled across
compiles of one process, which changes their ids for a later compile in the same process.
"""

from __future__ import annotations

import os

import pytest

try:
    import numba.cuda  # noqa: F401

    _SKIP = None
except Exception as e:  # pragma: no cover - depends on the environment
    _SKIP = "numba-cuda not importable: %s" % (e,)

pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

from gpu_compiler.compile import CompileOptions, compile_source  # noqa: E402
from gpu_compiler.numba import shared_lowering as numba_shared_lowering  # noqa: E402

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
CAPABILITIES = ("sm_75", "sm_87", "sm_90")
KERNELS = "src/python/imaging/kernels/"
SOURCES = [
    (KERNELS + "saxpy.py", CompileOptions(sys_path=("src/python",))),
    (KERNELS + "blur.py", CompileOptions(sys_path=("src/python",), lineinfo=True)),
    (KERNELS + "histogram.py", CompileOptions(sys_path=("src/python",), fast_math=True)),
]


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(os.path.abspath(REPO_ROOT))


def outputs(source: str, options: CompileOptions) -> dict:
    found = {}
    for capability in CAPABILITIES:
        for m in compile_source(source, capability, options).modules:
            entries = [k.entry for k in m.kernels]
            found[(capability, m.name)] = (m.ptx, m.cubin, entries, [str(p) for p in m.parts])
    return found


@pytest.mark.parametrize("source,options", SOURCES, ids=[os.path.basename(s) for s, _ in SOURCES])
def test_one_lowering_for_several_capabilities_gives_the_same_bytes(source, options, monkeypatch):
    import numba.cuda.compiler as compiler

    lowerings = []
    real = compiler._compile_pyfunc_with_fixup  # type: ignore[attr-defined]

    def counted(pyfunc, sig, **kwargs):
        lowerings.append((pyfunc.__qualname__, str(sig), kwargs["cc"]))
        return real(pyfunc, sig, **kwargs)

    monkeypatch.setattr(compiler, "_compile_pyfunc_with_fixup", counted)
    apart = outputs(source, options)
    assert len(lowerings) == len(apart)  # one per (capability, module)
    lowerings.clear()
    with numba_shared_lowering.shared_lowering():
        assert numba_shared_lowering.active()
        shared = outputs(source, options)
    assert shared.keys() == apart.keys()
    for key, (ptx, cubin, entries, parts) in apart.items():
        assert shared[key][0] == ptx, key
        assert shared[key][1] == cubin, key
        assert shared[key][2:] == (entries, parts), key
    # each (kernel, signature) was lowered once, for the first capability asked for
    assert len(lowerings) == len(apart) // len(CAPABILITIES)
    assert {cc for _, _, cc in lowerings} == {(7, 5)}


def test_capabilities_below_7_5_lower_on_their_own() -> None:
    # numba-cuda 0.30.4 lowers atomics differently below 6.0 and tanh below 7.5
    classes = {cc: numba_shared_lowering.lowering_class(cc) for cc in [(5, 0), (6, 1), (7, 5)]}
    assert len(set(classes.values())) == 3
    assert {numba_shared_lowering.lowering_class(cc) for cc in [(7, 5), (8, 7), (12, 1)]} == {2}


def test_nothing_is_shared_outside_the_block() -> None:
    assert not numba_shared_lowering.active()
