"""Helpers for benchmarks and tests that run the broker as a process."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


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
