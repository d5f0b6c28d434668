"""Ahead-of-time GPU kernel compiler (numba-cuda ``.py`` and CUDA C++ ``.cu``).

Runs as a hermetic process inside a pinned toolchain PEX (``python -m
gpu_compiler compile ...``) and is also imported by the runtime for its JIT
development path (``gpu_compiler.compile.compile_source``).

This package ``__init__`` and ``gpu_compiler.arch`` import nothing heavy: the
Pants plugin (CPython 3.9, no CUDA libraries) imports ``gpu_compiler.arch`` at
BUILD-parse time. numba and the CUDA bindings are imported only by the
backends, and only when a compile actually runs.
"""

from __future__ import annotations

from gpu_compiler.errors import CompileError

METADATA_SCHEMA = 1

__all__ = ["CompileError", "METADATA_SCHEMA"]
