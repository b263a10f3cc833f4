"""`rmqpy bench` as a user runs it: short runs against a real broker. Nothing here asserts a
speed; the runs prove the tool works (every message acknowledged, consumed and committed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon import BrokerProcess
from tests.sdk.test_cli import RMQPY, json_lines, ok, rmqpy


def bench(ns: str, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(ok(rmqpy("bench", *args, "--json", namesrv=ns)))
    return result


def test_producer_then_consumer_move_every_message_and_commit(
    broker: BrokerProcess, topic: str
) -> None:
    ns = broker.namesrv
    sent = bench(ns, "producer", "--topic", topic, "--duration", "1.5", "--batch", "4",
                 "--keys", "--procs", "2", "--queues", "4")  # fmt: skip
    producer = sent["producer"]
    assert producer["errors"] == 0 and producer["procs"] == 2
    assert producer["msgs"] > 0 and producer["msgs"] % 4 == 0
    assert producer["rt"]["p50_ms"] <= producer["rt"]["p99_ms"] <= producer["rt"]["max_ms"]

    got = bench(ns, "consumer", "--topic", topic, "--group", f"{topic}-g", "--duration", "1.5")
    assert got["consumer"]["msgs"] == producer["msgs"]
    assert got["consumer"]["errors"] == 0
    again = bench(ns, "consumer", "--topic", topic, "--group", f"{topic}-g", "--duration", "1")
    assert again["consumer"]["msgs"] == 0  # the first run committed where it stopped


def test_a_consumer_that_drained_the_topic_counts_neither_its_waits_nor_its_idle_time(
    broker: BrokerProcess, topic: str
) -> None:
    """After the last message, the pulls are held a second each and answered empty: those
    waits were counted as request times (p99 about 1,000 ms) and the idle seconds divided
    the rate."""
    ns = broker.namesrv
    sent = bench(ns, "producer", "--topic", topic, "--duration", "0.5", "--inflight", "8")
    got = bench(ns, "consumer", "--topic", topic, "--group", f"{topic}-idle", "--duration", "4")
    consumer = got["consumer"]
    assert consumer["msgs"] == sent["producer"]["msgs"]
    assert consumer["rt"]["p99_ms"] < 900  # a held pull waits 1,000 ms
    assert consumer["seconds"] < 3.5  # the drain, not the 4 s run
    assert consumer["msgs_per_s"] == round(consumer["msgs"] / consumer["seconds"])


def test_keys_are_unique_per_message_and_indexed(broker: BrokerProcess, topic: str) -> None:
    ns = broker.namesrv
    bench(ns, "producer", "--topic", topic, "--duration", "1", "--keys", "--inflight", "4")
    stored = json_lines(ok(rmqpy("consume", topic, "--from", "first", "--max", "50", "--json",
                                 namesrv=ns)))  # fmt: skip
    keys = [m["keys"][0] for m in stored]
    assert len(keys) == 50 and len(set(keys)) == 50
    [found] = json_lines(ok(rmqpy("query", "key", topic, keys[7], "--json", namesrv=ns)))
    assert found["msgId"] == stored[7]["msgId"]


def test_e2e_reports_end_to_end_latency(broker: BrokerProcess, topic: str) -> None:
    out = bench(broker.namesrv, "e2e", "--topic", topic, "--duration", "2", "--rate", "2000")
    assert out["producer"]["errors"] == out["consumer"]["errors"] == 0
    assert out["consumer"]["msgs"] > 0
    e2e = out["consumer"]["e2e"]
    assert 0 < e2e["p50_ms"] <= e2e["p99_ms"] <= e2e["max_ms"] < 10_000


def test_a_paced_producer_sends_at_its_rate(broker: BrokerProcess, topic: str) -> None:
    """`--rate` sends each request on its own at its time: about rate x duration of them,
    none lost (the count is the check, not a speed)."""
    out = bench(broker.namesrv, "producer", "--topic", topic, "--duration", "2", "--rate", "300")
    producer = out["producer"]
    assert producer["errors"] == 0
    assert 500 <= producer["msgs"] <= 601


def test_sync_flush_needs_a_sync_flush_broker(broker: BrokerProcess, topic: str) -> None:
    refused = rmqpy("bench", "producer", "--topic", topic, "--sync-flush", "--duration", "1",
                    namesrv=broker.namesrv)  # fmt: skip
    assert refused.returncode == 1
    assert b"--flushDiskType SYNC_FLUSH" in refused.stderr


def test_sync_flush_against_a_sync_flush_broker(tmp_path: Path) -> None:
    sync = BrokerProcess(tmp_path / "store", extra={"flushDiskType": "SYNC_FLUSH"}).start()
    try:
        out = bench(sync.namesrv, "producer", "--topic", "SyncBench", "--sync-flush",
                    "--duration", "1.5", "--inflight", "16")  # fmt: skip
        assert out["sync_flush"] is True
        assert out["producer"]["msgs"] > 0 and out["producer"]["errors"] == 0
    finally:
        assert sync.stop() == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["producer", "--procs", "0"], b"must be positive"),
        (["consumer", "--namesrv", "127.0.0.1:1"], b"127.0.0.1:1"),
    ],
)
def test_bad_requests_fail_with_one_line(
    broker: BrokerProcess, args: list[str], message: bytes
) -> None:
    result = rmqpy("bench", *args, "--duration", "1", namesrv=broker.namesrv)
    assert result.returncode in (1, 2)
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_ctrl_c_stops_the_bench_and_its_load_processes_without_a_traceback(
    broker: BrokerProcess, topic: str
) -> None:
    """Ctrl-C signals the terminal's whole process group, the load processes with it: one
    line, exit 130, and no traceback from any of them (there was one from each)."""
    env = {**os.environ, "RMQPY_NAMESRV": broker.namesrv}
    with subprocess.Popen(
        [RMQPY, "bench", "producer", "--topic", topic, "--duration", "30", "--procs", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    ) as bench_run:  # fmt: skip
        time.sleep(3)  # the topic made and the load running
        os.killpg(bench_run.pid, signal.SIGINT)
        _, err = bench_run.communicate(timeout=30)
    text = err.decode()
    assert bench_run.returncode == 130, text[-2000:]
    assert "Traceback" not in text
    assert text.strip().splitlines()[-1] == "rmqpy bench: interrupted before the summary"
