"""Finding the bundle's cache/ directory."""

from __future__ import annotations

import os
import sys
from typing import List, Mapping, Optional, Tuple

from gpu_runtime.errors import CacheNotFoundError, UntrustedBundleError
from gpu_spec.bundle_files import SIGNATURE_NAME
from gpu_spec.manifest.model import MANIFEST_NAME

ENV_CACHE = "GPU_RUNTIME_CACHE"


def _as_cache_dir(path: str) -> str:
    """`path` may name the cache directory or its manifest.json."""
    if os.path.basename(path) == MANIFEST_NAME and os.path.isfile(path):
        return os.path.dirname(os.path.abspath(path))
    return os.path.abspath(path)


def candidate_locations(
    path: Optional[str] = None,
    environ: Optional[Mapping[str, str]] = None,
    argv0: Optional[str] = None,
) -> List[Tuple[str, str, bool]]:
    """Where to look, in order: [(how it was found, directory, explicit)].

    Explicit locations (the `path` argument, $GPU_RUNTIME_CACHE) must exist; the others are
    only candidates: `dirname($PEX)/cache` (pex sets $PEX to the running PEX file) and
    `dirname(sys.argv[0])/cache`.
    """
    env = os.environ if environ is None else environ
    if path is not None:
        return [("path argument", _as_cache_dir(os.fspath(path)), True)]
    if env.get(ENV_CACHE):
        return [(f"${ENV_CACHE}", _as_cache_dir(env[ENV_CACHE]), True)]
    out: List[Tuple[str, str, bool]] = []
    pex = env.get("PEX")
    if pex:
        out.append(
            (
                "beside the running PEX ($PEX)",
                os.path.join(os.path.dirname(os.path.abspath(pex)), "cache"),
                False,
            )
        )
    argv0 = sys.argv[0] if argv0 is None else argv0
    if argv0 and argv0 not in ("-c", "-m", "-"):
        d = os.path.join(os.path.dirname(os.path.abspath(argv0)), "cache")
        if all(d != o[1] for o in out):
            out.append(("beside sys.argv[0]", d, False))
    return out


def find_cache(
    path: Optional[str] = None,
    environ: Optional[Mapping[str, str]] = None,
    argv0: Optional[str] = None,
) -> Optional[str]:
    """The cache directory (holding manifest.json), or None if no candidate has one.

    Raises CacheNotFoundError if an explicit location (argument or $GPU_RUNTIME_CACHE) has no
    manifest.json: an explicit choice never silently falls back. Raises UntrustedBundleError
    if a candidate holds a signature (manifest.json.sig) but no manifest: that is a signed
    bundle with its manifest deleted, and JIT mode there would load code no signature covers.
    """
    for how, d, explicit in candidate_locations(path, environ, argv0):
        if os.path.isfile(os.path.join(d, MANIFEST_NAME)):
            return d
        if os.path.lexists(os.path.join(d, SIGNATURE_NAME)):
            raise UntrustedBundleError(
                f"{d} ({how}) holds a signed bundle's {SIGNATURE_NAME} but no {MANIFEST_NAME}: "
                f"refusing to load it or to fall back to JIT mode, which no signature covers; "
                f"copy the whole bundle directory again"
            )
        if explicit:
            raise CacheNotFoundError(
                f"no {MANIFEST_NAME} in {d} (given as the {how}); point it at the cache/ "
                f"directory of a device bundle built with `pants package`"
            )
    return None


def not_found_message(
    environ: Optional[Mapping[str, str]] = None,
    argv0: Optional[str] = None,
    strict: bool = False,
) -> str:
    tried = candidate_locations(None, environ, argv0)
    lines = ["No GPU kernel cache found (cache/manifest.json of a device bundle)."]
    if tried:
        lines.append("  looked in: " + "; ".join(f"{d} ({how})" for how, d, _ in tried))
    lines.append(
        f"  fix: run the app from its bundle (dist/<bundle>/, built by `pants package`), "
        f"or set ${ENV_CACHE} to the bundle's cache/ directory;"
    )
    if strict:
        lines.append("  strict mode ($GPU_RUNTIME_STRICT) is on, so JIT mode is off.")
    else:
        lines.append(
            "  for JIT mode (compile on first use), make the app's pex_binary, python_sources or "
            "python_tests depend on its gpu_kernel targets (`pants run`/`pants test` then carry "
            "them); from a checkout, `pants export-codegen <kernel targets>` and add "
            "dist/codegen/<source root> to PYTHONPATH (no __gpu_kernels__ index was found on "
            "sys.path)"
        )
    return "\n".join(lines)
