from __future__ import annotations

from textwrap import dedent

from gpu_build.dependency_inference.search_paths import parse_search_paths

SRC = "src/python/k/k.py"


def paths(body: str) -> tuple[str, ...]:
    return parse_search_paths(SRC, dedent(body))


def test_the_docs_form() -> None:
    assert (
        paths(
            """\
        import os
        from numba.cuda import config

        basedir = os.path.dirname(os.path.abspath(__file__))
        mul_dir = os.path.join(basedir, "ffi", "include")
        add_dir = os.path.join(basedir, "data", "include")
        includedir = ":".join([mul_dir, add_dir])
        config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = includedir
        """
        )
        == ("src/python/k/ffi/include", "src/python/k/data/include")
    )


def test_pathlib_fstrings_pathsep_and_literals() -> None:
    assert (
        paths(
            """\
        import os
        from os.path import dirname
        from pathlib import Path
        import numba.cuda

        HERE = Path(__file__).resolve().parent
        numba.cuda.config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = os.pathsep.join(
            [str(HERE / "inc"), f"{dirname(__file__)}/more", "src/python/shared"]
        )
        """
        )
        == ("src/python/k/inc", "src/python/k/more", "src/python/shared")
    )


def test_outside_the_repository_or_not_evaluable_gives_nothing() -> None:
    assert (
        paths(
            """\
        import os
        from numba.cuda import config

        config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = "/usr/include:../../../../elsewhere"
        config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = find_headers()
        base = os.path.dirname(__file__)
        base = compute()  # rebound to something unknown: no longer known
        config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = os.path.join(base, "inc")
        """
        )
        == ()
    )
    assert paths("def broken(:\n") == ()
    assert paths("include = 'inc'\n") == ()  # no assignment to numba's setting
