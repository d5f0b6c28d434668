"""The ``python -m gpu_runtime`` command line: one subcommand per module, imported on use.

Each module in COMMANDS defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Command modules import CUDA (and anything heavy) inside ``run`` only, so
``--help`` and every command start fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Dict, List, Optional

COMMANDS: Dict[str, str] = {
    "cache": "gpu_runtime.cli.cache",
    "platform": "gpu_runtime.cli.complete_platform",
    "verify": "gpu_runtime.cli.verify",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpu_runtime", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name in sorted(COMMANDS.items()):
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return int(args._run(args) or 0)
