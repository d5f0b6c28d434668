"""Dependency inference of `gpu_kernel` through the engine: real BUILD files, real owners.

Each test writes a small repository and asks for the kernel's whole `dependencies` (explicit,
inferred, ignores applied), which is what `pants dependencies` prints and what the compile's
sandbox is built from.
"""

from __future__ import annotations

import logging
from textwrap import dedent

import pytest
from pants.backend.python import target_types_rules
from pants.backend.python.target_types import PythonSourcesGeneratorTarget, PythonSourceTarget
from pants.core.target_types import FilesGeneratorTarget, FileTarget
from pants.engine.addresses import Address, Addresses
from pants.engine.internals.scheduler import ExecutionError
from pants.engine.target import Dependencies, DependenciesRequest
from pants.testutil.rule_runner import QueryRule, RuleRunner

from gpu_build.dependency_inference import rules as dependency_inference
from gpu_build.target_types import GpuKernelTarget

ROOT = "src/python"
K = f"{ROOT}/k"


@pytest.fixture
def rule_runner() -> RuleRunner:
    runner = RuleRunner(
        rules=[
            *dependency_inference.rules(),
            *target_types_rules.rules(),
            QueryRule(Addresses, [DependenciesRequest]),
        ],
        target_types=[
            GpuKernelTarget,
            FileTarget,
            FilesGeneratorTarget,
            PythonSourceTarget,
            PythonSourcesGeneratorTarget,
        ],
    )
    runner.set_options([f"--source-root-patterns=['/{ROOT}']"])
    return runner


def dependencies(rule_runner: RuleRunner, name: str = "k", spec_path: str = K) -> list[str]:
    tgt = rule_runner.get_target(Address(spec_path, target_name=name))
    addresses = rule_runner.request(Addresses, [DependenciesRequest(tgt[Dependencies])])
    return sorted(a.spec for a in addresses)


def test_cuda_includes_subdirectory_transitive_and_include_dirs(rule_runner: RuleRunner) -> None:
    rule_runner.write_files(
        {
            f"{K}/k.cu": dedent(
                """\
                #include "sub/val.cuh"
                #include <tile.cuh>
                #include <cuda_fp16.h>
                // #include "commented_out.cuh"
                extern "C" __global__ void k() {}
                """
            ),
            f"{K}/sub/val.cuh": '#pragma once\n#include "inner.cuh"\n',
            f"{K}/sub/inner.cuh": "#pragma once\n",
            f"{K}/sub/BUILD": 'files(name="sub_headers", sources=["*.cuh"])\n',
            # Found through include_dirs; it includes a sibling with a quoted include.
            f"{ROOT}/inc/tile.cuh": '#include "tile_impl.cuh"\n',
            f"{ROOT}/inc/tile_impl.cuh": "\n",
            f"{ROOT}/inc/BUILD": 'files(name="inc_headers", sources=["*.cuh"])\n',
            f"{K}/BUILD": 'gpu_kernel(name="k", source="k.cu", include_dirs=["../inc"])\n',
        }
    )
    assert dependencies(rule_runner) == [
        f"{ROOT}/inc/tile.cuh:inc_headers",
        f"{ROOT}/inc/tile_impl.cuh:inc_headers",
        f"{K}/sub/inner.cuh:sub_headers",
        f"{K}/sub/val.cuh:sub_headers",
    ]


def test_quoted_include_prefers_the_including_files_directory(rule_runner: RuleRunner) -> None:
    # Both `k/h.cuh` and `inc/h.cuh` exist: NVRTC reads the one beside the source.
    rule_runner.write_files(
        {
            f"{K}/k.cu": '#include "h.cuh"\n',
            f"{K}/h.cuh": "\n",
            f"{ROOT}/inc/h.cuh": "\n",
            f"{ROOT}/inc/BUILD": 'files(name="inc_headers", sources=["*.cuh"])\n',
            f"{K}/BUILD": dedent(
                """\
                gpu_kernel(name="k", source="k.cu", include_dirs=["../inc"])
                files(name="headers", sources=["*.cuh"])
                """
            ),
        }
    )
    assert dependencies(rule_runner) == [f"{K}/h.cuh:headers"]


