"""Kernel names to (library, kernel): plain names, "library.kernel", and helpful failures.

Kernel names may themselves contain dots or templates ("matmul<float, 16>"), so a name is first
looked up as a kernel name in every library; only if no library has it is a "library." prefix
tried. A miss names close matches and every kernel; an ambiguous name lists the qualified
spellings to use instead. One rule for a bundle and for JIT mode (`gpu_runtime.jit.cache`), which
compiles the libraries a lookup needs (`readings`) and then resolves through `resolve_name`.
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

from gpu_runtime.errors import AmbiguousKernelError, KernelNotFoundError
from gpu_spec.manifest.model import Library


def qualified_names(libraries: Mapping[str, Library]) -> List[str]:
    """Every kernel as "library.kernel", libraries in name order."""
    return [
        f"{lib.name}.{k}"
        for lib in sorted(libraries.values(), key=lambda x: x.name)
        for k in lib.kernel_names()
    ]


def check_name(name: object, what: str = "kernel") -> None:
    """A kernel or library name must be a non-empty string: anything else (None, bytes, a
    function object) is refused here, in one line, instead of failing inside a lookup."""
    if not isinstance(name, str) or not name:
        example = "'saxpy' or 'library.saxpy'" if what == "kernel" else "'saxpy'"
        raise KernelNotFoundError(
            f"a {what} name must be a non-empty string such as {example}, got {name!r}"
        )


def readings(name: str) -> List[Tuple[str, str]]:
    """Each (library, kernel) that a dotted name can mean as "library.kernel", shortest
    library first ("a.b.c": ("a", "b.c"), ("a.b", "c"))."""
    return [(name[:i], name[i + 1 :]) for i, ch in enumerate(name) if ch == "."]


def no_library(name: str, listed: Sequence[str], origin: str) -> KernelNotFoundError:
    return KernelNotFoundError(
        f"no library {name!r} in {origin}; libraries: {', '.join(listed) or 'none'}"
    )


def resolve_name(
    libraries: Mapping[str, Library],
    name: str,
    library: Optional[str],
    origin: str,
    listed: Sequence[str],
) -> Optional[Tuple[str, str]]:
    """(library, kernel) for `name`, None if no library has it.

    KernelNotFoundError if `library` is unknown or lacks `name`; AmbiguousKernelError (one)
    if `name` is a kernel of several libraries.
    `origin` (where the kernels come from) and `listed` (the library names to offer) are for
    the messages.
    """
    if library is not None:
        lib = libraries.get(library)
        if lib is None:
            raise no_library(library, listed, origin)
        if name not in lib.kernel_names():
            raise KernelNotFoundError(
                f"library {library!r} has no kernel {name!r}; its kernels: "
                f"{', '.join(lib.kernel_names())}"
            )
        return library, name
    hits = [lib.name for lib in libraries.values() if name in lib.kernel_names()]
    if len(hits) == 1:
        return hits[0], name
    if len(hits) > 1:
        cands = ", ".join(f"{h}.{name}" for h in sorted(hits))
        raise AmbiguousKernelError(
            f"kernel name {name!r} is ambiguous in {origin}: use one of {cands}"
        )
    for lib_name, kernel in readings(name):
        lib = libraries.get(lib_name)
        if lib is not None and kernel in lib.kernel_names():
            return lib.name, kernel
    return None


def not_found(name: str, every: List[str], origin: str) -> KernelNotFoundError:
    """No kernel `name` among `every` ("library.kernel"): name close matches and all of them."""
    import difflib  # only for the error: 1 ms of every start-up otherwise

    close = difflib.get_close_matches(name, every + [n.split(".", 1)[1] for n in every], n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return KernelNotFoundError(
        f"no kernel {name!r} in {origin}{hint} Kernels: {', '.join(every) or 'none'}"
    )
