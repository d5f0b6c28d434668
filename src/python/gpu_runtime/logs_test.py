"""The runtime's log: no `logging` import at start-up, every line once logging is in use."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from gpu_runtime.logs import log


def run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )


def test_importing_the_runtime_does_not_import_logging_and_warnings_still_print():
    done = run(
        "import sys, gpu_runtime\n"
        "from gpu_runtime.logs import log\n"
        "log.info('dropped: nobody can be listening')\n"
        "print('logging' in sys.modules)\n"
        "log.warning('gpu_runtime: %s files missing', 2)\n"
    )
    assert done.stdout.strip() == "False"
    assert done.stderr.strip() == "gpu_runtime: 2 files missing"


def test_every_line_reaches_the_logger_once_logging_is_imported(caplog):
    with caplog.at_level(logging.DEBUG, logger="gpu_runtime"):
        log.debug("d %d", 1)
        log.info("i %s", "x")
        log.warning("w")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", "d 1"),
        ("INFO", "i x"),
        ("WARNING", "w"),
    ]
