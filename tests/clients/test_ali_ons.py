"""ali-ons 3.12.0, a stock RocketMQ 4.x client in pure JavaScript, against `python -m broker`.

The client talks JSON headers, finds the broker through the embedded name server, sends
with SEND_MESSAGE_V2 and consumes with long-polling pulls, heartbeats, rebalancing, offset
commits and CONSUMER_SEND_MSG_BACK. `make test` installs it (npm ci) beside this file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon import BrokerProcess

HERE = Path(__file__).resolve().parent / "ali_ons"

pytestmark = pytest.mark.slow


def node_client(mode: str, timeout_s: float = 60.0, **opts: Any) -> list[dict[str, Any]]:
    """Run client.js and return its JSON events; a failing client fails the test."""
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for the ali-ons tests"
    assert (HERE / "node_modules" / "ali-ons").is_dir(), "run `make test` (it installs ali-ons)"
    proc = subprocess.run(
        [node, str(HERE / "client.js"), mode, json.dumps(opts)],
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "store").start()
    yield process
    assert process.stop() == 0, process.log_text()


def sent(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["sent"] for e in events if "sent" in e]


def received(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["received"] for e in events if "received" in e]


def test_producer_and_push_consumer_round_trip(broker: BrokerProcess) -> None:
    out = sent(
        node_client(
            "produce",
            nameSrv=broker.namesrv,
            topic="OnsRoundTrip",
            count=20,
            prefix="rt",
            tag="TagA",
        )
    )
    assert len(out) == 20
    got = received(
        node_client(
            "consume", nameSrv=broker.namesrv, topic="OnsRoundTrip", group="ons-rt", expect=20
        )
    )
    assert sorted(m["body"] for m in got) == sorted(m["body"] for m in out)
    assert {m["msgId"] for m in got} == {m["msgId"] for m in out}
    by_body = {m["body"]: m for m in got}
    for m in out:
        assert by_body[m["body"]]["keys"] == m["key"]
        assert by_body[m["body"]]["tags"] == "TagA"
        assert by_body[m["body"]]["topic"] == "OnsRoundTrip"


def test_restarted_consumer_resumes_from_its_committed_offset(broker: BrokerProcess) -> None:
    ns = broker.namesrv
    node_client("produce", nameSrv=ns, topic="OnsResume", count=10, prefix="first")
    first = received(
        node_client(
            "consume", nameSrv=ns, topic="OnsResume", group="ons-rs", expect=10, settleMs=1500
        )
    )
    assert len(first) == 10
    node_client("produce", nameSrv=ns, topic="OnsResume", count=4, prefix="second")
    # Wait past the 4 new ones: anything acknowledged before would show up as extras.
    again = received(
        node_client(
            "consume", nameSrv=ns, topic="OnsResume", group="ons-rs", expect=4, settleMs=3000
        )
    )
    assert sorted(m["body"] for m in again) == [f"second body {i}" for i in range(4)]


def test_failed_message_comes_back_through_the_retry_topic(broker: BrokerProcess) -> None:
    ns = broker.namesrv
    node_client("produce", nameSrv=ns, topic="OnsRetry", count=3, prefix="retry")
    events = node_client(
        "consume", nameSrv=ns, topic="OnsRetry", group="ons-rty", expect=3, failFirst="retry body 1"
    )
    assert [e["failed"]["body"] for e in events if "failed" in e] == ["retry body 1"]
    got = {m["body"]: m for m in received(events)}
    assert set(got) == {f"retry body {i}" for i in range(3)}
    assert got["retry body 1"]["reconsumeTimes"] == 1
    assert got["retry body 1"]["topic"] == "OnsRetry"  # the client restores it from RETRY_TOPIC
    assert got["retry body 0"]["reconsumeTimes"] == 0
    # It travelled through the group's retry topic on the broker, not a local retry.
    assert (broker.store_dir / "consumequeue" / "%RETRY%ons-rty").is_dir()