def test_python_imports(rule_runner: RuleRunner) -> None:
    rule_runner.write_files(
        {
            f"{K}/k.py": dedent(
                """\
                import math
                import numpy as np
                from numba import cuda
                from pkg.helpers import h
                import pkg.sub.mod
                from . import _near
                from ._other import x
                """
            ),
            f"{K}/_near.py": "\n",
            # A helper of a helper: `files` infer nothing, so the kernel's rule follows it.
            f"{K}/_other.py": "from ._deeper import y\n",
            f"{K}/_deeper.py": "import numba\n",
            f"{ROOT}/pkg/helpers.py": "def h(): pass\n",
            f"{ROOT}/pkg/sub/mod.py": "\n",
            f"{ROOT}/pkg/BUILD": "python_sources(name='lib')\n",
            f"{ROOT}/pkg/sub/BUILD": "python_sources(name='lib')\n",
            f"{K}/BUILD": dedent(
                """\
                gpu_kernel(name="k", source="k.py")
                files(name="helpers", sources=["_*.py"])
                """
            ),
        }
    )
    assert dependencies(rule_runner) == [
        f"{K}/_deeper.py:helpers",
        f"{K}/_near.py:helpers",
        f"{K}/_other.py:helpers",
        f"{ROOT}/pkg/helpers.py:lib",
        f"{ROOT}/pkg/sub/mod.py:lib",
    ]


def test_python_package_init(rule_runner: RuleRunner) -> None:
    # `from pkg import helper` where `helper` is a name in pkg/__init__.py.
    rule_runner.write_files(
        {
            f"{K}/k.py": "from pkg import helper\n",
            f"{ROOT}/pkg/__init__.py": "def helper(): pass\n",
            f"{ROOT}/pkg/BUILD": "files(name='lib', sources=['*.py'])\n",
            f"{K}/BUILD": 'gpu_kernel(name="k", source="k.py")\n',
        }
    )
    assert dependencies(rule_runner) == [f"{ROOT}/pkg/__init__.py:lib"]


def test_unowned_references_warn(rule_runner: RuleRunner, caplog) -> None:
    rule_runner.write_files(
        {
            f"{K}/k.cu": dedent(
                """\
                #include "missing.cuh"
                #include "unowned.cuh"
                #include <cuda_runtime.h>
                #include "generated.cuh"  // pants: no-infer-dep
                #include <unowned_angle.cuh>
                """
            ),
            f"{K}/unowned.cuh": "\n",
            f"{K}/unowned_angle.cuh": "\n",
            f"{K}/k.py": dedent(
                """\
                import numba
                from pkg import gone
                from . import _absent
                """
            ),
            f"{ROOT}/pkg/present.py": "\n",
            f"{K}/BUILD": dedent(
                """\
                gpu_kernel(name="cu", source="k.cu", include_dirs=["."])
                gpu_kernel(name="py", source="k.py")
                """
            ),
        }
    )
    with caplog.at_level(logging.WARNING):
        assert dependencies(rule_runner, "cu") == []
        assert dependencies(rule_runner, "py") == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    cu, py = sorted(warnings, key=lambda w: f"{K}:py" in w)
    assert f"target {K}:cu" in cu
    assert f'"missing.cuh" ({K}/k.cu, line 1): searched {K}/missing.cuh' in cu
    assert f'"unowned.cuh" ({K}/k.cu, line 2): {K}/unowned.cuh exists, but no target owns' in cu
    assert f"<unowned_angle.cuh> ({K}/k.cu, line 5): {K}/unowned_angle.cuh exists" in cu
    assert "cuda_runtime" not in cu and "generated" not in cu
    assert "pants: no-infer-dep" in cu and "files(" in cu
    assert f"target {K}:py" in py
    # `pkg` is first-party (src/python/pkg/ exists), numba is not.
    assert f"pkg.gone ({K}/k.py, line 2): searched {ROOT}/pkg/gone/__init__.py" in py
    assert f"k._absent ({K}/k.py, line 3)" in py
    assert "numba" not in py


