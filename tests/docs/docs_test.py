"""README.md and docs/*.md: links and repo paths that resolve.

- Every relative markdown link resolves to an existing file, and its `#anchor` to a heading of
  the target page (GitHub's slug rules: lower case, punctuation dropped, spaces to hyphens, a
  repeated slug numbered -1, -2, ...).
- Every repo path a page names in backticks (inline code starting with src/, pants-plugins/,
  tests/, 3rdparty/, .ci/ or docs/) exists. A Pants address (`dir:target`, `dir::`) names its
  directory. Paths with placeholders (`<...>`, `*`, `{...}`) are not checked, nor anything under
  dist/ or made by a build, nor text inside fenced code blocks.
- Snippet markers (`<!-- file: PATH -->`, `<!-- commands: PLACE -->`, read by
  gpu_build_testutil.doc_snippets, which tests build repos and run commands from) are each
  followed by a fenced block, give each file once, and a file's path is named in backticks in
  the text above its block, so a reader on GitHub (which hides the marker) sees which file it is.
  Those files are the page's example repo, not this one: the repo-path check skips them and the
  directories they are in.

- docs/runtime-api.md names every name of `gpu_runtime.__all__` and has a heading for every
  exception class defined under src/python/gpu_runtime (found by parsing the sources with `ast`,
  so a new exception without docs fails here).
- Every fragment docs/troubleshooting.md quotes in its message column (inline code, split on
  `<...>` placeholders and `...`) occurs in a string literal of the .py files under src/ and
  pants-plugins/, so the page cannot drift from what the tools print.

The pages come from the sandbox (the `//:docs` files target, so an edit reruns this test); the
paths they name are looked up in the live checkout, $GPU_BUILD_REPO_ROOT, falling back to the
sandbox. The sources are read from both: the sandbox has the non-test sources (files targets,
so an edit there reruns this test), the live checkout also the tests.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
from pathlib import Path
from typing import Iterable, Iterator

from gpu_build_testutil import doc_snippets

REPO_PREFIXES = ("src/", "pants-plugins/", "tests/", "3rdparty/", ".ci/", "docs/")
PLACEHOLDER = re.compile(r"[<>*{}\[\]$]")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    out, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match:
            if fence is None:
                fence = match.group(1)
            elif match.group(1) == fence:
                fence = None
            continue
        if fence is None:
            out.append((number, line))
    return out


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading (before numbering duplicates)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for _, line in _prose_lines(text):
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def link_errors(page: Path, text: str) -> list[str]:
    """Relative links of `page` (its text) whose file or #anchor does not exist."""
    errors = []
    for number, line in _prose_lines(text):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part) if path_part else page
            where = f"{page.name}:{number}: {target}"
            if not resolved.exists():
                errors.append(f"{where}: no such file {resolved}")
                continue
            if anchor and resolved.suffix == ".md":
                if anchor not in anchors(resolved.read_text(encoding="utf-8")):
                    errors.append(f"{where}: no heading #{anchor} in {resolved.name}")
    return errors


def example_paths(text: str) -> set[str]:
    """The files a page gives whole (its snippet markers) and the directories they are in: paths
    of the page's example repo."""
    paths: set[str] = set()
    for name in doc_snippets.files(text):
        parts = name.split("/")
        paths.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return paths


def repo_path_errors(page: Path, text: str, repo_root: Path) -> list[str]:
    """Repo paths `page` names in inline code that do not exist under `repo_root` (the page's
    example files and their directories aside)."""
    errors = []
    examples = example_paths(text)
    for number, line in _prose_lines(text):
        for _, span in CODE_SPAN.findall(line):
            span = span.strip()
            if not span.startswith(REPO_PREFIXES) or PLACEHOLDER.search(span):
                continue
            for token in span.split():
                if not token.startswith(REPO_PREFIXES) or PLACEHOLDER.search(token):
                    continue
                path = token.rstrip(",;.)").split(":", 1)[0]  # an address names its directory
                if path.rstrip("/") in examples:
                    continue
                if not (repo_root / path).exists():
                    errors.append(f"{page.name}:{number}: `{token}`: no {path} in {repo_root}")
    return errors


