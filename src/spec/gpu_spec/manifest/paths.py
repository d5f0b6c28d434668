"""Where a bundle's files sit under `cache/`, and which relative paths a manifest may name."""

from __future__ import annotations

import re
from typing import Optional


def check_relpath(path: object) -> Optional[str]:
    """Why `path` is not an acceptable cache-relative file path, or None if it is."""
    if not isinstance(path, str):
        return f"path must be a string, not {type(path).__name__}"
    if not path:
        return "path is empty"
    if "\x00" in path:
        return "path contains a NUL byte"
    if "\\" in path:
        return "path contains a backslash"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "path is absolute"
    for part in path.split("/"):
        if part == "..":
            return "path contains '..'"
        if part in ("", "."):
            return "path has an empty or '.' component"
    return None


def variant_dir(library: str, toolchain: str, capability: str) -> str:
    """Directory (relative to `cache/`) holding one library's files for one toolchain+capability."""
    return f"{library}/{toolchain}/{capability}"
