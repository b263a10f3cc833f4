"""Plain ACL on a real broker process: requests signed from the spec (not with the broker's
own code), each permission case, bad and replayed signatures, the file reloaded under a
connected client, rogue broker registrations, and the SDK and CLI signing with an account."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rmqpy.client.admin import Admin
from rmqpy.client.consumer import ConsumeFrom
from rmqpy.client.errors import ClientError
from rmqpy.client.message import Message
from rmqpy.client.producer import Producer
from rmqpy.client.pull_consumer import PullConsumer
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.protocol import Connection
from rmqpy.remoting.signature import Credentials
from tests.broker.rpc import RC, json_of, pull_ext, send_ext
from tests.integration.daemon import BrokerProcess, broker_addrs, registered, standalone_namesrv
from tests.sdk.conftest import drain
from tests.spec_bytes import spec_signed

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ACL = """\
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Orders=PUB
      - Audit=PUB|SUB
      - Secret=DENY
  - accessKey: consumer1
    secretKey: consumer-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    topicPerms:
      - Secret=DENY
    groupPerms:
      - billing=SUB
  - accessKey: admin001
    secretKey: admin-secret
    admin: true
  - accessKey: trusted
    secretKey: trusted-secret
    whiteRemoteAddress: 127.0.0.*
"""
REFUSED = "org.apache.rocketmq.acl.common.AclException: "
ACCOUNTS = {
    "producer1": "producer-secret",
    "consumer1": "consumer-secret",
    "admin001": "admin-secret",
    "trusted": "trusted-secret",
}


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[BrokerProcess]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    process = BrokerProcess(
        tmp_path / "store", extra={"aclEnable": "true", "plainAclFile": str(acl)}
    ).start()
    yield process
    assert process.stop() == 0


async def request(
    conn: Connection,
    code: int,
    ext: dict[str, object],
    body: bytes = b"",
    account: str | None = None,
    secret: str | None = None,
) -> RemotingCommand:
    """A JSON request as a stock client sends it, signed from the spec when `account`."""
    fields = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in ext.items()}
    if account is not None:
        fields = spec_signed(fields, body, account, secret or ACCOUNTS[account])
    return await conn.invoke(RemotingCommand(code, ext_fields=fields, body=body), 5.0)


def refused(response: RemotingCommand, why: str) -> bool:
    return response.code == ResponseCode.SYSTEM_ERROR and response.remark == REFUSED + why


async def test_each_permission_case_as_a_4_9_broker_decides_it(broker: BrokerProcess) -> None:
    conn = await connect("127.0.0.1", broker.port)
    send = RC.SEND_MESSAGE_V2
    try:
        # Unsigned, or an account the file does not have.
        assert refused(await request(conn, send, send_ext("Orders"), b"x"),
                       "No accessKey is configured")  # fmt: skip
        assert refused(
            await request(conn, send, send_ext("Orders"), b"x", "nobody12", "whatever1"),
            "No acl config for nobody12",
        )
        # PUB on Orders; DENY on Secret; the DENY default elsewhere.
        ok = await request(conn, send, send_ext("Orders"), b"order 1", "producer1")
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert refused(await request(conn, send, send_ext("Secret"), b"x", "producer1"),
                       "No default permission for topic=Secret")  # fmt: skip
        assert refused(await request(conn, send, send_ext("Elsewhere"), b"x", "producer1"),
                       "No default permission for topic=Elsewhere")  # fmt: skip
        # A pull needs SUB on the topic and on the group: producer1 has PUB only on Orders.
        assert refused(await request(conn, RC.PULL_MESSAGE, pull_ext("Orders", 0, 0, "billing"),
                                     account="producer1"),
                       "No default permission for topic=Orders")  # fmt: skip
        # consumer1: SUB by default on topics, on the group billing only, DENY on Secret.
        pulled = await request(conn, RC.PULL_MESSAGE, pull_ext("Orders", 0, 0, "billing"),
                               account="consumer1")  # fmt: skip
        assert pulled.code == ResponseCode.SUCCESS and b"order 1" in pulled.body
        assert refused(await request(conn, RC.PULL_MESSAGE, pull_ext("Orders", 0, 0, "other"),
                                     account="consumer1"),
                       "No default permission for group=other")  # fmt: skip
        assert refused(await request(conn, RC.PULL_MESSAGE, pull_ext("Secret", 0, 0, "billing"),
                                     account="consumer1"),
                       "No default permission for topic=Secret")  # fmt: skip
        assert refused(await request(conn, send, send_ext("Orders"), b"x", "consumer1"),
                       "No default permission for topic=Orders")  # fmt: skip
        # Offsets: SUB on the group and the topic.
        commit = {"consumerGroup": "billing", "topic": "Orders", "queueId": 0, "commitOffset": 1}
        moved = await request(conn, RC.UPDATE_CONSUMER_OFFSET, commit, account="consumer1")
        assert moved.code == ResponseCode.SUCCESS, moved.remark
        assert refused(await request(conn, RC.UPDATE_CONSUMER_OFFSET,
                                     {**commit, "consumerGroup": "other"}, account="consumer1"),
                       "No default permission for group=other")  # fmt: skip
        # Admin codes need admin: true; an admin listing nothing may do everything.
        topic = {"topic": "Made", "defaultTopic": "TBW102", "readQueueNums": 4,
                 "writeQueueNums": 4, "perm": 6, "topicFilterType": "SINGLE_TAG",
                 "topicSysFlag": 0, "order": False}  # fmt: skip
        assert refused(
            await request(conn, RC.UPDATE_AND_CREATE_TOPIC, topic, account="consumer1"),
            "Need admin permission for request code=17, but accessKey=consumer1 is not",
        )
        made = await request(conn, RC.UPDATE_AND_CREATE_TOPIC, topic, account="admin001")
        assert made.code == ResponseCode.SUCCESS, made.remark
        stored = await request(conn, send, send_ext("Made"), b"y", "admin001")
        assert stored.code == ResponseCode.SUCCESS
        # An account's whitelisted address passes without a signature check.
        trusted = await request(
            conn, send, {**send_ext("Secret"), "AccessKey": "trusted", "Signature": "none"}, b"z"
        )
        assert trusted.code == ResponseCode.SUCCESS, trusted.remark
    finally:
        await conn.aclose()
    assert "request refused by the ACL" in broker.log_text()


async def test_a_wrong_signature_and_a_replayed_header_with_another_body_are_refused(
    broker: BrokerProcess,
) -> None:
    conn = await connect("127.0.0.1", broker.port)
    try:
        wrong = await request(conn, RC.SEND_MESSAGE_V2, send_ext("Orders"), b"x",
                              "producer1", "not-the-secret")  # fmt: skip
        assert refused(wrong, "Check signature failed for accessKey=producer1")
        fields = spec_signed(
            {k: str(v) for k, v in send_ext("Orders").items()}, b"pay 10", "producer1",
            ACCOUNTS["producer1"],
        )  # fmt: skip
        first = await conn.invoke(
            RemotingCommand(RC.SEND_MESSAGE_V2, ext_fields=dict(fields), body=b"pay 10"), 5.0
        )
        assert first.code == ResponseCode.SUCCESS
        replayed = await conn.invoke(
            RemotingCommand(RC.SEND_MESSAGE_V2, ext_fields=dict(fields), body=b"pay 99999"), 5.0
        )
        assert refused(replayed, "Check signature failed for accessKey=producer1")
        changed = await conn.invoke(
            RemotingCommand(RC.SEND_MESSAGE_V2, ext_fields={**fields, "b": "Audit"}, body=b"x"),
            5.0,
        )
        assert refused(changed, "Check signature failed for accessKey=producer1")
    finally:
        await conn.aclose()


async def test_the_acl_file_is_read_again_when_it_changes(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """Under a connected client: a global whitelist added lets its unsigned requests in; a
    file that no longer loads leaves those rules in force, and says so in the log."""
    conn = await connect("127.0.0.1", broker.port)
    acl = tmp_path / "plain_acl.yml"
    try:
        before = await request(conn, RC.SEND_MESSAGE_V2, send_ext("Open"), b"x")
        assert refused(before, "No accessKey is configured")
        acl.write_text("globalWhiteRemoteAddresses:\n  - 127.0.0.1\n" + ACL)
        deadline = time.monotonic() + 10
        while (await request(conn, RC.SEND_MESSAGE_V2, send_ext("Open"), b"x")).code:
            assert time.monotonic() < deadline, "the changed ACL file was not read again"
            await asyncio.sleep(0.2)
        acl.write_text("accounts: [this is not: valid")
        await asyncio.sleep(2.5)
        after = await request(conn, RC.SEND_MESSAGE_V2, send_ext("Open"), b"x")
        assert after.code == ResponseCode.SUCCESS
    finally:
        await conn.aclose()
    assert "ACL file not reloaded: the rules in force stay" in broker.log_text()


async def test_rogue_broker_registrations_are_refused_and_the_route_stays(
    broker: BrokerProcess,
) -> None:
    conn = await connect("127.0.0.1", broker.namesrv_port)
    try:
        body = json.dumps(
            {"topicConfigSerializeWrapper": {"topicConfigTable": {"Orders": {
                "topicName": "Orders", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}}},
             "filterServerList": []}
        ).encode()  # fmt: skip
        rogue = {"brokerName": "broker-a", "brokerAddr": "10.66.66.66:10911",
                 "clusterName": "DefaultCluster", "haServerAddr": "", "brokerId": 1,
                 "compressed": False}  # fmt: skip
        only_ours = "the embedded name server registers only its own broker"
        for account in (None, "admin001"):
            registered = await request(conn, RC.REGISTER_BROKER, rogue, body, account)
            assert refused(registered, only_ours)
            gone = await request(conn, RC.UNREGISTER_BROKER, rogue, account=account)
            assert refused(gone, only_ours)
        cluster = json_of(await request(conn, RC.GET_BROKER_CLUSTER_INFO, {}))
        assert cluster["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {
            "0": f"127.0.0.1:{broker.port}"
        }
    finally:
        await conn.aclose()


async def test_the_sdk_signs_with_its_account(broker: BrokerProcess) -> None:
    producer = Producer(
        "pg", broker.namesrv, credentials=Credentials("producer1", "producer-secret")
    )
    async with producer:
        await producer.send(Message("Orders", b"signed by the sdk"))
        with pytest.raises(ClientError, match="No default permission for topic=Secret"):
            await producer.send(Message("Secret", b"no"))
    consumer = PullConsumer(
        "billing",
        broker.namesrv,
        consume_from=ConsumeFrom.FIRST,
        credentials=Credentials("consumer1", "consumer-secret"),
    )
    consumer.subscribe("Orders")
    async with consumer:
        assert await drain(consumer, 1) == [b"signed by the sdk"]
    async with Admin(broker.namesrv, credentials=Credentials("admin001", "admin-secret")) as admin:
        await admin.create_topic("ByAdmin", 2)
    async with Admin(broker.namesrv, credentials=Credentials("producer1", "wrong-secret")) as admin:
        with pytest.raises(ClientError, match="Check signature failed"):
            await admin.create_topic("NotMine", 2)


def test_the_cli_signs_with_the_account_in_its_environment(broker: BrokerProcess) -> None:
    rmqpy = [str(ROOT / ".venv" / "bin" / "rmqpy")]
    base = {k: v for k, v in os.environ.items() if not k.startswith("RMQPY_")}
    base["RMQPY_NAMESRV"] = broker.namesrv
    signed = {**base, "RMQPY_ACCESS_KEY": "producer1", "RMQPY_SECRET_KEY": "producer-secret"}
    sent = subprocess.run([*rmqpy, "send", "Orders", "from the cli"], env=signed,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    unsigned = subprocess.run([*rmqpy, "send", "Orders", "unsigned"], env=base,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert unsigned.returncode != 0
    assert "No accessKey is configured" in unsigned.stderr + unsigned.stdout


def test_acl_enable_without_a_readable_file_stops_the_start(tmp_path: Path) -> None:
    missing = tmp_path / "conf" / "plain_acl.yml"
    proc = subprocess.run(
        [sys.executable, "-m", "rmqpy.broker", "--storePathRootDir", str(tmp_path / "s"),
         "--listenPort", "0", "--namesrvListenPort", "0", "--metricsPort", "0",
         "--aclEnable", "true", "--plainAclFile", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    lines = [line for line in proc.stderr.splitlines() if line.startswith("rmqpy broker:")]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert len(lines) == 1 and str(missing) in lines[0] and "aclEnable" in lines[0]
    assert not (tmp_path / "s").exists()


async def test_a_standalone_name_server_takes_registrations_from_admin_accounts_only(
    tmp_path: Path,
) -> None:
    """`rmqpy namesrv` with the same ACL: a broker signing with an admin account
    (namesrvAccessKey) is routed; rogue registrations, unsigned or by a non-admin account,
    are refused, and so is a rogue's UNREGISTER_BROKER; route queries stay open."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    with standalone_namesrv("--aclEnable", "true", "--plainAclFile", str(acl)) as ns_port:
        broker = BrokerProcess(
            tmp_path / "store",
            extra={"namesrvAddr": f"127.0.0.1:{ns_port}", "namesrvListenPort": "0",
                   "namesrvAccessKey": "admin001", "namesrvSecretKey": "admin-secret"},
        ).start()  # fmt: skip
        ns = await connect("127.0.0.1", ns_port)
        try:
            await registered(ns, broker)
            rogue = {"brokerName": "broker-a", "brokerAddr": "10.66.66.66:10911",
                     "clusterName": "DefaultCluster", "haServerAddr": "", "brokerId": 1,
                     "compressed": False}  # fmt: skip
            body = b'{"topicConfigSerializeWrapper": {"topicConfigTable": {}}}'
            assert refused(await request(ns, RC.REGISTER_BROKER, rogue, body),
                           "No accessKey is configured")  # fmt: skip
            assert refused(
                await request(ns, RC.REGISTER_BROKER, rogue, body, "producer1"),
                "Need admin permission for request code=103, but accessKey=producer1 is not",
            )
            ours = {k: v for k, v in rogue.items() if k != "haServerAddr"}
            ours.update(brokerAddr=f"127.0.0.1:{broker.port}", brokerId=0)
            assert refused(
                await request(ns, RC.UNREGISTER_BROKER, ours, account="consumer1"),
                "Need admin permission for request code=104, but accessKey=consumer1 is not",
            )
            cluster = json_of(await request(ns, RC.GET_BROKER_CLUSTER_INFO, {}))
            assert broker_addrs(cluster) == {"0": f"127.0.0.1:{broker.port}"}
        finally:
            await ns.aclose()
            assert broker.stop() == 0