def snippet_errors(page: Path, text: str) -> list[str]:
    """Malformed snippet markers, and file snippets whose path the text above them never names."""
    try:
        found = doc_snippets.snippets(text, page.name)
    except doc_snippets.SnippetError as e:
        return [str(e)]
    lines = text.splitlines()
    errors = []
    end_of_previous = 0
    for snippet in found:
        above = lines[end_of_previous : snippet.line - 1]
        if snippet.kind == "file" and f"`{snippet.name}`" not in "\n".join(above):
            errors.append(
                f"{page.name}:{snippet.line}: the block of {snippet.name} has no `{snippet.name}` "
                "in the text above it (GitHub does not show the marker)"
            )
        end_of_previous = snippet.line + 1 + len(snippet.text.splitlines()) + 1
    return errors


def _sandbox() -> Path:
    return Path.cwd()


def _repo_root() -> Path:
    live = os.environ.get("GPU_BUILD_REPO_ROOT")
    if live and Path(live, "README.md").is_file():
        return Path(live)
    return _sandbox()


def _pages() -> list[Path]:
    root = _sandbox()
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    assert pages[0].is_file() and len(pages) > 1, f"README.md and docs/*.md not in {root}"
    return pages


def test_links_resolve() -> None:
    errors = [e for page in _pages() for e in link_errors(page, page.read_text(encoding="utf-8"))]
    assert not errors, "broken links:\n" + "\n".join(errors)


def test_repo_paths_exist() -> None:
    root = _repo_root()
    errors = [
        e
        for page in _pages()
        for e in repo_path_errors(page, page.read_text(encoding="utf-8"), root)
    ]
    assert not errors, "missing repo paths:\n" + "\n".join(errors)


def test_snippet_markers() -> None:
    errors = [
        e for page in _pages() for e in snippet_errors(page, page.read_text(encoding="utf-8"))
    ]
    assert not errors, "snippet markers:\n" + "\n".join(errors)
    getting_started = _sandbox() / "docs" / "getting-started.md"
    assert "pants.toml" in doc_snippets.files(getting_started.read_text(encoding="utf-8"))


def test_there_is_something_to_check() -> None:
    """Not vacuous: the pages have links and repo paths, and the patterns find them."""
    texts = [page.read_text(encoding="utf-8") for page in _pages()]
    links = [t for text in texts for _, line in _prose_lines(text) for t in LINK.findall(line)]
    spans = [
        span
        for text in texts
        for _, line in _prose_lines(text)
        for _, span in CODE_SPAN.findall(line)
        if span.strip().startswith(REPO_PREFIXES)
    ]
    assert len(links) >= 30 and len(spans) >= 30, (len(links), len(spans))


def test_every_docs_page_links_back_to_the_readme() -> None:
    for page in _pages()[1:]:
        head = page.read_text(encoding="utf-8").splitlines()[:4]
        assert any("](../README.md)" in line for line in head), page.name


def test_github_slugs() -> None:
    assert github_slug("`gpu_kernel`") == "gpu_kernel"
    assert github_slug("Toolchains, drivers and PTX") == "toolchains-drivers-and-ptx"
    assert github_slug("Dependencies: inferred from `#include`s and imports") == (
        "dependencies-inferred-from-includes-and-imports"
    )
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_the_checker_catches_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "src").mkdir()
    other = tmp_path / "docs" / "other.md"
    other.write_text("# Other page\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    text = (
        "# Page\n\n"
        "[ok](other.md#a-section) [ok](#page) [ok](https://example.com/x.md) `src/`\n"
        "[gone](missing.md) [bad anchor](other.md#no-such-section) `src/nowhere.py`\n"
        "```\n[in a code block](missing-too.md) `src/not/checked.py`\n```\n"
        "`[not a link](missing-three.md)` `dist/not/checked` `src/<placeholder>/x.py`\n"
    )
    page.write_text(text, encoding="utf-8")
    links = link_errors(page, text)
    assert len(links) == 2, links
    assert "missing.md" in links[0] and "no such file" in links[0]
    assert "#no-such-section" in links[1]
    paths = repo_path_errors(page, text, tmp_path)
    assert len(paths) == 1 and "src/nowhere.py" in paths[0], paths


