"""Sending: single messages in every header encoding, batches, and the refusals."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from pathlib import Path

import pytest

from rmqpy.broker.controller import BrokerController
from rmqpy.remoting.batch_body import BatchItem, encode_batch_body
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode, SerializeType
from rmqpy.remoting.protocol import Connection
from rmqpy.store.message_id import decode_offset_msg_id
from tests.broker.conftest import BrokerFactory
from tests.broker.rpc import RC, call, dispatched, pull, records, send, send_batch, send_ext


@pytest.mark.parametrize("serialize_type", list(SerializeType))
async def test_send_then_pull_in_each_header_encoding(
    client: Connection, serialize_type: SerializeType
) -> None:
    sent = await send(
        client, "SendT", b"hello", 1, tags="TagA", keys="k1 k2", serialize_type=serialize_type
    )
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    assert sent.serialize_type == serialize_type
    assert sent.ext_fields["queueId"] == "1"
    assert sent.ext_fields["queueOffset"] == "0"
    host, phy = decode_offset_msg_id(sent.ext_fields["msgId"])
    assert str(host).startswith("127.0.0.1:") and phy == 0
    got = await pull(client, "SendT", 1, 0)
    assert got.code == ResponseCode.SUCCESS
    [record] = records(got.body)
    assert (record.topic, record.body, record.tags, record.keys) == (
        "SendT",
        b"hello",
        "TagA",
        ["k1", "k2"],
    )
    assert record.properties["CLUSTER"] == "DefaultCluster"


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_sends_are_stored_on_the_loop_in_both_flush_modes(
    start_broker: BrokerFactory, flush: str
) -> None:
    """Under SYNC_FLUSH too: a send does not wait for its flush on a thread; it is answered
    once the group commit has made it durable."""
    broker = await start_broker(flushDiskType=flush)
    conn = await connect("127.0.0.1", broker.port)
    try:
        sent = await send(conn, "LoopT", b"x")
    finally:
        await conn.aclose()
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    pool = [t for t in threading.enumerate() if t.name.startswith("rmqpy-send")]
    assert pool == []


async def test_v1_header_names_are_accepted(client: Connection) -> None:
    ext = {
        "producerGroup": "pg",
        "topic": "V1T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": 0,
        "sysFlag": 0,
        "bornTimestamp": 1,
        "flag": 7,
        "properties": "TAGS\x01X\x02",
    }
    sent = await call(client, RC.SEND_MESSAGE, ext, b"v1")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    [record] = records((await pull(client, "V1T", 0, 0)).body)
    assert (record.body, record.flag, record.tags) == (b"v1", 7, "X")


async def test_batch_is_stored_as_consecutive_messages(
    broker: BrokerController, client: Connection
) -> None:
    await send(client, "BatchT", b"first")
    sent = await send_batch(client, "BatchT", [b"a", b"b", b"c"])
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    assert sent.ext_fields["queueOffset"] == "1"
    ids = sent.ext_fields["msgId"].split(",")
    assert len(ids) == 3
    await dispatched(broker)
    got = records((await pull(client, "BatchT", 0, 1)).body)
    assert [r.body for r in got] == [b"a", b"b", b"c"]
    assert [r.queue_offset for r in got] == [1, 2, 3]
    assert [decode_offset_msg_id(i)[1] for i in ids] == [r.physical_offset for r in got]
    # The item's own properties, then the batch's.
    assert got[1].properties["KEYS"] == "batch-1"
    assert got[1].properties["WAIT"] == "true"
    assert got[1].properties["CLUSTER"] == "DefaultCluster"


async def test_batch_records_hold_each_items_properties_as_sent_then_the_batchs(
    broker: BrokerController, client: Connection
) -> None:
    """RocketMQ's batch encoding: an item's properties as sent, a \\x02 where they lack their
    last one, then the batch's (with CLUSTER); TAGS and KEYS inside an item still tag and
    index it."""
    items = [BatchItem(0, b"a", "TAGS\x01TagA\x02KEYS\x01key-a"), BatchItem(0, b"b", "")]
    ext = send_ext("BatchPropsT", 0, {"WAIT": "true"}, m=True)
    sent = await call(client, RC.SEND_BATCH_MESSAGE, ext, encode_batch_body(items))
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    await dispatched(broker)
    body = (await pull(client, "BatchPropsT", 0, 0)).body
    first, second = records(body)
    batch_props = b"WAIT\x01true\x02CLUSTER\x01DefaultCluster\x02"
    first_props = b"TAGS\x01TagA\x02KEYS\x01key-a\x02" + batch_props
    assert body[: first.total_size].endswith(struct.pack(">h", len(first_props)) + first_props)
    assert body[first.total_size :].endswith(struct.pack(">h", len(batch_props)) + batch_props)
    assert (first.tags, first.keys, second.tags) == ("TagA", ["key-a"], None)
    tagged = records((await pull(client, "BatchPropsT", 0, 0, subscription="TagA")).body)
    assert [r.body for r in tagged] == [b"a"]
    assert broker.store is not None
    [found] = broker.store.query_message("BatchPropsT", "key-a", 8).messages
    assert records(found)[0].body == b"a"


async def test_a_message_with_a_delay_level_is_delivered_when_due(
    broker: BrokerController, client: Connection
) -> None:
    sent_ms = time.time() * 1000
    ext = send_ext("DelayedT", 2, {"DELAY": "1", "TAGS": "Later"})
    sent = await call(client, RC.SEND_MESSAGE_V2, ext, b"soon")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    assert sent.ext_fields["queueId"] == "2"
    [got] = records((await pull(client, "DelayedT", 2, 0)).body)  # long polling: when due
    assert (got.body, got.tags) == (b"soon", "Later")
    assert got.store_timestamp >= sent_ms + 100 - 2  # level 1 is 100 ms in the tests


async def test_a_batch_cannot_take_a_delay_level(
    broker: BrokerController, client: Connection
) -> None:
    items = [BatchItem(0, b"a", ""), BatchItem(0, b"b", "")]
    ext = send_ext("BatchDelayT", 0, {"WAIT": "true", "DELAY": "2"}, m=True)
    refused = await call(client, RC.SEND_BATCH_MESSAGE, ext, encode_batch_body(items))
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL
    assert "delay" in (refused.remark or "")
    await dispatched(broker)
    got = await pull(client, "BatchDelayT", 0, 0, suspend_ms=0)
    assert got.code != ResponseCode.SUCCESS  # nothing stored


async def test_the_schedule_topic_takes_no_sends(client: Connection) -> None:
    refused = await send(client, "SCHEDULE_TOPIC_XXXX", b"sneaky")
    assert refused.code == ResponseCode.NO_PERMISSION
    assert "SCHEDULE_TOPIC_XXXX" in (refused.remark or "")


async def test_a_topic_auto_created_by_a_send_takes_the_clients_default_queue_count(
    broker: BrokerController, client: Connection
) -> None:
    # As a Java broker: min(the client's defaultTopicQueueNums, TBW102's 8 queues).
    assert (await send(client, "AutoT", b"x", 3)).code == ResponseCode.SUCCESS
    config = broker.topics.get("AutoT")
    assert config is not None and (config.readQueueNums, config.writeQueueNums) == (4, 4)
    assert config.perm == 6  # TBW102's, less INHERIT
    assert '"AutoT"' in Path(broker.topics.path).read_text()
    wide = await call(client, RC.SEND_MESSAGE_V2, send_ext("AutoWide", 7, d=16), b"x")
    assert wide.code == ResponseCode.SUCCESS
    config = broker.topics.get("AutoWide")
    assert config is not None and config.writeQueueNums == 8
    # A queue past the new topic's count is refused, and nothing is stored in it.
    beyond = await call(client, RC.SEND_MESSAGE_V2, send_ext("AutoNarrow", 5), b"x")
    assert beyond.code == ResponseCode.SYSTEM_ERROR
    assert "queueId[5] is illegal" in (beyond.remark or "")


@pytest.mark.parametrize(
    ("topic", "queue_id", "body", "props", "code", "remark"),
    [
        (
            "Big",
            0,
            b"x" * (4 * 1024 * 1024 + 1),
            {},
            ResponseCode.MESSAGE_ILLEGAL,
            "msg body length limit",
        ),
        ("Props", 0, b"x", {"P": "v" * 40000}, ResponseCode.MESSAGE_ILLEGAL, "properties"),
        ("bad topic!", 0, b"x", {}, ResponseCode.SYSTEM_ERROR, "characters"),
        ("Range", 8, b"x", {}, ResponseCode.SYSTEM_ERROR, "queueId[8] is illegal"),
        ("TBW102", 0, b"x", {}, ResponseCode.NO_PERMISSION, "forbidden"),
    ],
)
async def test_bad_sends_are_refused_and_nothing_is_stored(
    broker: BrokerController,
    client: Connection,
    topic: str,
    queue_id: int,
    body: bytes,
    props: dict[str, str],
    code: int,
    remark: str,
) -> None:
    response = await call(client, RC.SEND_MESSAGE_V2, send_ext(topic, queue_id, props), body)
    assert response.code == code
    assert remark in (response.remark or "")
    assert broker.store is not None and broker.store.commitlog.max_offset() == 0
    assert (await send(client, "StillFine", b"ok")).code == ResponseCode.SUCCESS


async def test_unknown_topic_without_auto_create(start_broker: BrokerFactory) -> None:
    broker = await start_broker(autoCreateTopicEnable="false")
    conn = await connect("127.0.0.1", broker.port)
    response = await send(conn, "NoSuchT", b"x")
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert response.remark == "topic[NoSuchT] not exist, apply first please!"
    await conn.aclose()


@pytest.mark.parametrize(
    ("props", "sys_flag"),
    [
        ({"TRAN_MSG": "true", "PGROUP": "tx-producer"}, 4),  # what TransactionMQProducer sends
        ({"TRAN_MSG": "TRUE"}, 0),
        ({}, 4),
    ],
)
async def test_a_transaction_half_message_is_refused_not_stored(
    client: Connection, props: dict[str, str], sys_flag: int
) -> None:
    """rmqpy has no transactions yet. A half message would be acknowledged and then wait
    for an END_TRANSACTION that a Java client sends oneway and nothing serves, invisible to
    consumers for ever; it is refused NO_PERMISSION, as a Java broker with
    rejectTransactionMessage refuses it, so the producer's sendMessageInTransaction fails."""
    assert (await send(client, "TxT", b"plain")).code == ResponseCode.SUCCESS
    ext = send_ext("TxT", 0, props)
    ext["f"] = sys_flag
    half = await call(client, RC.SEND_MESSAGE_V2, ext, b"half")
    assert half.code == ResponseCode.NO_PERMISSION
    assert "sending transaction message is forbidden" in (half.remark or "")
    assert (await send(client, "TxT", b"after")).code == ResponseCode.SUCCESS
    got = records((await pull(client, "TxT", 0, 0)).body)
    assert [(r.body, r.queue_offset) for r in got] == [(b"plain", 0), (b"after", 1)]


