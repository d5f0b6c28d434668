from __future__ import annotations

import argparse

import pytest

from gpu_spec.compile.options import FLAGS, CompileOptions

EVERY = CompileOptions(
    fast_math=True,
    lineinfo=True,
    max_registers=64,
    ptx_version="8.5",
    defines=("TILE=16", "-I/etc"),  # a value that starts with `-` stays a define
    include_dirs=("src/include", "-x"),
    name_expressions=("matmul<float, 16>",),
    sys_path=("src/python", "lib"),
)


def parsed(argv: tuple) -> CompileOptions:
    parser = argparse.ArgumentParser()
    CompileOptions.add_arguments(parser)
    return CompileOptions.from_arguments(parser.parse_args(list(argv)))


@pytest.mark.parametrize("options", [CompileOptions(), EVERY, CompileOptions(max_registers=1)])
def test_the_flags_argv_writes_read_back_as_the_same_options(options: CompileOptions) -> None:
    assert parsed(options.argv()) == options


def test_every_field_but_the_sandbox_is_a_flag() -> None:
    fields = set(CompileOptions.__dataclass_fields__)
    assert {flag.name for flag in FLAGS} == fields - {"sandbox_root"}


def test_lists_are_held_as_tuples_and_recorded_as_lists() -> None:
    options = CompileOptions(defines=["A"], include_dirs=["inc"])  # type: ignore[arg-type]
    assert options.defines == ("A",) and hash(options)
    assert options.metadata() == {
        "fast_math": False,
        "lineinfo": False,
        "max_registers": None,
        "ptx_version": None,
        "defines": ["A"],
        "include_dirs": ["inc"],
        "name_expressions": [],
    }


def test_a_bad_register_cap_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        parsed(("--max-registers", "0"))


def test_cuda_only_options_and_a_linked_part_s_options() -> None:
    assert EVERY.cuda_only_set() == ["defines", "name_expressions"]
    assert CompileOptions(include_dirs=("i",)).cuda_only_set() == []
    part = EVERY.for_linked_part(["inc"])
    assert part == CompileOptions(fast_math=True, lineinfo=True, include_dirs=("inc",))
