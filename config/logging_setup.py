"""structlog setup for rmqpy processes: to stderr, JSON lines when stderr is not a terminal.

A line that cannot be written (the disk under a redirected stderr is full, the reader of its
pipe is gone) is dropped and counted, never raised: it would otherwise surface inside
whatever was logging, and a broker whose log cannot be written stopped answering the
requests that logged.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


class DroppingPrintLogger(structlog.PrintLogger):
    dropped = 0  # lines that could not be written, in this process

    def msg(self, message: str) -> None:
        try:
            super().msg(message)
        except (OSError, ValueError):  # ValueError: the file was closed
            DroppingPrintLogger.dropped += 1

    log = debug = info = warn = warning = err = error = critical = exception = fatal = msg
    failure = msg


def _stderr_logger(*_args: Any) -> DroppingPrintLogger:
    return DroppingPrintLogger(sys.stderr)


def configure_logging(level: int = logging.INFO) -> None:
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer()
        if sys.stderr.isatty()
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=True,
    )