def test_unowned_references_can_fail_the_build(rule_runner: RuleRunner) -> None:
    rule_runner.write_files(
        {
            f"{K}/k.cu": '#include "missing.cuh"\n',
            f"{K}/BUILD": 'gpu_kernel(name="k", source="k.cu")\n',
        }
    )
    rule_runner.set_options(
        [
            f"--source-root-patterns=['/{ROOT}']",
            "--gpu-toolchains-unowned-dependency-behavior=error",
        ]
    )
    with pytest.raises(ExecutionError, match=r'"missing\.cuh" \(src/python/k/k\.cu, line 1\)'):
        dependencies(rule_runner)


AMBIGUOUS = {
    f"{K}/k.cu": '#include "h.cuh"\n',
    f"{K}/h.cuh": '#include "only_here.cuh"\n',
    f"{K}/only_here.cuh": "\n",
}


def ambiguous_build(kernel_dependencies: str) -> str:
    return dedent(
        f"""\
        gpu_kernel(name="k", source="k.cu", dependencies={kernel_dependencies})
        files(name="a", sources=["h.cuh", "only_here.cuh"])
        files(name="b", sources=["h.cuh"])
        """
    )


def test_ambiguous_owner_warns_and_is_skipped(rule_runner: RuleRunner, caplog) -> None:
    rule_runner.write_files({**AMBIGUOUS, f"{K}/BUILD": ambiguous_build("[]")})
    with caplog.at_level(logging.WARNING):
        assert dependencies(rule_runner) == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f'The target {K}:k refers to "h.cuh" ({K}/k.cu, line 1)' in warnings[0]
    assert f"['{K}/h.cuh:a', '{K}/h.cuh:b']" in warnings[0]


def test_ambiguous_owner_disambiguated_by_ignore(rule_runner: RuleRunner, caplog) -> None:
    rule_runner.write_files({**AMBIGUOUS, f"{K}/BUILD": ambiguous_build('["!:b"]')})
    with caplog.at_level(logging.WARNING):
        # The file left after the ignore is followed: its own include is inferred too.
        assert dependencies(rule_runner) == [f"{K}/h.cuh:a", f"{K}/only_here.cuh:a"]
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_explicit_dependency_covers_ambiguity(rule_runner: RuleRunner, caplog) -> None:
    rule_runner.write_files({**AMBIGUOUS, f"{K}/BUILD": ambiguous_build('[":b"]')})
    with caplog.at_level(logging.WARNING):
        assert dependencies(rule_runner) == [f"{K}/only_here.cuh:a", f"{K}:b"]
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_ignored_inferred_dependency(rule_runner: RuleRunner) -> None:
    rule_runner.write_files(
        {
            f"{K}/k.cu": '#include "h.cuh"\n',
            f"{K}/h.cuh": '#include "g.cuh"\n',
            f"{K}/g.cuh": "\n",
            f"{K}/BUILD": dedent(
                """\
                gpu_kernel(name="k", source="k.cu", dependencies=["!:h"])
                files(name="h", sources=["h.cuh"])
                files(name="g", sources=["g.cuh"])
                """
            ),
        }
    )
    # An ignored header is not in the sandbox, so what it includes is not followed either.
    assert dependencies(rule_runner) == []


