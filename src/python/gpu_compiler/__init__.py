"""Ahead-of-time GPU kernel compiler (numba-cuda ``.py`` and CUDA C++ ``.cu``).

Runs as a hermetic process inside a pinned toolchain PEX (``python -m
gpu_compiler compile ...``) and is also imported by the runtime for its JIT
development path (``gpu_compiler.compile.compile_source``).

The rules it shares with the plugin and the runtime (capabilities, PTX ISA,
the metadata schema) are `gpu_spec`'s. numba and the CUDA bindings are
imported only by the backends, and only when a compile actually runs.
"""

from __future__ import annotations

from gpu_compiler.errors import CompileError

__all__ = ["CompileError"]
