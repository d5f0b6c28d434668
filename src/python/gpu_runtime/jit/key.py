"""The JIT cache key: everything that decides the bytes of one compile, and nothing else.

In: the key schema, the source path, every input file's sha256 (the closure Pants resolved,
`gpu_runtime.jit.sources`), the compile flags, the capability, and the compiler's fingerprint
(toolchain versions and the sha256 of its code). Never a modification time, a directory scan or
an absolute path: the same inputs give the same key on any machine and in any checkout.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

JIT_KEY_SCHEMA = 1


def jit_key(
    *,
    source: str,
    files: Mapping[str, str],
    flags: Sequence[str],
    capability: str,
    fingerprint: Mapping[str, Any],
) -> str:
    blob = json.dumps(
        {
            "schema": JIT_KEY_SCHEMA,
            "source": source,
            "files": sorted(files.items()),
            "flags": list(flags),
            "capability": capability,
            "compiler": fingerprint,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()
