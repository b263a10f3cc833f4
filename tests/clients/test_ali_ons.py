"""ali-ons 3.12.0, a stock RocketMQ 4.x client in pure JavaScript, against `python -m rmqpy.broker`.

The client talks JSON headers, finds the broker through the embedded name server, sends
with SEND_MESSAGE_V2 and consumes with long-polling pulls, heartbeats, rebalancing, offset
commits and CONSUMER_SEND_MSG_BACK. `make test` installs it (npm ci) beside this file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon import BrokerProcess

HERE = Path(__file__).resolve().parent / "ali_ons"
RMQPY = str(Path(sys.executable).parent / "rmqpy")

pytestmark = pytest.mark.slow


def node_client(
    mode: str, timeout_s: float = 60.0, fails: bool = False, **opts: Any
) -> list[dict[str, Any]]:
    """Run client.js and return its JSON events; a failing client fails the test (with
    `fails`, one that succeeds does, and the events are its stderr's last line)."""
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for the ali-ons tests"
    assert (HERE / "node_modules" / "ali-ons").is_dir(), "run `make test` (it installs ali-ons)"
    proc = subprocess.run(
        [node, str(HERE / "client.js"), mode, json.dumps(opts)],
        capture_output=True,
        timeout=timeout_s,
        check=False,
    )
    if fails:
        assert proc.returncode != 0, proc.stdout.decode()
        return [{"error": proc.stderr.decode(errors="replace")}]
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]


