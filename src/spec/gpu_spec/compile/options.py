"""A kernel's compile options as one value, from the `gpu_kernel` target to the compiler's argv.

Why one value (as cuda.core's `ProgramOptions`): the options pass through the plugin's field
set, the `python -m gpu_compiler compile` flags, the compiler's argument parser, both backends,
NVRTC's command line and nvJitLink's. Each of those reads this class, so an option is added or
renamed here only:

- the plugin builds it from the field set (`gpu_build.util_rules.kernel_field_set`) and writes
  its flags with `argv` (the build step's process and JIT mode's index alike);
- the compiler declares its flags with `add_arguments` and reads them back with
  `from_arguments`;
- the backends take it whole; `metadata()` is the `options` object of metadata.json.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from gpu_spec.capabilities import check_max_registers
from gpu_spec.errors import SpecError


def _register_cap(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % (text,)) from None
    try:
        return check_max_registers(value)
    except SpecError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@dataclass(frozen=True)
class _Flag:
    """How one option is written on the compiler's command line."""

    name: str  # the CompileOptions attribute
    flag: str
    kind: str  # "switch" (present or not), "value" (one), "list" (repeatable)
    metavar: Optional[str] = None
    help: Optional[str] = None
    parse: Callable[[str], Any] = str
    # a list's values as `--flag=value`, one word: a value that starts with `-` (a define
    # `-I/etc`, a directory `-x`) stays that flag's value; as two words argparse reads it as an
    # option of its own. sys_path's values are the source roots the plugin names.
    one_word: bool = True


# In the order the flags are written: `argv` keeps it, so a process's command line is stable.
FLAGS: Tuple[_Flag, ...] = (
    _Flag(
        "sys_path",
        "--sys-path",
        "list",
        "DIR",
        "import root for numba sources and their helpers (repeatable)",
        one_word=False,
    ),
    _Flag(
        "ptx_version",
        "--ptx-version",
        "value",
        "X.Y",
        "rewrite the PTX .version to this ISA (for older drivers)",
    ),
    _Flag("fast_math", "--fast-math", "switch"),
    _Flag("lineinfo", "--lineinfo", "switch"),
    _Flag("max_registers", "--max-registers", "value", "N", parse=_register_cap),
    _Flag("defines", "--define", "list", "NAME[=VALUE]", ".cu only"),
    _Flag(
        "include_dirs",
        "--include-dir",
        "list",
        "DIR",
        "a .cu source's, or the .cu files a .py source links",
    ),
    _Flag(
        "name_expressions",
        "--name-expression",
        "list",
        "EXPR",
        '.cu only: template instantiation, e.g. "matmul<float, 16>"',
    ),
)

# The options only a CUDA C++ source takes. `include_dirs` is not one: on a numba source it
# serves the `.cu` files its kernels link.
CUDA_ONLY_OPTIONS = ("defines", "name_expressions")

# What changes no output, so metadata.json leaves it out: where numba imports from, and the
# compiler's own check of what it reads.
_NOT_RECORDED = ("sys_path", "sandbox_root")


@dataclass(frozen=True)
class CompileOptions:
    """The options of one kernel's compiles, the same for each of its capabilities.

    ``sys_path`` only affects how numba sources import. ``include_dirs`` apply to a ``.cu``
    source and, for a ``.py`` source, to the CUDA C++ files its kernels link (before numba's
    CUDA_NVRTC_EXTRA_SEARCH_PATHS). ``sandbox_root`` is not a flag: every file the compile reads
    (headers, imported modules) must resolve inside it ("." = the working directory, the Pants
    sandbox) or in the toolchain; None lifts that (tests compiling a checkout).
    """

    fast_math: bool = False
    lineinfo: bool = False
    max_registers: Optional[int] = None
    ptx_version: Optional[str] = None
    defines: Tuple[str, ...] = ()
    include_dirs: Tuple[str, ...] = ()
    name_expressions: Tuple[str, ...] = ()
    sys_path: Tuple[str, ...] = ()
    sandbox_root: Optional[str] = "."

    def __post_init__(self) -> None:
        for flag in FLAGS:  # a list given for a sequence is held as a tuple: the value is frozen
            if flag.kind == "list":
                object.__setattr__(self, flag.name, tuple(getattr(self, flag.name)))

    def argv(self) -> Tuple[str, ...]:
        """The compiler's flags for these options."""
        out: List[str] = []
        for flag in FLAGS:
            value = getattr(self, flag.name)
            if flag.kind == "switch" and value:
                out.append(flag.flag)
            elif flag.kind == "value" and value is not None and value != "":
                out += [flag.flag, str(value)]
            elif flag.kind == "list" and flag.one_word:
                out += [f"{flag.flag}={v}" for v in value]
            elif flag.kind == "list":
                out += [word for v in value for word in (flag.flag, v)]
        return tuple(out)

    def metadata(self) -> Dict[str, Any]:
        """The ``options`` object of metadata.json (sequences as lists, as JSON has them)."""
        out: Dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name not in _NOT_RECORDED:
                value = getattr(self, f.name)
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def cuda_only_set(self) -> List[str]:
        """The CUDA-only options given, which a numba source refuses."""
        return [name for name in CUDA_ONLY_OPTIONS if getattr(self, name)]

    def for_linked_part(self, include_dirs: Sequence[str]) -> CompileOptions:
        """What the CUDA C++ a numba kernel links compiles with: the kernel's fast_math and
        lineinfo, its sandbox, and ``include_dirs``; its register cap applies when the whole
        is linked."""
        return CompileOptions(
            fast_math=self.fast_math,
            lineinfo=self.lineinfo,
            include_dirs=tuple(include_dirs),
            sandbox_root=self.sandbox_root,
        )

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Declares every flag `argv` writes."""
        for flag in FLAGS:
            if flag.kind == "switch":
                parser.add_argument(flag.flag, dest=flag.name, action="store_true")
            else:
                parser.add_argument(
                    flag.flag,
                    dest=flag.name,
                    action="append" if flag.kind == "list" else "store",
                    default=[] if flag.kind == "list" else None,
                    type=flag.parse,
                    metavar=flag.metavar,
                    help=flag.help,
                )

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> CompileOptions:
        """The options `add_arguments`' flags gave."""
        return cls(**{flag.name: getattr(args, flag.name) for flag in FLAGS})
