"""Command line: ``python -m gpu_compiler {compile,versions}``.

``compile`` is what the Pants rule runs in its sandbox::

    python -m gpu_compiler compile --source src/python/imaging/kernels/saxpy.py \\
        --capability sm_87 --capability sm_90 --out-dir OUT [--sys-path src/python]... \\
        [--ptx-version 8.5] [--fast-math] [--lineinfo] [--max-registers N] \\
        [--define NAME[=VALUE]]... [--include-dir DIR]... [--name-expression EXPR]...

``--capability`` is repeatable and takes comma-separated lists (``sm_87,sm_90``):
one process compiles the source for all of them, so numba's import and NVVM
set-up are paid once, and a numba kernel is typed and lowered once for all of
them (``gpu_compiler.numba.shared_lowering``). The bytes are those of one
process per capability: numba's naming counters are reset for each compile, and
linked libraries reach NVVM in a stable order (``gpu_compiler.numba.link_order``).

``--capability-from-stdin`` instead reads that list as one line from stdin
once the toolchain is loaded and the process confined: JIT mode starts the
compile before it knows the GPU (loading numba-cuda and the CUDA libraries is
most of a cold compile) and sends the capability when the driver answers; end
of input instead (the caller found the kernel cached, or died) exits 0 having
written nothing.

On success OUT holds ``<capability>/<module>.ptx``, ``<capability>/<module>.cubin``
per module and ``<capability>/metadata.json`` for each capability; exit status 0.
If any capability fails, each failure goes to stderr prefixed by the
capabilities it failed for (``sm_75, sm_80: src/k.py:10: error: ...``; the
same message for several is printed once), the exit status is 1 and nothing
is written. Usage errors exit 2 (argparse). Toolchain warnings (NVRTC, ptxas)
go to stderr, prefixed by their capability.

``versions`` prints the toolchain versions as JSON (the ``toolchain`` object
of metadata.json); ``--libraries`` adds where each CUDA library was loaded
from (absolute paths: for checks, never for build outputs).

``fingerprint`` prints ``{"toolchain": <versions>, "code": <sha256>}``: what,
besides a kernel's inputs, decides the bytes a compile writes. The runtime's
JIT mode puts it in each cache key (``gpu_runtime.jit.key``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gpu_compiler.errors import CompileError
from gpu_spec.capabilities import parse_capability
from gpu_spec.compile.options import CompileOptions
from gpu_spec.compile.report import failure_line
from gpu_spec.errors import SpecError
from gpu_spec.metadata import language_of


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpu_compiler", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command")
    sub.required = True

    c = sub.add_parser("compile", help="compile one kernel source for one or more capabilities")
    c.add_argument(
        "--source", required=True, help="kernel source (.py or .cu), relative to the cwd"
    )
    targets = c.add_mutually_exclusive_group(required=True)
    targets.add_argument(
        "--capability",
        action="append",
        metavar="SM[,SM...]",
        help="target(s), e.g. sm_90 or sm_87,sm_90 (repeatable); each gets OUT/<capability>/",
    )
    targets.add_argument(
        "--capability-from-stdin",
        action="store_true",
        help="read the target(s) as one line from stdin once the toolchain is loaded (JIT mode "
        "starts the compile while it asks the driver which GPU it has); end of input before a "
        "line: exit 0 having written nothing",
    )
    c.add_argument(
        "--out-dir",
        required=True,
        help="output directory, one subdirectory per capability (replaced if it exists)",
    )
    CompileOptions.add_arguments(c)  # the flags the Pants rule writes (its `argv`)
    _add_sandbox_arguments(c)

    v = sub.add_parser("versions", help="print toolchain versions as JSON")
    v.add_argument(
        "--libraries",
        action="store_true",
        help="also report the CUDA libraries' load paths (absolute)",
    )
    sub.add_parser(
        "fingerprint", help="print the toolchain versions and the compiler code's sha256"
    )
    return parser


def _add_sandbox_arguments(c: argparse.ArgumentParser) -> None:
    """What the compile may see and how long it may take (``gpu_compiler.confine``)."""
    c.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="PATH",
        help="a file or directory of the compile's inputs, the only paths it can see besides "
        "its toolchain (repeatable; default: the working directory). The Pants rule names "
        "each: a remote executor's sandbox is rooted at /",
    )
    c.add_argument(
        "--sandbox",
        choices=("namespaces", "landlock"),
        default="namespaces",
        help="the OS sandbox's walls: namespaces and Landlock (default), or Landlock alone, as "
        "where the kernel allows no user namespace (for comparisons: the benchmarks and the "
        "byte-identity checks)",
    )
    c.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="stop a compile that has not finished by then, naming the kernel file it was in "
        "(default: $%s, else no limit)" % TIMEOUT_ENV,
    )


def capabilities_of(values: Sequence[str], option: str = "--capability") -> List[str]:
    """The ``--capability`` values, comma lists split, in the order given; duplicates refused.

    Each must be a known capability (gpu_spec's table, as `compile_source` checks it) before
    anything else sees it: a value later goes into messages and regular expressions, where
    text like ``sm_90\\Q`` (from stdin, say) would be read as an escape."""
    capabilities: List[str] = []
    for value in values:
        for capability in value.split(","):
            capability = capability.strip()
            if not capability:
                raise argparse.ArgumentTypeError("empty capability in %s %r" % (option, value))
            try:
                parse_capability(capability)
            except SpecError as e:
                raise argparse.ArgumentTypeError("%s: %s" % (option, e)) from None
            if capability in capabilities:
                raise argparse.ArgumentTypeError("%s %s given twice" % (option, capability))
            capabilities.append(capability)
    return capabilities


def grouped_failures(failures: Sequence[Tuple[str, str]]) -> List[str]:
    """``"sm_75, sm_80: <message>"`` per distinct message, in order of first failure.

    Why grouped: a source that does not compile usually fails alike for every capability,
    and four copies of one error bury it. Messages that differ only in the capability they
    name, or in whitespace (numba indents a process's later typing errors one space more),
    are one group, printed once with that name replaced by the group's list.
    """
    groups: Dict[str, Tuple[List[str], str]] = {}
    for capability, message in failures:
        pattern = re.compile(r"\b%s\b" % re.escape(capability))
        key = " ".join(pattern.sub("\0", message).split())
        groups.setdefault(key, ([], message))[0].append(capability)
    reports = []
    for capabilities, message in groups.values():
        named = ", ".join(capabilities)
        first = re.compile(r"\b%s\b" % re.escape(capabilities[0]))
        # backslashes doubled: the template then gives the names literally, never as escapes
        literal = named.replace("\\", "\\\\")
        reports.append(failure_line(capabilities, first.sub(literal, message)))
    return reports


# The limit a caller that cannot pass --timeout sets: JIT mode (an older compiler ignores it).
TIMEOUT_ENV = "GPU_COMPILER_TIMEOUT"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError("expected a positive number of seconds, got %r" % text)
    return value


def _cmd_compile(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from gpu_compiler.deadline import CompileDeadline, deadline

    seconds = args.timeout
    if seconds is None and os.environ.get(TIMEOUT_ENV):
        try:
            seconds = _seconds(os.environ[TIMEOUT_ENV])
        except argparse.ArgumentTypeError as e:
            parser.error("$%s: %s" % (TIMEOUT_ENV, e))
    try:
        with deadline(seconds):
            return _compile(args, parser)
    except CompileDeadline as stopped:
        sys.stderr.write("%s\n" % (stopped.report(args.source),))
        return 1


def _compile(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from gpu_compiler.compile import CompileResult, compile_source, write_outputs_by_capability
    from gpu_compiler.numba.shared_lowering import shared_lowering

    if not args.capability_from_stdin:
        capabilities = _capabilities_or_exit(args.capability, parser)
    options = CompileOptions.from_arguments(args)
    _confine(args)
    if args.capability_from_stdin:
        line = sys.stdin.readline().strip()
        if not line:  # the caller went away or no longer needs it: nothing was asked
            return 0
        try:
            capabilities = capabilities_of([line], "the capability read from stdin")
        except argparse.ArgumentTypeError as e:
            # One line for JIT mode to report as it is; exit 1, not argparse's 2 naming the
            # flag, which JIT mode reads as a compiler that predates --capability-from-stdin.
            sys.stderr.write("gpu_compiler compile: error: %s\n" % (e,))
            return 1
    results: Dict[str, CompileResult] = {}
    failures: List[Tuple[str, str]] = []
    # Every capability is tried, so the report names all that fail, not only the first. With
    # several, a numba kernel is lowered once for all (gpu_compiler.numba.shared_lowering).
    batch = shared_lowering() if len(capabilities) > 1 else contextlib.nullcontext()
    with batch:
        for capability in capabilities:
            try:
                results[capability] = compile_source(args.source, capability, options)
            except CompileError as e:
                failures.append((capability, str(e)))
    if failures:
        for report in grouped_failures(failures):
            sys.stderr.write("%s\n" % (report,))
        return 1
    for capability, result in results.items():
        for w in result.warnings:
            sys.stderr.write("%s: %s\n" % (capability, w))
    write_outputs_by_capability(results, args.out_dir)
    return 0


def _capabilities_or_exit(values: Sequence[str], parser: argparse.ArgumentParser) -> List[str]:
    try:
        return capabilities_of(values)
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))  # exits 2, like every usage error
        raise  # pragma: no cover - parser.error does not return


def _confine(args: argparse.Namespace) -> None:
    """Move into the namespaces, load the toolchain, then hold the process to its inputs,
    outputs and toolchain (``gpu_compiler.confine``), before the kernel source is read."""
    from gpu_compiler import confine

    if args.sandbox == "namespaces":
        confine.isolate(args.out_dir)  # returns in the child (or, unavailable, said once)
    language = language_of(args.source)
    if language is not None:  # else compile_source refuses it, reading nothing
        confine.prepare_toolchain(language)
    confine.confine(args.input, args.out_dir)


def _cmd_versions(args: argparse.Namespace) -> int:
    from gpu_compiler import toolchain

    data: Dict[str, Any] = {"toolchain": toolchain.versions()}
    if args.libraries:
        data["libraries"] = toolchain.library_paths()
        data["mapped"] = list(toolchain.mapped_cuda_libraries())
    sys.stdout.write(json.dumps(data, sort_keys=True, indent=2) + "\n")
    return 0


def _cmd_fingerprint() -> int:
    from gpu_compiler.fingerprint import fingerprint

    sys.stdout.write(json.dumps(fingerprint(), sort_keys=True) + "\n")
    return 0


# Thread pools the toolchain starts at import (numpy's OpenBLAS) are kept to the calling
# thread: the compile builds its root (unshare(CLONE_NEWNS), gpu_compiler.walls.namespace) after
# the toolchain has loaded, and a process with threads cannot take a mount namespace of its own.
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


_RESTARTED = "GPU_COMPILER_RESTARTED"  # once: never a loop, whatever the interpreter does


def _fixed_environment(argv: Sequence[str]) -> None:
    """Give the compile ``confine.FIXED_ENV`` (hash seed, timezone, SOURCE_DATE_EPOCH) and one
    thread, restarting the interpreter if its string hashes are randomised.

    Why a restart: the hash seed is read once, at start-up, and a PEX venv's interpreter runs
    with ``-E``, which ignores PYTHONHASHSEED from the caller. The restart drops ``-E`` and, to
    keep what it meant, every PYTHON* variable but the seed."""
    from gpu_compiler.confine import FIXED_ENV

    os.environ.update(_ONE_THREAD)
    if sys.flags.hash_randomization == 0 and all(
        os.environ.get(k) == v for k, v in FIXED_ENV.items()
    ):
        return
    os.environ.update(FIXED_ENV)
    if hasattr(time, "tzset"):
        time.tzset()
    if sys.flags.hash_randomization == 0 or os.environ.get(_RESTARTED):
        return
    env = dict(os.environ, **{_RESTARTED: "1"})
    if sys.flags.ignore_environment:
        env = {k: v for k, v in env.items() if not k.startswith("PYTHON") or k in FIXED_ENV}
    flags = [
        flag
        for flag, on in (
            ("-s", sys.flags.no_user_site),
            ("-B", sys.flags.dont_write_bytecode),
            ("-P", getattr(sys.flags, "safe_path", False)),
        )
        if on
    ]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *flags, "-m", "gpu_compiler", *argv], env)


def main(argv: Optional[Sequence[str]] = None) -> int:
    arguments = list(argv) if argv is not None else sys.argv[1:]
    if arguments[:1] == ["compile"] and argv is None:  # not when called in-process (tests)
        _fixed_environment(arguments)
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.command == "compile":
        return _cmd_compile(args, parser)
    if args.command == "fingerprint":
        return _cmd_fingerprint()
    return _cmd_versions(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
