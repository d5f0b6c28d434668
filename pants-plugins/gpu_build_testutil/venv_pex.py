"""A `VenvPex` value for the pure tests of a process built from one: nothing is built."""

from __future__ import annotations

from pathlib import PurePath

from pants.backend.python.util_rules.pex import Script, VenvPex
from pants.engine.fs import Digest
from pants.util.frozendict import FrozenDict


def fake_venv_pex(filename: str) -> VenvPex:
    """The VenvPex Pants would give for a PEX named `filename` (its shims beside it)."""
    return VenvPex(
        digest=Digest("1" * 64, 100),
        append_only_caches=None,
        pex_filename=filename,
        pex=Script(PurePath(f"{filename}_pex_shim.sh")),
        python=Script(PurePath(f"{filename}_python_shim.sh")),
        bin=FrozenDict(),
        venv_rel_dir="venvs/abc",
    )
