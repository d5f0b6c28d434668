"""Command line: ``python -m gpu_compiler {compile,versions}``.

``compile`` is what the Pants rule runs in its sandbox::

    python -m gpu_compiler compile --source src/python/imaging/kernels/saxpy.py \\
        --capability sm_90 --out-dir OUT [--sys-path src/python]... \\
        [--ptx-version 8.5] [--fast-math] [--lineinfo] [--max-registers N] \\
        [--define NAME[=VALUE]]... [--include-dir DIR]... [--name-expression EXPR]...

On success OUT holds ``<module>.ptx``, ``<module>.cubin`` per module and
``metadata.json``; exit status 0. On a compile error the message goes to
stderr, the exit status is 1 and nothing is written. Usage errors exit 2
(argparse). Toolchain warnings (NVRTC, ptxas) go to stderr.

``versions`` prints the toolchain versions as JSON (the ``toolchain`` object
of metadata.json); ``--libraries`` adds where each CUDA library was loaded
from (absolute paths: for checks, never for build outputs).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, Optional, Sequence

from gpu_compiler.errors import CompileError


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % (text,)) from None
    if v <= 0:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % (text,))
    return v


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpu_compiler", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command")
    sub.required = True

    c = sub.add_parser("compile", help="compile one kernel source for one capability")
    c.add_argument(
        "--source", required=True, help="kernel source (.py or .cu), relative to the cwd"
    )
    c.add_argument("--capability", required=True, help="target, e.g. sm_90")
    c.add_argument("--out-dir", required=True, help="output directory (replaced if it exists)")
    c.add_argument(
        "--sys-path",
        action="append",
        default=[],
        metavar="DIR",
        help="import root for numba sources and their helpers (repeatable)",
    )
    c.add_argument(
        "--ptx-version",
        default=None,
        metavar="X.Y",
        help="rewrite the PTX .version to this ISA (for older drivers)",
    )
    c.add_argument("--fast-math", action="store_true")
    c.add_argument("--lineinfo", action="store_true")
    c.add_argument("--max-registers", type=_positive_int, default=None, metavar="N")
    c.add_argument("--define", action="append", default=[], metavar="NAME[=VALUE]", help=".cu only")
    c.add_argument("--include-dir", action="append", default=[], metavar="DIR", help=".cu only")
    c.add_argument(
        "--name-expression",
        action="append",
        default=[],
        metavar="EXPR",
        help='.cu only: template instantiation, e.g. "matmul<float, 16>"',
    )

    v = sub.add_parser("versions", help="print toolchain versions as JSON")
    v.add_argument(
        "--libraries",
        action="store_true",
        help="also report the CUDA libraries' load paths (absolute)",
    )
    return parser


def _cmd_compile(args: argparse.Namespace) -> int:
    from gpu_compiler.compile import CompileOptions, compile_source, write_outputs

    options = CompileOptions(
        fast_math=args.fast_math,
        lineinfo=args.lineinfo,
        max_registers=args.max_registers,
        ptx_version=args.ptx_version,
        defines=list(args.define),
        include_dirs=list(args.include_dir),
        name_expressions=list(args.name_expression),
        sys_path=list(args.sys_path),
    )
    try:
        result = compile_source(args.source, args.capability, options)
    except CompileError as e:
        sys.stderr.write("%s\n" % (e,))
        return 1
    for w in result.warnings:
        sys.stderr.write("%s\n" % (w,))
    write_outputs(result, args.out_dir)
    return 0


def _cmd_versions(args: argparse.Namespace) -> int:
    from gpu_compiler import toolchain

    data: Dict[str, Any] = {"toolchain": toolchain.versions()}
    if args.libraries:
        data["libraries"] = toolchain.library_paths()
        data["mapped"] = list(toolchain.mapped_cuda_libraries())
    sys.stdout.write(json.dumps(data, sort_keys=True, indent=2) + "\n")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.command == "compile":
        return _cmd_compile(args)
    return _cmd_versions(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
