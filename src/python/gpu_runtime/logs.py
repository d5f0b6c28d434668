"""`log`: the runtime's "gpu_runtime" logger, without importing `logging` at start-up.

Why: `import logging` is 5 ms of a device app's first launch on the build machine (8 on the
H200), for info lines that go nowhere unless the app configured logging, and an app can only
have done that by importing it. So while `logging` is not imported, info and debug lines are
dropped without importing it; once it is (by the app, pytest, anything), every line goes to the
logger as before. A warning always imports it: with nothing configured, logging's last-resort
handler prints it to stderr, as it did before.
"""

from __future__ import annotations

import sys
from typing import Any

NAME = "gpu_runtime"


def _logger() -> Any:
    import logging

    return logging.getLogger(NAME)


class _Log:
    """The few calls the runtime makes, each as `logging.Logger`'s."""

    @staticmethod
    def debug(msg: str, *args: Any) -> None:
        if "logging" in sys.modules:
            _logger().debug(msg, *args)

    @staticmethod
    def info(msg: str, *args: Any) -> None:
        if "logging" in sys.modules:
            _logger().info(msg, *args)

    @staticmethod
    def warning(msg: str, *args: Any) -> None:
        _logger().warning(msg, *args)


log = _Log()