async def test_a_sync_send_whose_flush_stalls_is_answered_flush_disk_timeout(
    start_broker: BrokerFactory,
) -> None:
    """Under SYNC_FLUSH a send is answered once its group commit is done, and with
    FLUSH_DISK_TIMEOUT (stored, durability not confirmed: msgId and offset given) once
    `syncFlushTimeout` passes without it. Nothing waits on the loop meanwhile: another
    client is served while the disk stalls."""
    broker = await start_broker(flushDiskType="SYNC_FLUSH", syncFlushTimeout=300)
    conn = await connect("127.0.0.1", broker.port)
    other = await connect("127.0.0.1", broker.port)
    try:
        assert (await send(conn, "StallT", b"0")).code == ResponseCode.SUCCESS
        assert broker.store is not None
        mapped = broker.store.commitlog.queue.last()
        assert mapped is not None
        with mapped._flush_lock:  # a stalled disk: the group commit cannot start its fsync
            started = time.monotonic()
            stalled = asyncio.ensure_future(send(conn, "StallT", b"1"))
            await asyncio.sleep(0.05)
            served = await call(other, RC.GET_BROKER_RUNTIME_INFO, {})
            assert served.code == ResponseCode.SUCCESS and not stalled.done()
            answer = await stalled
            waited = time.monotonic() - started
        assert answer.code == ResponseCode.FLUSH_DISK_TIMEOUT, answer.remark
        assert answer.ext_fields["queueOffset"] == "1" and answer.ext_fields["msgId"]
        assert 0.3 <= waited < 3
        assert (await send(conn, "StallT", b"2")).code == ResponseCode.SUCCESS
        got = await pull(conn, "StallT", 0, 0)
        assert [r.body for r in records(got.body)] == [b"0", b"1", b"2"]
    finally:
        await conn.aclose()
        await other.aclose()
