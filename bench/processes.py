"""Helpers for benchmarks and tests that run the broker as a process."""

from __future__ import annotations

import argparse
import socket
import subprocess
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import uvloop


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port} after {timeout_s} s")


BROKER_STARTED = '"event": "broker started"'  # its lifecycle line, as JSON (stdout is a file)


def wait_for_log(
    log: Path, proc: subprocess.Popen[bytes], timeout_s: float, text: str = BROKER_STARTED
) -> None:
    """Wait until `text` appears in the process's log, by default the broker's line saying
    it started: its ports accept as soon as they are bound, before its store is open (a big
    store takes seconds to recover), and requests sent meanwhile time out."""
    deadline = time.monotonic() + timeout_s
    while not (log.exists() and text in log.read_text(errors="replace")):
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before it started")
        if time.monotonic() > deadline:
            raise TimeoutError(f"broker not started after {timeout_s} s")
        time.sleep(0.02)


def serve_on_port(
    module: str,
    description: str | None,
    serve: Callable[[int], Coroutine[Any, Any, None]],
    argv: list[str] | None = None,
) -> int:
    """The command line of a bench server, `python -m <module> --port P`, run on uvloop."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    uvloop.run(serve(args.port))
    return 0
