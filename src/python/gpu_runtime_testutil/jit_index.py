"""JIT index entries as the plugin generates them, and the stand-in compiler
(`gpu_runtime_testutil.stand_in_compiler`) as a `Compiler`: for the JIT tests and probes."""

from __future__ import annotations

import json
import os
import sys
from typing import Dict

from gpu_runtime.jit.compiler import Compiler
from gpu_spec.jit_index import JIT_INDEX_SCHEMA, entry_paths

SAXPY_SRC = "src/python/imaging/kernels/saxpy.py"
HELPER = "src/python/imaging/kernels/pkg/helpers/h.py"
SOBEL_SRC = "src/python/imaging/kernels/sobel.cu"
HEADER = "src/python/imaging/kernels/sub/val.cuh"


def write_index(base: str, library: str, source: str, files: Dict[str, bytes], flags=()) -> str:
    """What the plugin generates for one gpu_kernel under `base` (a sys.path entry)."""
    import hashlib

    slug = f"src.python.imaging.kernels.{library}"
    index, files_dir = entry_paths("", slug)
    root = os.path.join(base, files_dir)
    for path, content in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(content)
    entry = {
        "schema": JIT_INDEX_SCHEMA,
        "library": library,
        "target": f"src/python/imaging/kernels:{library}",
        "toolchain": "cuda13",
        "capabilities": ["sm_90"],
        "source": source,
        "source_root": "src/python",
        "flags": ["--sys-path", "src/python", *flags],
        "files": {p: hashlib.sha256(c).hexdigest() for p, c in files.items()},
    }
    with open(os.path.join(base, index), "w") as f:
        json.dump(entry, f)
    return root


def fake_compiler() -> Compiler:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    return Compiler(
        (sys.executable, "-m", "gpu_runtime_testutil.stand_in_compiler"), env, "fake compiler"
    )