def test_the_snippet_checker_catches_what_is_broken(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    good = (
        "`src/app/BUILD`:\n\n<!-- file: src/app/BUILD -->\n```python\nx = 1\n```\n\n"
        "<!-- commands: here -->\n```bash\n./pants package ::  # a comment\n# only a comment\n```\n"
        "`src/app/BUILD` and `src/app` are the example's, not looked up here\n"
    )
    assert snippet_errors(page, good) == []
    assert doc_snippets.files(good) == {"src/app/BUILD": "x = 1\n"}
    assert doc_snippets.commands(good, "here") == ["./pants package ::  # a comment"]
    assert repo_path_errors(page, good, tmp_path) == []
    unnamed = good.replace("`src/app/BUILD`:", "The app's BUILD:")
    assert len(snippet_errors(page, unnamed)) == 1
    for broken in (
        "<!-- file: a -->\n\n```\nx\n```\n",  # a blank line between marker and block
        "`a`\n<!-- file: a -->\n```\nx\n",  # never closed
        "<!-- file: ../a -->\n```\nx\n```\n",  # out of the example repo
        "<!-- files: a -->\n```\nx\n```\n",  # a typo
        "`a`\n<!-- file: a -->\n```\nx\n```\n<!-- file: a -->\n```\ny\n```\n",  # twice
    ):
        errors = snippet_errors(page, broken)
        assert len(errors) == 1 and "page.md:" in errors[0], (broken, errors)


# -- docs/runtime-api.md: every public name and exception of gpu_runtime ----------------------

RUNTIME = "src/python/gpu_runtime"
SOURCE_TREES = ("src", "pants-plugins")


def _python_files(root: Path, tree: str, tests: bool = False) -> Iterator[Path]:
    for path in sorted((root / tree).rglob("*.py")):
        if tests or not (path.name.endswith("_test.py") or path.name == "conftest.py"):
            yield path


def public_names(init_source: str) -> list[str]:
    """`__all__` of a module's source, read without importing it (no numpy needed)."""
    for node in ast.parse(init_source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError("no __all__ assignment")


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def exception_classes(sources: Iterable[str]) -> set[str]:
    """The public classes these sources define that derive, directly or through each other,
    from a built-in exception."""
    bases: dict[str, set[str]] = {}
    for text in sources:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(_base_name(b) for b in node.bases)
    found: set[str] = set()
    while True:
        more = {
            name
            for name, of in bases.items()
            if name not in found
            and any(
                b in found
                or (
                    isinstance(getattr(builtins, b, None), type)
                    and issubclass(getattr(builtins, b), BaseException)
                )
                for b in of
            )
        }
        if not more:
            return {name for name in found if not name.startswith("_")}
        found |= more


def _runtime_sources() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in _python_files(_sandbox(), RUNTIME)]


def test_runtime_api_page_names_every_public_name_and_exception() -> None:
    page = (_sandbox() / "docs" / "runtime-api.md").read_text(encoding="utf-8")
    spans = [span for _, line in _prose_lines(page) for _, span in CODE_SPAN.findall(line)]
    named = {word for span in spans for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}
    init = (_sandbox() / RUNTIME / "__init__.py").read_text(encoding="utf-8")
    missing = [name for name in public_names(init) if name not in named]
    assert not missing, f"gpu_runtime.__all__ names not in docs/runtime-api.md: {missing}"
    matches = (HEADING.match(line) for _, line in _prose_lines(page))
    headings = {m.group(2) for m in matches if m}
    undocumented = sorted(
        name for name in exception_classes(_runtime_sources()) if f"`{name}`" not in headings
    )
    assert not undocumented, (
        "exceptions of gpu_runtime with no `### `Name`` section in docs/runtime-api.md: "
        f"{undocumented}"
    )


def test_the_exception_finder_finds_them() -> None:
    found = exception_classes(_runtime_sources())
    for name in ("GpuRuntimeError", "IncompleteBundleError", "JitCacheError", "StaleIndexError"):
        assert name in found, name
    assert "UnsupportedPlatform" in found and "_Uncached" not in found
    assert "KernelCache" not in found and len(found) >= 17, sorted(found)
    source = "class A(ValueError): pass\nclass B(A): pass\nclass C(object): pass\nclass _D(B): pass"
    assert exception_classes([source]) == {"A", "B"}
    assert public_names("x = 1\n__all__ = ['a', 'b']\n") == ["a", "b"]


# -- docs/troubleshooting.md: the messages it quotes occur in the sources ----------------------

MESSAGE_PLACEHOLDER = re.compile(r"<[^<>]*>|\.\.\.|…")
# Quoted messages that this repo does not print (Pants' own), checked by nobody here.
NOT_OURS = ("Failed to read from remote cache",)


def _squash(text: str) -> str:
    return " ".join(text.split())


def string_literals(source: str) -> Iterator[str]:
    """Each string literal of a module (implicit concatenations joined, as the parser does; an
    f-string's formatted fields as a NUL), whitespace squashed (softwrap'd messages); and each
    class name, so that a row may name the exception it is about."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield _squash(node.value)
        elif isinstance(node, ast.JoinedStr):
            yield _squash(
                "".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values)
            )


def quoted_pieces(span: str) -> list[str]:
    """The literal pieces of a quoted message: split on placeholders, with the quotes a `!r`
    field adds and the spaces around them stripped."""
    pieces = (p.strip().strip("'\"").strip() for p in MESSAGE_PLACEHOLDER.split(span))
    return [_squash(p) for p in pieces if p]


def message_spans(text: str) -> list[tuple[int, str]]:
    """(line, inline code) of the message column (the first cell) of a table's rows."""
    out: list[tuple[int, str]] = []
    for number, line in _prose_lines(text):
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cell = line.split("|")[1]
        if cell.strip() == "message":
            continue
        out.extend((number, span.strip()) for _, span in CODE_SPAN.findall(cell))
    return out


def _literal_corpus() -> str:
    seen: set[str] = set()
    literals: list[str] = []
    for root in {_sandbox(), _repo_root()}:
        for tree in SOURCE_TREES:
            for path in _python_files(root, tree, tests=True):
                relative = str(path.relative_to(root))
                if relative in seen:
                    continue
                seen.add(relative)
                literals.extend(string_literals(path.read_text(encoding="utf-8")))
    return "\n".join(literals)


def quote_errors(text: str, corpus: str) -> list[str]:
    errors = []
    for number, span in message_spans(text):
        if span.startswith(NOT_OURS):
            continue
        for piece in quoted_pieces(span):
            if piece not in corpus:
                errors.append(f"troubleshooting.md:{number}: `{span}`: {piece!r} is in no source")
    return errors


def test_troubleshooting_quotes_what_the_code_prints() -> None:
    text = (_sandbox() / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    spans = message_spans(text)
    assert len(spans) >= 40, len(spans)
    errors = quote_errors(text, _literal_corpus())
    assert not errors, "messages the code no longer prints:\n" + "\n".join(errors)


def test_the_quote_checker_catches_drift() -> None:
    assert quoted_pieces("bundle <name> (<where>) is incomplete: <n> of ...") == [
        "bundle",
        "(",
        ") is incomplete:",
        "of",
    ]
    source = (
        'x = f"bundle {b!r} ({w}) is incomplete: {n} of "  f"{t} files"\n'
        'y = softwrap(f"""\n    The deploy_bundle {a} has\n    no kernels\n""")\n'
    )
    corpus = "\n".join(string_literals(source))
    page = (
        "| message | x |\n|---|---|\n"
        "| `bundle <b> (<w>) is incomplete: <n> of <t> files` | `not checked` |\n"
        "| `The deploy_bundle <a> has no kernels` | |\n"
        "| `bundle <b> is complete` | |\n"
        "| `Failed to read from remote cache ... refused` | |\n"
    )
    errors = quote_errors(page, corpus)
    assert len(errors) == 1 and "'is complete'" in errors[0], errors


def test_the_gpu_kernel_page_shows_every_kernel_form() -> None:
    """`pants help gpu_kernel` sends users here for the signature forms the compiler takes."""
    text = (_sandbox() / "docs" / "gpu_kernel.md").read_text(encoding="utf-8")
    for form in (
        '@cuda.jit("void(float32[::1], float32, float32[::1], float32[::1])")',  # eager string
        '@cuda.jit(["void(uint8[::1], uint32[::1])", "void(uint8[:], uint32[::1])"])',  # a list
        "types.CPointer(types.uint8)",
        "xoroshiro128p_type[::1]",
        "AOT_SIGNATURES = {",
        "cuda.declare_device",
        "name_expressions",
    ):
        assert form in text, form
