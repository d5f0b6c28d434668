"""How the compiler's failure report names the capabilities it failed for, and how the plugin
reads them back: one line format for both sides of the process boundary.

`python -m gpu_compiler compile` starts each failure it writes to stderr with the capabilities
it is for, e.g. `sm_80, sm_90: src/k.py:10: error: ...`; the plugin names those in its error.
"""

from __future__ import annotations

import re
from typing import Sequence, Tuple

_SEPARATOR = ", "
_FAILED_FOR = re.compile(r"^(sm_\d+(?:, sm_\d+)*): ", re.MULTILINE)


def failure_line(capabilities: Sequence[str], message: str) -> str:
    """One failure of the report: `message` prefixed by the capabilities it is for."""
    return f"{_SEPARATOR.join(capabilities)}: {message}"


def failed_capabilities(capabilities: Sequence[str], report: str) -> Tuple[str, ...]:
    """The capabilities `report` names as failed, in the order of `capabilities`; all of them
    when it names none (a crash rather than a compile error)."""
    named = {c for m in _FAILED_FOR.finditer(report) for c in m.group(1).split(_SEPARATOR)}
    failed = tuple(c for c in capabilities if c in named)
    return failed or tuple(capabilities)
