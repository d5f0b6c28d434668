"""The safe reader: regular files only, a size limit, a nesting limit, one-line errors."""

from __future__ import annotations

import json
import os

import pytest

from gpu_spec.safe_read import (
    MAX_JSON_DEPTH,
    FileReadError,
    load_json_file,
    loads_json,
    read_regular_file,
)


def test_reads_a_regular_file(tmp_path):
    p = tmp_path / "f.json"
    p.write_text(json.dumps({"a": [1, {"b": "[[[{{{"}]}))
    assert load_json_file(p, 1000) == {"a": [1, {"b": "[[[{{{"}]}


def test_refuses_a_fifo_without_blocking(tmp_path):
    p = tmp_path / "fifo"
    os.mkfifo(p)
    with pytest.raises(FileReadError, match=r"fifo: the signature is a FIFO, not a regular file"):
        read_regular_file(p, 100, "signature")


def test_refuses_a_directory_and_a_device(tmp_path):
    with pytest.raises(FileReadError, match="is a directory"):
        read_regular_file(tmp_path, 100)
    with pytest.raises(FileReadError, match="is a character device"):
        read_regular_file("/dev/zero", 100)


def test_refuses_a_file_over_its_limit(tmp_path):
    p = tmp_path / "big"
    p.write_bytes(b"x" * 101)
    with pytest.raises(FileReadError, match="is 101 bytes, over the limit of 100"):
        read_regular_file(p, 100)
    assert read_regular_file(p, 101) == b"x" * 101


def test_missing_file_is_an_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "nope", 100)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_refuses_deep_nesting_in_one_line(depth):
    for text in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth):
        with pytest.raises(FileReadError) as e:
            loads_json(text.encode(), "m.json")
        assert str(e.value).startswith("m.json: JSON nested deeper than")
        assert "\n" not in str(e.value)


def test_nesting_at_the_limit_and_brackets_in_strings_pass():
    depth = MAX_JSON_DEPTH
    assert loads_json("[" * depth + "]" * depth, "m") == eval("[" * depth + "]" * depth)
    text = json.dumps({"s": "[" * 1000 + '\\"{' * 500})
    assert loads_json(text, "m") == json.loads(text)
