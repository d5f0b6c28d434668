"""Dev mode: no bundle cache, so compile kernel sources on first use with gpu_compiler.

Enabled by `open_cache(dev_sources=...)` or $GPU_RUNTIME_DEV_SOURCES (files or directories,
os.pathsep-separated; a directory means its *.py and *.cu files not starting with "_").
Each source becomes a library named after its file stem (saxpy.py -> "saxpy"), compiled for
the device's capability when one of its kernels is first asked for (sources whose stem matches
the requested name first, the others only if needed).

Results are cached under $GPU_RUNTIME_DEV_CACHE, else $XDG_CACHE_HOME/gpu_runtime, else
~/.cache/gpu_runtime, in a directory named by a versioned key: sha256 of
(key schema, source sha256, the sha256 of its sibling .py / include-dir headers, capability,
options, gpu_compiler's toolchain versions, gpu_compiler's own code). gpu_compiler's
`write_outputs` publishes each directory atomically (temp dir + rename), so concurrent
processes never see half an entry. Files are checked against the compile metadata's sha256
before loading, as in a bundle.

Needs the compile toolchain (numba-cuda, NVRTC, nvJitLink: the cuda13 resolve) importable;
a device bundle never uses this path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from gpu_runtime.errors import GpuRuntimeError, KernelNotFoundError, manifest_errors
from gpu_runtime.runtime import KernelCache
from gpu_spec.manifest import MANIFEST_NAME, Manifest
from gpu_spec.manifest_build import build_manifest
from gpu_spec.manifest_parse import parse_manifest
from gpu_spec.metadata import METADATA_FILE

log = logging.getLogger("gpu_runtime")

DEV_KEY_SCHEMA = 1
ENV_DEV_CACHE = "GPU_RUNTIME_DEV_CACHE"
SOURCE_SUFFIXES = (".py", ".cu")

DevSources = Union[str, Sequence[str], Mapping[str, Mapping[str, Any]]]


def dev_cache_root(environ: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    if env.get(ENV_DEV_CACHE):
        return os.path.abspath(env[ENV_DEV_CACHE])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "gpu_runtime")


def expand_sources(sources: DevSources) -> Dict[str, Dict[str, Any]]:
    """{source path: compile options} from a path list / os.pathsep string / {path: options}."""
    if isinstance(sources, str):
        items: List[Tuple[str, Dict[str, Any]]] = [(p, {}) for p in sources.split(os.pathsep) if p]
    elif isinstance(sources, Mapping):
        items = [(p, dict(o or {})) for p, o in sources.items()]
    else:
        items = [(p, {}) for p in sources]
    out: Dict[str, Dict[str, Any]] = {}
    for path, opts in items:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                if (
                    name.endswith(SOURCE_SUFFIXES)
                    and not name.startswith(("_", "."))
                    and not name.endswith("_test.py")
                ):
                    out.setdefault(os.path.join(path, name), dict(opts))
        elif os.path.isfile(path):
            out[path] = opts
        else:
            raise GpuRuntimeError(f"dev mode: kernel source {path!r} does not exist")
    return out


def _sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _dependency_hashes(source: str, options: Mapping[str, Any]) -> Dict[str, str]:
    """Hashes of what a compile may read besides the source: sibling .py helpers (numba) or
    headers in the include dirs (CUDA C++). Coarse on purpose: it only has to be safe."""
    out: Dict[str, str] = {}
    if source.endswith(".py"):
        dirs = [os.path.dirname(os.path.abspath(source))]
        suffixes: Tuple[str, ...] = (".py",)
    else:
        dirs = [os.path.abspath(d) for d in options.get("include_dirs") or ()]
        dirs.append(os.path.dirname(os.path.abspath(source)))
        suffixes = (".cuh", ".h", ".hpp", ".inl")
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            if (
                n.endswith(suffixes)
                and os.path.isfile(p)
                and os.path.abspath(p) != os.path.abspath(source)
            ):
                out[p] = _sha256_file(p)
    return out


def default_options(source: str, given: Mapping[str, Any]) -> Dict[str, Any]:
    """Options for gpu_compiler.compile.CompileOptions, with dev-mode defaults filled in."""
    opts = dict(given)
    src_dir = os.path.dirname(os.path.abspath(source))
    if source.endswith(".py") and "sys_path" not in opts:
        # The roots on sys.path that contain the source, so "imaging.kernels._stencil" imports.
        roots = [
            os.path.abspath(p)
            for p in sys.path
            if p
            and os.path.isdir(p)
            and os.path.commonpath([os.path.abspath(p), src_dir]) == os.path.abspath(p)
        ]
        opts["sys_path"] = roots or [src_dir]
    if source.endswith(".cu"):
        inc = opts.get("include_dirs") or ["."]
        opts["include_dirs"] = [
            d if os.path.isabs(d) else os.path.normpath(os.path.join(src_dir, d)) for d in inc
        ]
    # A checkout is no sandbox: dev mode compiles with absolute paths, so the compiler's
    # "nothing outside the inputs" check (for Pants processes) is off here.
    opts.setdefault("sandbox_root", None)
    return opts


def _compiler_fingerprint() -> Dict[str, Any]:
    import gpu_compiler  # pants: no-infer-dep
    from gpu_compiler import toolchain  # pants: no-infer-dep

    code = hashlib.sha256()
    pkg = os.path.dirname(os.path.abspath(gpu_compiler.__file__))
    for n in sorted(os.listdir(pkg)):
        if n.endswith(".py") and not n.endswith("_test.py"):
            code.update(n.encode() + b"\0" + open(os.path.join(pkg, n), "rb").read() + b"\0")
    return {"versions": toolchain.versions(), "gpu_compiler": code.hexdigest()}


def cache_key(
    source_sha256: str,
    capability: str,
    options: Mapping[str, Any],
    toolchain: Mapping[str, Any],
    dependencies: Optional[Mapping[str, str]] = None,
) -> str:
    """The versioned dev-cache key (a sha256 hex string)."""
    blob = json.dumps(
        {
            "schema": DEV_KEY_SCHEMA,
            "source_sha256": source_sha256,
            "dependencies": sorted((dependencies or {}).values()),
            "capability": capability,
            "options": options,
            "toolchain": toolchain,
        },
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class DevKernelCache(KernelCache):
    """A KernelCache that compiles sources on demand into the per-user dev cache."""

    def __init__(
        self,
        sources: DevSources,
        backend: Any = None,
        *,
        cache_dir: Optional[str] = None,
        prefer: Optional[str] = None,
        compiler: Any = None,
    ) -> None:
        empty = Manifest(
            bundle="dev", driver="0.0", capabilities=(), toolchains={}, libraries=(), files={}
        )
        super().__init__(empty, cache_dir or dev_cache_root(), backend, prefer=prefer, origin="dev")
        self._sources = expand_sources(sources)
        self._pending: Dict[str, Tuple[str, Dict[str, Any]]] = {}
        for src, opts in self._sources.items():
            name = os.path.splitext(os.path.basename(src))[0]
            if name in self._pending:
                raise GpuRuntimeError(
                    f"dev mode: two kernel sources named {name!r}: "
                    f"{self._pending[name][0]} and {src}"
                )
            self._pending[name] = (src, opts)
        self._compiler = (
            compiler  # (compile_source, write_outputs, CompileOptions, fingerprint) for tests
        )
        self._compile_lock = threading.Lock()
        log.info(
            "gpu_runtime: no bundle cache; dev mode over %d kernel sources, cache %s",
            len(self._pending),
            self.root,
        )

    def _describe_origin(self) -> str:
        return f"dev mode ({len(self._sources)} sources, cache {self.root})"

    def _fix_hint(self) -> Optional[str]:
        return (
            "dev mode compiled it for this GPU with the installed gpu_compiler toolchain, whose "
            "code this driver cannot load: install a toolchain matching the driver's CUDA "
            "version, or upgrade the driver"
        )

    def libraries(self) -> List[str]:
        return sorted(set(self._libraries) | set(self._pending))

    def kernel_names(self) -> List[str]:
        self.compile_all()
        return super().kernel_names()

    def compile_all(self) -> None:
        for name in list(self._pending):
            self._compile_library(name)

    def _found(self, name: str) -> bool:
        libs = self._libraries
        if any(name in lib.kernel_names() for lib in libs.values()):
            return True
        return any(
            ch == "." and name[:i] in libs and name[i + 1 :] in libs[name[:i]].kernel_names()
            for i, ch in enumerate(name)
        )

    def _discover(self, name: str, library: Optional[str]) -> None:
        if library is not None:
            if library in self._pending:
                self._compile_library(library)
            return
        # Sources named like the kernel (or like the "library." prefix) first...
        stems = [name] + [name[:i] for i, ch in enumerate(name) if ch == "."]
        for stem in stems:
            if stem in self._pending:
                self._compile_library(stem)
        # ...then those whose text mentions it, then the rest, only until the name is known.
        base = name.rsplit(".", 1)[-1].split("<", 1)[0].strip()
        for lib in sorted(self._pending, key=lambda n: not self._mentions(n, base)):
            if self._found(name):
                return
            self._compile_library(lib)

    def _mentions(self, library: str, word: str) -> bool:
        entry = self._pending.get(library)
        if entry is None or not word:
            return False
        try:
            with open(entry[0], "r", encoding="utf-8", errors="replace") as f:
                return word in f.read()
        except OSError:
            return False

    # -- compiling --------------------------------------------------------------------------
    def _tools(self):
        if self._compiler is not None:
            return self._compiler
        try:
            # Only the cuda13 toolchain resolve owns gpu_compiler.compile: never in a device PEX.
            from gpu_compiler.compile import (  # pants: no-infer-dep
                CompileOptions,
                compile_source,
                write_outputs,
            )
        except ImportError as e:
            raise KernelNotFoundError(
                f"dev mode needs gpu_compiler and the compile toolchain (numba-cuda, NVRTC, "
                f"nvJitLink) importable: {e}. Run from a bundle instead (`pants package`)."
            ) from e
        return compile_source, write_outputs, CompileOptions, _compiler_fingerprint

    def _compile_library(self, name: str) -> None:
        with self._compile_lock:
            if name not in self._pending:
                return
            source, given = self._pending[name]
            compile_source, write_outputs, options_cls, fingerprint = self._tools()
            capability = self.device.sm
            opts = default_options(source, given)
            key = cache_key(
                _sha256_file(source),
                capability,
                opts,
                fingerprint(),
                _dependency_hashes(source, opts),
            )
            out_dir = os.path.join(self.root, key)
            metadata_path = os.path.join(out_dir, METADATA_FILE)
            if os.path.isfile(metadata_path):
                log.info("gpu_runtime: dev cache hit for %s (%s): %s", source, capability, out_dir)
            else:
                import time

                t0 = time.perf_counter()
                log.info("gpu_runtime: dev mode: compiling %s for %s", source, capability)
                result = compile_source(source, capability, options_cls(**opts))
                os.makedirs(self.root, exist_ok=True)
                write_outputs(result, out_dir)
                log.info(
                    "gpu_runtime: compiled %s for %s in %.2f s -> %s",
                    source,
                    capability,
                    time.perf_counter() - t0,
                    out_dir,
                )
            with open(metadata_path, "rb") as f:
                metadata = json.loads(f.read().decode("utf-8"))
            with manifest_errors():
                data = build_manifest(
                    "dev",
                    "0.0",
                    [
                        {
                            "name": name,
                            "target": source,
                            "outputs": [{"toolchain": "dev", "metadata": metadata, "dir": key}],
                        }
                    ],
                )
                part = parse_manifest(data, origin=os.path.join(out_dir, METADATA_FILE))
            with self._lock:
                for lib in part.libraries:
                    self._libraries[lib.name] = lib
                self._files.update(part.files)
                del self._pending[name]


__all__ = ["DevKernelCache", "cache_key", "dev_cache_root", "expand_sources", "MANIFEST_NAME"]
