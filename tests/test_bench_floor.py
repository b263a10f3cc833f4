"""The protocol floor `make bench` sets the end-to-end and steady flows against: `rmqpy bench
e2e` runs against it unchanged (it is its own name server), and what is sent is received,
with both of its twins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rmqpy.bench.processes import free_port, wait_for_port


@contextmanager
def running_floor(env: dict[str, str], log_path: Path) -> Iterator[int]:
    """`bench.floor` on a free port (its own name server), stopped at the end."""
    port = free_port()
    with log_path.open("wb") as log:
        floor = subprocess.Popen(
            [sys.executable, "-m", "rmqpy.bench.floor", "--port", str(port)],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for_port(port, floor, timeout_s=30)
        yield port
    finally:
        floor.terminate()
        floor.wait(10)


def rmqpy_bench(env: dict[str, str], port: int, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "rmqpy.cli", "bench", *args, "--namesrv", f"127.0.0.1:{port}",
         "--json"],
        env=env, capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("pure", ["1", "0"], ids=["reference", "compiled"])
def test_rmqpy_bench_e2e_runs_against_the_floor_and_receives_what_it_sent(
    pure: str, tmp_path: Path
) -> None:
    if pure == "0":
        pytest.importorskip("rmqpy.bench._floor", reason="the compiled core is not built")
    env = {**os.environ, "RMQPY_PURE_PYTHON": pure}
    with running_floor(env, tmp_path / "floor.log") as port:
        result = rmqpy_bench(
            env, port, "e2e", "--topic", "FloorTopic", "--group", "G", "--from", "last",
            "--rate", "2000", "--keys", "--duration", "4",
        )  # fmt: skip
    producer, consumer = result["producer"], result["consumer"]
    assert producer["errors"] == consumer["errors"] == 0
    assert producer["msgs"] >= 6000
    # The consumer stops pulling at its own deadline, and its process may be ready to pull a
    # few hundred milliseconds before the producer's sends its first message: the last sends
    # may land after that deadline.
    assert 0.9 * producer["msgs"] <= consumer["msgs"] <= producer["msgs"]
    assert 0 < consumer["e2e"]["p50_ms"] <= consumer["e2e"]["p99_ms"]


def test_a_paced_producer_sends_at_the_rate_it_was_asked_for(tmp_path: Path) -> None:
    """100k requests/s, more than one write per request can send from Python here: those
    that fall due in one sleep go out together, and the rate holds."""
    with running_floor(dict(os.environ), tmp_path / "floor.log") as port:
        result = rmqpy_bench(
            dict(os.environ), port, "producer", "--topic", "Paced", "--rate", "100000",
            "--duration", "2",
        )  # fmt: skip
    producer = result.get("producer", result)
    assert producer["errors"] == 0
    assert producer["msgs"] >= 0.9 * 200_000
