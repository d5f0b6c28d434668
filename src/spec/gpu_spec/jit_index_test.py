"""JIT mode's index entries: where they go and what is refused."""

from __future__ import annotations

import pytest

from gpu_spec.errors import SpecError
from gpu_spec.jit_index import JIT_INDEX_SCHEMA, entry_paths, parse_jit_entry

SHA = "ab" * 32


def entry(**over):
    data = {
        "schema": JIT_INDEX_SCHEMA,
        "library": "saxpy",
        "target": "src/python/k:saxpy",
        "toolchain": "cuda13",
        "capabilities": ["sm_90"],
        "source": "src/python/k/saxpy.py",
        "source_root": "src/python",
        "flags": ["--sys-path", "src/python"],
        "files": {"src/python/k/saxpy.py": SHA},
    }
    data.update(over)
    return data


def test_paths_beside_the_source_roots_resources() -> None:
    assert entry_paths("src/python", "a.b") == (
        "src/python/__gpu_kernels__/a.b.json",
        "src/python/__gpu_kernels__/a.b",
    )
    assert entry_paths("", "a.b") == ("__gpu_kernels__/a.b.json", "__gpu_kernels__/a.b")


def test_a_good_entry_parses() -> None:
    assert parse_jit_entry(entry(), "x.json")["library"] == "saxpy"


@pytest.mark.parametrize(
    "over, problem",
    [
        ({"schema": 1}, "schema 1"),  # before source_root: an old export-codegen
        ({"source_root": None}, "'source_root' must be a string"),
        ({"source_root": "/abs"}, "absolute"),
        ({"files": {"/etc/passwd": SHA, "src/python/k/saxpy.py": SHA}}, "absolute"),
        ({"files": {"../x.py": SHA, "src/python/k/saxpy.py": SHA}}, "'..'"),
        ({"files": {"src/python/k/other.py": SHA}}, "not among 'files'"),
        ({"files": {"src/python/k/saxpy.py": "nothex"}}, "64 hex"),
        ({"flags": "--sys-path"}, "list of strings"),
        ({"library": "a/b"}, "not a valid name"),
    ],
)
def test_bad_entries_name_the_file_and_the_problem(over, problem) -> None:
    with pytest.raises(SpecError, match="x.json: invalid JIT index entry") as e:
        parse_jit_entry(entry(**over), "x.json")
    assert problem in str(e.value)
