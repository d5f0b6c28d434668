"""The include and import parsers, without the engine: what each reference may resolve to."""

from __future__ import annotations

from textwrap import dedent

from gpu_build.kernel_references import (
    Reference,
    include_candidates,
    parse_imports,
    parse_includes,
    strip_c_comments,
)


def test_strip_c_comments_keeps_lines_and_strings() -> None:
    text = 'a // b\n/* c\nd */ e\n"x // y" \'/\'\n'
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
    assert include_candidates("a/h.cuh", "../../x.cuh", quoted=False, include_dirs=["a", "."]) == (
    )
    assert include_candidates("a/h.cuh", "x.cuh", quoted=False, include_dirs=[]) == ()


def test_parse_imports() -> None:
    text = dedent(
        """\
        import numba
        import pkg.sub.mod, os.path
        from numba import cuda, float32
        from pkg.helpers import h
        from . import _near
        from ._other import x, y
        from .. import up
        from .sub import *
        import pkg.skipped  # pants: no-infer-dep

        def f():
            from pkg import late
        """
    )
    refs = parse_imports("src/python/imaging/kernels/k.py", text, "src/python")
    root = "src/python"
    pkg = f"{root}/imaging/kernels"
    got = [(r.lineno, r.text, r.candidates, r.expect_owner, r.top_level) for r in refs]
    assert got == [
        (1, "numba", (f"{root}/numba/__init__.py", f"{root}/numba.py"), False, "numba"),
        (2, "os.path", (f"{root}/os/path/__init__.py", f"{root}/os/path.py"), False, "os"),
        (2, "pkg.sub.mod", (f"{root}/pkg/sub/mod/__init__.py", f"{root}/pkg/sub/mod.py"), False, "pkg"),
        (
            3,
            "numba.cuda",
            (f"{root}/numba/cuda/__init__.py", f"{root}/numba/cuda.py", f"{root}/numba/__init__.py", f"{root}/numba.py"),
            False,
            "numba",
        ),
        (
            3,
            "numba.float32",
            (f"{root}/numba/float32/__init__.py", f"{root}/numba/float32.py", f"{root}/numba/__init__.py", f"{root}/numba.py"),
            False,
            "numba",
        ),
        (
            4,
            "pkg.helpers.h",
            (f"{root}/pkg/helpers/h/__init__.py", f"{root}/pkg/helpers/h.py", f"{root}/pkg/helpers/__init__.py", f"{root}/pkg/helpers.py"),
            False,
            "pkg",
        ),
        (
            5,
            "imaging.kernels._near",
            (f"{pkg}/_near/__init__.py", f"{pkg}/_near.py", f"{pkg}/__init__.py", f"{pkg}.py"),
            True,
            None,
        ),
        (
            6,
            "imaging.kernels._other.x",
            (f"{pkg}/_other/x/__init__.py", f"{pkg}/_other/x.py", f"{pkg}/_other/__init__.py", f"{pkg}/_other.py"),
            True,
            None,
        ),
        (
            6,
            "imaging.kernels._other.y",
            (f"{pkg}/_other/y/__init__.py", f"{pkg}/_other/y.py", f"{pkg}/_other/__init__.py", f"{pkg}/_other.py"),
            True,
            None,
        ),
        (
            7,
            "imaging.up",
            (f"{root}/imaging/up/__init__.py", f"{root}/imaging/up.py", f"{root}/imaging/__init__.py", f"{root}/imaging.py"),
            True,
            None,
        ),
        (8, "imaging.kernels.sub", (f"{pkg}/sub/__init__.py", f"{pkg}/sub.py"), True, None),
        (12, "pkg.late", (f"{root}/pkg/late/__init__.py", f"{root}/pkg/late.py", f"{root}/pkg/__init__.py", f"{root}/pkg.py"), False, "pkg"),
    ]


def test_parse_imports_beyond_top_level_and_syntax_errors() -> None:
    # `from .. import x` in a top-level package's module goes beyond it: Python refuses it.
    assert parse_imports("src/pkg/m.py", "from .. import x\n", "src") == ()
    assert parse_imports("src/m.py", "from . import x\n", "src") == ()
    assert parse_imports("src/m.py", "def (:\n", "src") == ()