def rmqpy(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[bytes]:
    """The `rmqpy` command against the broker's name server."""
    return subprocess.run(
        [RMQPY, *args, "--namesrv", broker.namesrv], capture_output=True, timeout=60, check=False
    )


def rmqpy_json(broker: BrokerProcess, *args: str) -> list[Any]:
    result = rmqpy(broker, *args, "--json")
    assert result.returncode == 0, result.stderr.decode()
    return [json.loads(line) for line in result.stdout.decode().splitlines() if line.strip()]


def create_topic(broker: BrokerProcess, topic: str, queues: int = 4) -> None:
    """As an ali-ons user creates topics before sending (mqadmin updateTopic with Java)."""
    result = rmqpy(broker, "topic", "create", topic, "--queues", str(queues))
    assert result.returncode == 0, result.stderr.decode()


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
    create_topic(broker, "OnsRoundTrip")
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
    create_topic(broker, "OnsResume")
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
    create_topic(broker, "OnsRetry")
    produced = sent(node_client("produce", nameSrv=ns, topic="OnsRetry", count=3, prefix="retry"))
    events = node_client(
        "consume", nameSrv=ns, topic="OnsRetry", group="ons-rty", expect=3, failFirst="retry body 1"
    )
    assert [e["failed"]["body"] for e in events if "failed" in e] == ["retry body 1"]
    got = {m["body"]: m for m in received(events)}
    assert set(got) == {f"retry body {i}" for i in range(3)}
    assert got["retry body 1"]["reconsumeTimes"] == 1
    assert got["retry body 1"]["topic"] == "OnsRetry"  # the client restores it from RETRY_TOPIC
    assert got["retry body 0"]["reconsumeTimes"] == 0
    # ali-ons sets no UNIQ_KEY: its ids are offsetMsgIds, and the retried copy names the
    # original by the id its producer got back, as a Java broker does.
    first_id = next(m["msgId"] for m in produced if m["body"] == "retry body 1")
    assert got["retry body 1"]["properties"]["ORIGIN_MESSAGE_ID"] == first_id
    # It travelled through the group's retry topic on the broker, not a local retry.
    assert (broker.store_dir / "consumequeue" / "%RETRY%ons-rty").is_dir()


def test_ids_of_an_ali_ons_producer_are_the_ones_rmqpy_reports_and_finds(
    broker: BrokerProcess,
) -> None:
    create_topic(broker, "OnsIds", queues=2)
    out = sent(node_client("produce", nameSrv=broker.namesrv, topic="OnsIds", count=4, prefix="id"))
    consumed = rmqpy_json(broker, "consume", "OnsIds", "--max", "4", "--from", "first")
    assert {m["body"]: m["msgId"] for m in consumed} == {m["body"]: m["msgId"] for m in out}
    for m in out:
        for where in ([], ["--topic", "OnsIds"]):
            [found] = rmqpy_json(broker, "query", "id", m["msgId"], *where)
            assert found["body"] == m["body"]


def test_an_rmqpy_producers_msg_id_reaches_ali_ons_as_uniq_key_through_a_retry(
    broker: BrokerProcess,
) -> None:
    create_topic(broker, "OnsUniq", queues=2)
    ids = {}
    for i in range(3):
        [result] = rmqpy_json(broker, "send", "OnsUniq", f"uniq body {i}")
        ids[f"uniq body {i}"] = result["msgId"]
    events = node_client(
        "consume", nameSrv=broker.namesrv, topic="OnsUniq", group="ons-uniq", expect=3,
        failFirst="uniq body 2",
    )  # fmt: skip
    [failed] = [e["failed"] for e in events if "failed" in e]
    assert failed["properties"]["UNIQ_KEY"] == ids["uniq body 2"]
    got = {m["body"]: m for m in received(events)}
    assert {body: m["properties"]["UNIQ_KEY"] for body, m in got.items()} == ids
    # The retried copy keeps the producer's id and names the original it was copied from.
    retried = got["uniq body 2"]
    assert retried["reconsumeTimes"] == 1
    assert retried["properties"]["ORIGIN_MESSAGE_ID"] == failed["msgId"]
    for body, msg_id in ids.items():
        [found] = rmqpy_json(broker, "query", "id", msg_id, "--topic", "OnsUniq")
        assert found["body"] == body


def test_a_new_topic_needs_creating_or_the_default_route_option(tmp_path: Path) -> None:
    plain = BrokerProcess(tmp_path / "plain").start()
    try:
        [failure] = node_client(
            "produce", fails=True, nameSrv=plain.namesrv, topic="OnsNew", count=1, prefix="n"
        )
        assert "No topic route info in name server for the topic: OnsNew" in failure["error"]
        assert rmqpy(plain, "topic", "route", "OnsNew").returncode == 1  # nothing was created
    finally:
        assert plain.stop() == 0, plain.log_text()
    routed = BrokerProcess(
        tmp_path / "routed", extra={"routeUnknownTopicsThroughDefault": "true"}
    ).start()
    try:
        out = sent(
            node_client("produce", nameSrv=routed.namesrv, topic="OnsNew", count=8, prefix="n")
        )
        assert len(out) == 8 and {int(m["queueId"]) for m in out} == {0, 1, 2, 3}
        [listed] = rmqpy_json(routed, "topic", "list")
        [topic] = [t for t in listed if t["topic"] == "OnsNew"]
        assert (topic["read"], topic["write"], topic["perm"]) == (4, 4, 6)
    finally:
        assert routed.stop() == 0, routed.log_text()


ONS_ACL = """\
accounts:
  - accessKey: ons-producer
    secretKey: ons-producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [OnsSigned=PUB]
  - accessKey: ons-consumer
    secretKey: ons-consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [OnsSigned=SUB]
    groupPerms: [ons-signed=SUB]
  - accessKey: ons-admin01
    secretKey: ons-admin-secret
    admin: true
"""


def test_a_signing_ali_ons_is_accepted_with_its_keys_and_refused_without(tmp_path: Path) -> None:
    """ali-ons signs as RocketMQ's AclClientRPCHook does (its extra OnsChannel field is sent
    and signed like any other): with plain ACL on, its producer and consumer get through with
    their accounts; a wrong secret or no keys are refused with the broker's reason."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ONS_ACL)
    broker = BrokerProcess(
        tmp_path / "store", extra={"aclEnable": "true", "plainAclFile": str(acl)}
    ).start()
    try:
        admin = {"RMQPY_ACCESS_KEY": "ons-admin01", "RMQPY_SECRET_KEY": "ons-admin-secret"}
        made = subprocess.run(
            [RMQPY, "topic", "create", "OnsSigned", "--namesrv", broker.namesrv],
            env={**os.environ, **admin}, capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr.decode()
        producer: dict[str, Any] = {"accessKey": "ons-producer", "secretKey": "ons-producer-secret"}
        out = sent(node_client("produce", nameSrv=broker.namesrv, topic="OnsSigned", count=5,
                               prefix="signed", **producer))  # fmt: skip
        assert len(out) == 5
        [wrong] = node_client("produce", fails=True, nameSrv=broker.namesrv, topic="OnsSigned",
                              count=1, prefix="w", accessKey="ons-producer",
                              secretKey="not-the-secret")  # fmt: skip
        assert "still failed" in wrong["error"]  # ali-ons retries, then gives up
        assert "Check signature failed for accessKey=ons-producer" in broker.log_text()
        [unsigned] = node_client("produce", fails=True, nameSrv=broker.namesrv,
                                 topic="OnsSigned", count=1, prefix="u")  # fmt: skip
        assert "still failed" in unsigned["error"]
        got = received(node_client("consume", nameSrv=broker.namesrv, topic="OnsSigned",
                                   group="ons-signed", expect=5, accessKey="ons-consumer",
                                   secretKey="ons-consumer-secret"))  # fmt: skip
        assert sorted(m["body"] for m in got) == sorted(m["body"] for m in out)  # only those
        refused = node_client("consume", fails=True, nameSrv=broker.namesrv, topic="OnsSigned",
                              group="ons-signed", expect=1, timeoutMs=3000,
                              **producer)  # fmt: skip
        assert "No default permission" in refused[0]["error"]
    finally:
        assert broker.stop() == 0, broker.log_text()
