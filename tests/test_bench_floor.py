"""The protocol floor `make bench` sets the end-to-end and steady flows against: `rmqpy bench
e2e` runs against it unchanged (it is its own name server), and what is sent is received,
with both of its twins."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqpy.bench.compare import rmqpy_bench_args, run_json, start_floor


@pytest.mark.parametrize("pure", ["1", "0"], ids=["reference", "compiled"])
def test_rmqpy_bench_e2e_runs_against_the_floor_and_receives_what_it_sent(
    pure: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pure == "0":
        pytest.importorskip("rmqpy.bench._floor", reason="the compiled core is not built")
    monkeypatch.setenv("RMQPY_PURE_PYTHON", pure)  # the floor and the bench processes
    floor = start_floor(tmp_path)
    try:
        result = run_json(rmqpy_bench_args(
            floor, "e2e", "--topic", "FloorTopic", "--group", "G", "--from", "last",
            "--rate", "2000", "--keys", "--duration", "4",
        ))  # fmt: skip
    finally:
        floor.stop()
    producer, consumer = result["producer"], result["consumer"]
    assert producer["errors"] == consumer["errors"] == 0
    assert producer["msgs"] >= 6000
    # The consumer's process may be ready a few hundred milliseconds before the producer's,
    # and end as much earlier: it pulls on while messages still come, and gets them all.
    assert consumer["msgs"] == producer["msgs"]
    assert 0 < consumer["e2e"]["p50_ms"] <= consumer["e2e"]["p99_ms"]


def test_a_paced_producer_writes_the_requests_that_fall_due_together(tmp_path: Path) -> None:
    """Asked for 100k requests/s, more than one write per request can send from Python: the
    requests that fall due in one sleep go out in one write, every one is answered, and no
    more are sent than the rate allows (the rate reached is `make bench`'s to measure)."""
    floor = start_floor(tmp_path)
    try:
        result = run_json(rmqpy_bench_args(
            floor, "producer", "--topic", "Paced", "--rate", "100000", "--duration", "2"
        ))  # fmt: skip
    finally:
        floor.stop()
    producer = result.get("producer", result)
    assert producer["errors"] == 0
    assert producer["msgs"] == producer["sent"] > 0
    assert producer["sent"] >= 2 * producer["writes"]
    assert producer["sent"] <= 100_000 * producer["seconds"] * 1.05 + 64
