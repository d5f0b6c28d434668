"""The include and import parsers, without the engine: what each reference may resolve to."""

from __future__ import annotations

from textwrap import dedent
from typing import Optional

import pytest

from gpu_build.dependency_inference.references import (
    Reference,
    include_candidates,
    parse_imports,
    parse_includes,
    strip_c_comments,
)


def test_strip_c_comments_keeps_lines_and_strings() -> None:
    text = "a // b\n/* c\nd */ e\n\"x // y\" '/'\n"
    stripped = strip_c_comments(text)
    assert stripped.splitlines() == ["a     ", "    ", "     e", "\"x // y\" '/'"]


def test_parse_includes() -> None:
    text = dedent(
        """\
        #include "sub/val.cuh"
          #  include <tile.cuh>
        // #include "commented.cuh"
        /* #include "blocked.cuh"
        */
        #include <cuda_fp16.h>
        #include "skipped.cuh"  // pants: no-infer-dep
        const char* s = "#include \\"in_string.cuh\\"";
        #include "../../../outside.cuh"
        """
    )
    refs = parse_includes("src/k/k.cu", text, ["src/inc"])
    assert refs == (
        Reference(
            "src/k/k.cu", 1, '"sub/val.cuh"', ("src/k/sub/val.cuh", "src/inc/sub/val.cuh"), True
        ),
        Reference("src/k/k.cu", 2, "<tile.cuh>", ("src/inc/tile.cuh",), False),
        Reference("src/k/k.cu", 6, "<cuda_fp16.h>", ("src/inc/cuda_fp16.h",), False),
        Reference("src/k/k.cu", 9, '"../../../outside.cuh"', (), True),
    )


def test_include_candidates() -> None:
    # Quoted: the including file's directory, then each -I dir (deduplicated, normalized).
    assert include_candidates("a/b/h.cuh", "x.cuh", quoted=True, include_dirs=["a/b", "c"]) == (
        "a/b/x.cuh",
        "c/x.cuh",
    )
    # Angle: the -I dirs only; nothing outside the repository.
    assert include_candidates("a/h.cuh", "../../x.cuh", quoted=False, include_dirs=["a", "."]) == ()
    assert include_candidates("a/h.cuh", "x.cuh", quoted=False, include_dirs=[]) == ()


def imports(text: str) -> list[tuple[int, str, tuple[str, ...], bool, Optional[str]]]:
    """The references of `text` in src/python/imaging/kernels/k.py, candidates relative to the
    source root with `.py` dropped (`pkg/m/__init__`)."""
    refs = parse_imports("src/python/imaging/kernels/k.py", dedent(text), "src/python")

    def short(path: str) -> str:
        assert path.startswith("src/python/") and path.endswith(".py"), path
        return path[len("src/python/") : -len(".py")]

    return [
        (r.lineno, r.text, tuple(map(short, r.candidates)), r.expect_owner, r.top_level)
        for r in refs
    ]


KPKG = "imaging/kernels"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("import numba", [(1, "numba", ("numba/__init__", "numba"), False, "numba")]),
        (
            "import pkg.sub.mod, os",
            [
                (1, "os", ("os/__init__", "os"), False, "os"),
                (1, "pkg.sub.mod", ("pkg/sub/mod/__init__", "pkg/sub/mod"), False, "pkg"),
            ],
        ),
        (
            # A submodule first, then a name in the package.
            "from pkg.helpers import h",
            [
                (
                    1,
                    "pkg.helpers.h",
                    (
                        "pkg/helpers/h/__init__",
                        "pkg/helpers/h",
                        "pkg/helpers/__init__",
                        "pkg/helpers",
                    ),
                    False,
                    "pkg",
                )
            ],
        ),
        (
            "from . import _near",
            [
                (
                    1,
                    "imaging.kernels._near",
                    (f"{KPKG}/_near/__init__", f"{KPKG}/_near", f"{KPKG}/__init__", KPKG),
                    True,
                    None,
                )
            ],
        ),
        (
            "from ._other import x",
            [
                (
                    1,
                    "imaging.kernels._other.x",
                    (f"{KPKG}/_other/x/__init__", f"{KPKG}/_other/x")
                    + (f"{KPKG}/_other/__init__", f"{KPKG}/_other"),
                    True,
                    None,
                )
            ],
        ),
        (
            "from .. import up",
            [
                (
                    1,
                    "imaging.up",
                    ("imaging/up/__init__", "imaging/up", "imaging/__init__", "imaging"),
                    True,
                    None,
                )
            ],
        ),
        (
            "from .sub import *",
            [(1, "imaging.kernels.sub", (f"{KPKG}/sub/__init__", f"{KPKG}/sub"), True, None)],
        ),
        ("import pkg.skipped  # pants: no-infer-dep", []),
        ("from pkg import (\n    a,  # pants: no-infer-dep\n)", []),
        # Imports anywhere count, also inside functions.
        (
            "def f():\n    import pkg.late",
            [(2, "pkg.late", ("pkg/late/__init__", "pkg/late"), False, "pkg")],
        ),
    ],
)
def test_parse_imports(text: str, expected: list) -> None:
    assert imports(text) == expected


def test_parse_imports_beyond_top_level_and_syntax_errors() -> None:
    # `from .. import x` in a top-level package's module goes beyond it: Python refuses it.
    assert parse_imports("src/pkg/m.py", "from .. import x\n", "src") == ()
    assert parse_imports("src/m.py", "from . import x\n", "src") == ()
    assert parse_imports("src/m.py", "def (:\n", "src") == ()


def test_link_files_of_a_numba_source() -> None:
    from gpu_build.dependency_inference.references import parse_links

    text = (
        "import os\n"
        'functions_cu = os.path.join(basedir, "ffi", "functions.cu")\n'
        'mul = cuda.declare_device("m", "float32(float32)", link="parts/mul.ptx")\n'
        'skip = "other.cu"  # pants: no-infer-dep\n'
    )
    refs = parse_links("src/k/kern.py", text)
    assert [(r.lineno, r.text, r.candidates) for r in refs] == [
        (2, '"ffi/functions.cu"', ("src/k/ffi/functions.cu", "ffi/functions.cu")),
        (3, '"parts/mul.ptx"', ("src/k/parts/mul.ptx", "parts/mul.ptx")),
    ]
    assert all(r.expect_owner for r in refs)