# numba's docs, ex_extra_search_paths: the linked saxpy.cu finds <mul.cuh> and <add.cuh> through
# the directories the module puts in numba's CUDA_NVRTC_EXTRA_SEARCH_PATHS.
EXTRA_SEARCH_PATHS = {
    f"{K}/k.py": dedent(
        """\
        import os

        from numba import cuda
        from numba.cuda import config

        basedir = os.path.dirname(os.path.abspath(__file__))
        mul_dir = os.path.join(basedir, "ffi", "include")
        saxpy_cu = os.path.join(basedir, "ffi", "saxpy.cu")
        add_dir = os.path.join(basedir, "data", "include")
        includedir = ":".join([mul_dir, add_dir])
        config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = includedir
        sig = "float32(float32, float32, float32)"
        saxpy = cuda.declare_device("saxpy", sig=sig, link=saxpy_cu)
        """
    ),
    f"{K}/ffi/saxpy.cu": "#include <add.cuh>\n#include <mul.cuh>\n#include <cuda_fp16.h>\n",
    f"{K}/ffi/include/mul.cuh": "\n",
    f"{K}/data/include/add.cuh": "\n",
}


def test_numba_search_paths_find_the_headers_a_linked_cu_includes(
    rule_runner: RuleRunner, caplog
) -> None:
    rule_runner.write_files(
        {
            **EXTRA_SEARCH_PATHS,
            f"{K}/BUILD": dedent(
                """\
                gpu_kernel(name="k", source="k.py")
                files(name="cu", sources=["ffi/*.cu"])
                files(name="headers", sources=["ffi/include/*.cuh", "data/include/*.cuh"])
                """
            ),
        }
    )
    with caplog.at_level(logging.WARNING):
        assert dependencies(rule_runner) == [
            f"{K}/data/include/add.cuh:../../headers",
            f"{K}/ffi/include/mul.cuh:../../headers",
            f"{K}/ffi/saxpy.cu:../cu",
        ]
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]  # cuda_fp16.h: none


def test_include_dirs_of_a_numba_source_serve_the_cu_it_links(rule_runner: RuleRunner) -> None:
    without_config = EXTRA_SEARCH_PATHS[f"{K}/k.py"].replace(
        "config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = includedir\n", ""
    )
    rule_runner.write_files(
        {
            **EXTRA_SEARCH_PATHS,
            f"{K}/k.py": without_config,
            f"{K}/BUILD": dedent(
                """\
                gpu_kernel(name="k", source="k.py", include_dirs=["ffi/include"])
                files(name="cu", sources=["ffi/*.cu"])
                files(name="headers", sources=["ffi/include/*.cuh", "data/include/*.cuh"])
                """
            ),
        }
    )
    # add.cuh is in no directory searched: not inferred (the compile names it if it is needed).
    assert dependencies(rule_runner) == [
        f"{K}/ffi/include/mul.cuh:../../headers",
        f"{K}/ffi/saxpy.cu:../cu",
    ]


def test_a_search_path_header_with_two_owners_warns_and_is_skipped(
    rule_runner: RuleRunner, caplog
) -> None:
    rule_runner.write_files(
        {
            **EXTRA_SEARCH_PATHS,
            f"{K}/BUILD": dedent(
                """\
                gpu_kernel(name="k", source="k.py")
                files(name="cu", sources=["ffi/*.cu"])
                files(name="headers", sources=["ffi/include/*.cuh", "data/include/*.cuh"])
                files(name="more", sources=["data/include/*.cuh"])
                """
            ),
        }
    )
    with caplog.at_level(logging.WARNING):
        assert dependencies(rule_runner) == [
            f"{K}/ffi/include/mul.cuh:../../headers",
            f"{K}/ffi/saxpy.cu:../cu",
        ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"The target {K}:k refers to <add.cuh> ({K}/ffi/saxpy.cu, line 1)" in warnings[0]
    assert (
        f"['{K}/data/include/add.cuh:../../headers', '{K}/data/include/add.cuh:../../more']"
        in warnings[0]
    )
