"""What a numba kernel links besides its own PTX: CUDA C++ parts and libcudadevrt.

Where the files come from: ``cuda.declare_device(name, sig, link="functions.cu")`` and
``@cuda.jit(link=[...])`` (numba-cuda collects both on the kernel's code library), numba-cuda's
own helpers (``reshape_funcs.cu``), and, for a kernel using grid sync, the device runtime library
``libcudadevrt.a`` of the toolchain's wheels (nvidia-cuda-runtime).

Each part becomes a file of the compile output beside the module's PTX: a ``.cu`` is compiled by
NVRTC to relocatable PTX (``<stem>.ptx``), a ``.ptx`` is taken as it is, libcudadevrt is copied.
nvJitLink links them into the module's cubin; the runtime's driver linker links the same files
with the module's PTX for the PTX variant (metadata "ptx_link"), so no compiler is needed on the
device. Anything else (objects, archives, LTO-IR, fatbins, in-memory code other than CUDA C++ or
PTX) is refused: it is not silently dropped.

A relative link path is looked up beside the kernel source first, then in the working directory
(numba's own rule, the build root in a Pants compile).
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

from gpu_compiler.errors import CompileError
from gpu_compiler.paths import display_path
from gpu_compiler.sandbox import Sandbox
from gpu_spec.compile.options import CompileOptions

DEVRT_FILE = "libcudadevrt.a"


@dataclass(frozen=True)
class LinkPart:
    """One file linked with a module: its output file name, nvJitLink kind and bytes."""

    file: str
    kind: str  # "ptx" | "library"
    data: bytes


@dataclass
class PartCompiler:
    """Compiles each distinct link input of one source once per capability."""

    source_path: str
    capability: str
    # the kernel's; its `include_dirs` (build-root relative) are searched by linked .cu first
    options: CompileOptions
    taken: Tuple[str, ...] = ()  # output file names already used (the modules')

    def __post_init__(self) -> None:
        self._parts: Dict[Any, LinkPart] = {}
        self._names = set(self.taken)

    def parts_for(self, kernel: str, link: List[Any], cooperative: bool) -> List[LinkPart]:
        out = [self._part(kernel, item) for item in link]
        if cooperative:
            out.append(self._devrt())
        return out

    def _devrt(self) -> LinkPart:
        """libcudadevrt.a, or where it has no code for the capability, the grid-sync source of
        ``gpu_compiler.link.grid_sync`` compiled to PTX."""
        if DEVRT_FILE not in self._parts:
            data = _read_devrt()
            if int(self.capability[3:]) in fatbin_elf_archs(data):
                self._parts[DEVRT_FILE] = LinkPart(DEVRT_FILE, "library", data)
            else:
                from gpu_compiler.link import grid_sync as cg_grid_sync

                ptx = self._nvrtc(None, cg_grid_sync.FILE, cg_grid_sync.SOURCE.encode("utf-8"))
                name = self._file_name(cg_grid_sync.FILE)
                self._parts[DEVRT_FILE] = LinkPart(name, "ptx", ptx.encode("utf-8"))
        return self._parts[DEVRT_FILE]

    def _part(self, kernel: str, item: Any) -> LinkPart:
        key = item if isinstance(item, str) else id(item)
        if key not in self._parts:
            name, kind, data = self._compile(kernel, item)
            self._parts[key] = LinkPart(self._file_name(name), "ptx", data)
        return self._parts[key]

    def _file_name(self, name: str) -> str:
        # numba names in-memory code "<unnamed-cu>": a file name keeps to a portable set
        stem = os.path.splitext(os.path.basename(name))[0]
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("_.") or "part"
        file, n = "%s.ptx" % stem, 1
        while file in self._names or file == DEVRT_FILE:
            file, n = "%s_%d.ptx" % (stem, n), n + 1
        self._names.add(file)
        return file

    def _compile(self, kernel: str, item: Any) -> Tuple[str, str, bytes]:
        if not isinstance(item, str):
            return self._linkable_code(kernel, item)
        path = self._resolve(kernel, item)
        shown = display_path(path, self.source_path)
        ext = os.path.splitext(path)[1].lower()
        if ext == ".ptx":
            with open(path, "rb") as f:
                return shown, "ptx", f.read()
        if ext == ".cu":
            return shown, "ptx", self._nvrtc(path, shown, None).encode("utf-8")
        raise CompileError(
            "%s: error: kernel %r links %s: linking %s files is not supported by the AOT "
            "compiler; link CUDA C++ (.cu) or PTX (.ptx) sources"
            % (self.source_path, kernel, shown, ext or "extension-less"),
            source=self.source_path,
        )

    def _linkable_code(self, kernel: str, obj: Any) -> Tuple[str, str, bytes]:
        kind = type(obj).__name__
        name = getattr(obj, "name", None) or "%s_%s" % (kernel, kind.lower())
        data = getattr(obj, "data", b"")
        data = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        if kind == "PTXSource":
            return name, "ptx", data
        if kind == "CUSource":
            return name, "ptx", self._nvrtc(None, name, data).encode("utf-8")
        raise CompileError(
            "%s: error: kernel %r links a numba %s object: the AOT compiler links CUDA C++ "
            "(CUSource, .cu) and PTX (PTXSource, .ptx) only" % (self.source_path, kernel, kind),
            source=self.source_path,
        )

    def _resolve(self, kernel: str, item: str) -> str:
        here = os.path.dirname(self.source_path)
        tried = [item] if os.path.isabs(item) else [os.path.join(here, item), item]
        path = next((p for p in tried if os.path.isfile(p)), None)
        if path is None:
            raise CompileError(
                "%s: error: kernel %r links %r, which does not exist (looked for %s); a link "
                "file must be an input of the gpu_kernel target (in its sandbox)"
                % (self.source_path, kernel, item, ", ".join(tried)),
                source=self.source_path,
            )
        sandbox = Sandbox(self.options.sandbox_root)
        if sandbox.confined and not (sandbox.inside(path) or _in_toolchain(path)):
            raise CompileError(
                "%s: error: kernel %r links %s, outside the compile's inputs (the sandbox); "
                "keep link files in the repository, owned by a target the kernel depends on"
                % (self.source_path, kernel, sandbox.where(path)),
                source=self.source_path,
            )
        return path

    def _nvrtc(self, path: Optional[str], shown: str, data: Optional[bytes]) -> str:
        from gpu_compiler.cuda_cpp.backend import compile_cuda_part

        toolchain = path is not None and _in_toolchain(path)
        options = self.options.for_linked_part(() if toolchain else self._search_paths())
        return compile_cuda_part(
            path if path is not None else shown,
            self.capability,
            options if not toolchain else dataclasses.replace(options, sandbox_root=None),
            shown=shown,
            text=data,
        )

    def _search_paths(self) -> List[str]:
        """Where a linked file's `#include <...>` looks: the target's `include_dirs`, then
        numba's `config.CUDA_NVRTC_EXTRA_SEARCH_PATHS` (":"-separated), as the docs set it in
        the kernel module (or $NUMBA_CUDA_NVRTC_EXTRA_SEARCH_PATHS). Each directory is made
        relative to the working directory (the compile's inputs) and must be inside them: the
        headers are inputs like any other."""
        from numba.cuda import config

        value = getattr(config, "CUDA_NVRTC_EXTRA_SEARCH_PATHS", "") or ""
        named = [(_TARGET_DIRS, d) for d in self.options.include_dirs] + [
            (_NUMBA_PATHS, e) for e in str(value).split(":") if e
        ]
        sandbox = Sandbox(self.options.sandbox_root)
        out: List[str] = []
        for (what, where), entry in named:
            if sandbox.confined and not sandbox.inside(entry):
                raise CompileError(
                    "%s: error: %s names %s, outside the compile's inputs (%s); fix: keep the "
                    "headers in the repository, in a directory %s, and add their target to "
                    "the kernel's `dependencies` (or let inference find it)"
                    % (self.source_path, what, entry, sandbox.where(entry), where),
                    source=self.source_path,
                )
            rel = os.path.relpath(os.path.abspath(entry))
            path = rel if not rel.startswith("..") else os.path.abspath(entry)
            if path not in out:
                out.append(path)
        return out


# (what names the directory, where the fix puts it)
_TARGET_DIRS = ("the target's `include_dirs`", "relative to the BUILD file")
_NUMBA_PATHS = ("numba's CUDA_NVRTC_EXTRA_SEARCH_PATHS", "computed from the module's __file__")


def _in_toolchain(path: str) -> bool:
    from gpu_compiler.numba.import_guard import is_toolchain_file, toolchain_roots

    return is_toolchain_file(path, toolchain_roots())


def fatbin_elf_archs(data: bytes) -> List[int]:
    """The SASS architectures (90 for sm_90) in the fatbins embedded in ``data`` (an archive
    or object): fatbin header magic 0xBA55ED50, then entries of kind 2 (ELF) with the arch."""
    import struct

    archs: Set[int] = set()
    i = 0
    while True:
        i = data.find(struct.pack("<I", 0xBA55ED50), i)
        if i < 0 or i + 16 > len(data):
            return sorted(archs)
        header, size = struct.unpack_from("<HQ", data, i + 6)
        p, end = i + header, min(i + header + size, len(data))
        while p + 32 <= end:
            kind, _version, entry_header, payload = struct.unpack_from("<HHIQ", data, p)
            if kind == 2:
                archs.add(struct.unpack_from("<I", data, p + 28)[0])
            if entry_header == 0:
                break
            p += entry_header + payload
        i = max(end, i + 4)


def _read_devrt() -> bytes:
    """libcudadevrt.a from the toolchain's CUDA runtime wheel (found as numba-cuda finds it)."""
    try:
        from numba.cuda.cudadrv.libs import get_cudalib

        path = get_cudalib("cudadevrt", static=True)
        with open(path, "rb") as f:
            return f.read()
    except Exception as e:
        raise CompileError(
            "the kernel uses cooperative groups (grid sync), which needs the device runtime "
            "library libcudadevrt.a, and the toolchain has none (%s): add the "
            "nvidia-cuda-runtime wheel to the toolchain's requirements" % (e,)
        ) from None
