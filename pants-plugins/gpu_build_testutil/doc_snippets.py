"""The marked snippets of a docs page: the files and commands a test takes from the page as written.

A marker is an HTML comment on its own line (GitHub does not render it), directly followed by a
fenced code block:

    <!-- file: 3rdparty/python/BUILD -->       the block is that file of the page's example repo,
                                               whole (a path relative to the repo's root)
    <!-- commands: your repo -->               the block's lines are commands, run in that place
                                               in page order (blank and `#` lines skipped)

The page names each file in its text too (for readers); tests/docs checks that the markers are
well formed. Standard library only: the plugin's tests (CPython 3.9) and tests/docs import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

MARKER = re.compile(r"^<!--\s*(?P<kind>file|commands):\s*(?P<name>\S(?:.*\S)?)\s*-->\s*$")
# A marker-like comment that does not parse (a typo would silently drop a snippet).
LOOSE_MARKER = re.compile(r"^\s*<!--\s*(file|command)", re.IGNORECASE)
FENCE_OPEN = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<info>[^`]*)$")


class SnippetError(ValueError):
    """A page whose markers cannot be read as snippets."""


@dataclass(frozen=True)
class Snippet:
    kind: str  # "file" or "commands"
    name: str  # the file's path, or where the commands run
    text: str  # the block's content, ending in a newline
    line: int  # the marker's line number (1-based)
    info: str  # the fence's info string ("toml", "python", "bash", ...)

    def commands(self) -> list[str]:
        """The block's command lines: not blank, not a `#` comment."""
        return [s for s in (ln.strip() for ln in self.text.splitlines()) if s and s[0] != "#"]


def snippets(text: str, page: str = "page") -> list[Snippet]:
    """Every marked snippet of a page, in page order; SnippetError on a malformed one."""
    lines = text.splitlines()
    found: list[Snippet] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        match = MARKER.match(line)
        if match is None:
            if LOOSE_MARKER.match(line):
                raise SnippetError(f"{page}:{i + 1}: not a snippet marker: {line.strip()!r}")
            i += 1
            continue
        kind, name = match.group("kind"), match.group("name")
        where = f"{page}:{i + 1}"
        if i + 1 >= len(lines) or not FENCE_OPEN.match(lines[i + 1]):
            raise SnippetError(
                f"{where}: the {kind} marker {name!r} is not followed by a ``` block"
            )
        opening = FENCE_OPEN.match(lines[i + 1])
        assert opening is not None
        fence = opening.group("fence")
        body: list[str] = []
        j = i + 2
        while j < len(lines) and not (
            lines[j].startswith(fence[0] * len(fence)) and not lines[j].strip(fence[0]).strip()
        ):
            body.append(lines[j])
            j += 1
        if j >= len(lines):
            raise SnippetError(f"{where}: the block of {kind} {name!r} is never closed")
        if kind == "file":
            path = PurePosixPath(name)
            if path.is_absolute() or ".." in path.parts or str(path) != name:
                raise SnippetError(f"{where}: {name!r} is not a plain relative path")
        found.append(Snippet(kind, name, "\n".join(body) + "\n", i + 1, opening.group("info")))
        i = j + 1
    files = [s.name for s in found if s.kind == "file"]
    twice = sorted({f for f in files if files.count(f) > 1})
    if twice:
        raise SnippetError(f"{page}: files given more than once: {twice}")
    return found


def files(text: str, page: str = "page") -> dict[str, str]:
    """{path: content} of the page's file snippets."""
    return {s.name: s.text for s in snippets(text, page) if s.kind == "file"}


def commands(text: str, place: str, page: str = "page") -> list[str]:
    """The command lines of the page's `commands: <place>` blocks, in page order."""
    return [
        c
        for s in snippets(text, page)
        if s.kind == "commands" and s.name == place
        for c in s.commands()
    ]
