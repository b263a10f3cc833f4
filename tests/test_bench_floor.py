"""The protocol floor `make bench` sets the end-to-end and steady flows against: `rmqpy bench
e2e` runs against it unchanged (it is its own name server), and what is sent is received,
with both of its twins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmqpy.bench.processes import free_port, wait_for_port


@pytest.mark.parametrize("pure", ["1", "0"], ids=["reference", "compiled"])
def test_rmqpy_bench_e2e_runs_against_the_floor_and_receives_what_it_sent(
    pure: str, tmp_path: Path
) -> None:
    if pure == "0":
        pytest.importorskip("rmqpy.bench._floor", reason="the compiled core is not built")
    env = {**os.environ, "RMQPY_PURE_PYTHON": pure}
    port = free_port()
    with (tmp_path / "floor.log").open("wb") as log:
        floor = subprocess.Popen(
            [sys.executable, "-m", "rmqpy.bench.floor", "--port", str(port)],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for_port(port, floor, timeout_s=30)
        out = subprocess.run(
            [sys.executable, "-m", "rmqpy.cli", "bench", "e2e", "--namesrv", f"127.0.0.1:{port}",
             "--topic", "FloorTopic", "--group", "G", "--from", "last", "--rate", "2000",
             "--keys", "--duration", "2", "--json"],
            env=env, capture_output=True, timeout=120, check=True,
        )  # fmt: skip
    finally:
        floor.terminate()
        floor.wait(10)
    result = json.loads(out.stdout.decode().strip().splitlines()[-1])
    producer, consumer = result["producer"], result["consumer"]
    assert producer["errors"] == consumer["errors"] == 0
    assert producer["msgs"] >= 3000
    # The consumer stops pulling at its own deadline: the last sends may land after it.
    assert 0.95 * producer["msgs"] <= consumer["msgs"] <= producer["msgs"]
    assert 0 < consumer["e2e"]["p50_ms"] <= consumer["e2e"]["p99_ms"]
