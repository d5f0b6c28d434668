"""Checking decoded JSON: every problem collected, so that one error lists them all."""

from __future__ import annotations

import json
import re
from typing import Any, List, Mapping, Optional, Pattern, Tuple

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# A library (gpu_kernel target) name: one safe path component.
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


class Checker:
    """Collects every problem so that one error lists them all."""

    def __init__(self) -> None:
        self.errors: List[str] = []

    def err(self, where: str, msg: str) -> None:
        self.errors.append(f"{where}: {msg}" if where else msg)

    def get(
        self,
        obj: Mapping[str, Any],
        key: str,
        types: Any,
        where: str,
        optional: bool = False,
        nullable: bool = False,
        default: Any = None,
    ) -> Any:
        path = f"{where}.{key}" if where else key
        if key not in obj:
            if not optional:
                self.err(path, "missing")
            return default
        val = obj[key]
        if val is None and nullable:
            return None
        # bool is an int subclass: never accept it where a number is meant.
        if not isinstance(val, types) or (isinstance(val, bool) and bool not in as_tuple(types)):
            self.err(
                path,
                f"expected {type_names(types)}{' or null' if nullable else ''}, "
                f"got {type(val).__name__} {short(val)}",
            )
            return default
        return val

    def string(
        self,
        obj: Mapping[str, Any],
        key: str,
        where: str,
        pattern: Optional[Pattern[str]] = None,
        what: str = "",
        nullable: bool = False,
        optional: bool = False,
    ) -> Optional[str]:
        val = self.get(obj, key, str, where, nullable=nullable, optional=optional)
        if isinstance(val, str):
            if not val and not nullable:
                self.err(f"{where}.{key}", "empty string")
            elif pattern is not None and not pattern.match(val):
                self.err(f"{where}.{key}", f"{short(val)} is not {what or 'valid'}")
        return val


def as_tuple(types: Any) -> Tuple[Any, ...]:
    return types if isinstance(types, tuple) else (types,)


def type_names(types: Any) -> str:
    names = {
        dict: "object",
        list: "array",
        str: "string",
        int: "integer",
        float: "number",
        bool: "boolean",
    }
    return " or ".join(names.get(t, t.__name__) for t in as_tuple(types))


def short(val: Any) -> str:
    """`val` as JSON, cut to 60 characters (a huge value is not serialised whole first)."""
    if isinstance(val, (str, bytes, bytearray)) and len(val) > 60:
        val = val[:60]
    elif isinstance(val, (list, dict)) and len(val) > 8:
        val = val[:8] if isinstance(val, list) else dict(list(val.items())[:8])
    text = json.dumps(val) if not isinstance(val, (bytes, bytearray)) else repr(val)
    return text if len(text) <= 60 else text[:57] + "..."
