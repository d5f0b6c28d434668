"""The compiler's `metadata.json`: what one compile (one source, one capability) produced.

gpu_compiler writes it beside the PTX and cubin files; the plugin and the runtime's development
cache read it to build a manifest (`gpu_spec.manifest.build`). Schema 1::

    {
      "schema": 1,
      "source": "src/python/imaging/kernels/saxpy.py",   # as given to the compiler (relative)
      "source_sha256": "<64 hex>",
      "language": "numba" | "cuda_cpp",
      "capability": "sm_90",
      "ptx_isa": "9.0",                    # `.version` of every module's PTX
      "min_driver": "13.0",                # min_driver_for_ptx(ptx_isa)
      "toolchain": {"cuda": "13.0", "numba-cuda": "0.30.4", ...},
      "options": {"fast_math": false, ...},
      "modules": [{"name": "saxpy__0", "ptx": "saxpy__0.ptx", "cubin": "saxpy__0.cubin",
                   "ptx_sha256": "<64 hex>", "cubin_sha256": "<64 hex>",
                   "ptx_link": ["libcudadevrt.a", "functions.ptx"],      # optional
                   "ptx_link_sha256": {"libcudadevrt.a": "<64 hex>", ...},  # with ptx_link
                   "kernels": [...]}]      # kernels as in the manifest (gpu_spec.manifest.model)

"ptx_link" names files of the compile output (beside the PTX) that the driver's linker must
link with the module's PTX to load it (see gpu_spec.manifest.model: PTX_LINK_KINDS); a module's
cubin is already linked with them. A file may be shared by several modules of one compile.
    }
"""

from __future__ import annotations

from typing import Optional, Tuple

METADATA_SCHEMA_VERSION = 1
METADATA_FILE = "metadata.json"

LANG_NUMBA = "numba"
LANG_CUDA = "cuda_cpp"
LANGUAGES = (LANG_NUMBA, LANG_CUDA)
# A kernel source's language is its file suffix's, and nothing else's: the target, the
# dependency inference, the compiler and its CLI all ask `language_of`.
SOURCE_SUFFIXES = {".py": LANG_NUMBA, ".cu": LANG_CUDA}


def language_of(path: str) -> Optional[str]:
    """LANG_NUMBA for a `.py` file, LANG_CUDA for a `.cu` one (any case), else None."""
    dot = path.rfind(".")
    if dot <= path.rfind("/"):
        return None
    return SOURCE_SUFFIXES.get(path[dot:].lower())


def suffixes_of(language: str) -> Tuple[str, ...]:
    return tuple(s for s, lang in SOURCE_SUFFIXES.items() if lang == language)


# How a kernel takes its arguments: numba's (arrays expanded to meminfo, parent, nitems, ...) or
# C's (each parameter as its PTX type).
ABIS = ("numba", "c")

REQUIRED_KEYS = (
    "source",
    "source_sha256",
    "language",
    "capability",
    "ptx_isa",
    "min_driver",
    "toolchain",
    "modules",
)
