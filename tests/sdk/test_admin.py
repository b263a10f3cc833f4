"""The admin API against a real broker."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from rmqpy.client.admin import Admin
from rmqpy.client.consumer import ConsumeFrom
from rmqpy.client.errors import ClientError
from rmqpy.client.message import Message, MessageQueue, ReceivedMessage
from rmqpy.client.producer import Producer
from rmqpy.client.push_consumer import ConsumeResult, PushConsumer
from tests.integration.daemon import BrokerProcess
from tests.sdk.conftest import until


async def test_topics_are_created_listed_routed_and_deleted(admin: Admin, topic: str) -> None:
    await admin.create_topic(topic, queues=3)
    topics = await admin.topics()
    assert topics[topic]["writeQueueNums"] == 3
    route = await admin.route(topic)
    assert [q.queue_id for q in route.write_queues()] == [0, 1, 2]
    await admin.delete_topic(topic)
    assert topic not in await admin.topics()


async def test_runtime_info_of_every_broker(admin: Admin, broker: BrokerProcess) -> None:
    info = await admin.runtime_info()
    assert list(info) == [f"127.0.0.1:{broker.port}"]
    assert int(info[f"127.0.0.1:{broker.port}"]["commitLogMaxOffset"]) >= 0


async def test_query_by_key_and_by_both_ids(admin: Admin, producer: Producer, topic: str) -> None:
    sent = await producer.send(Message(topic, b"findme", keys="order-42 user-1"))
    await producer.send(Message(topic, b"other", keys="order-43"))
    async with asyncio.timeout(10):  # the index trails the acknowledgement by a moment
        while not (found := await admin.query_by_key(topic, "order-42")):
            await asyncio.sleep(0.05)
    assert [m.body for m in found] == [b"findme"]
    by_uniq = await admin.query_by_id(sent.msg_id, topic)
    by_offset = await admin.query_by_id(sent.offset_msg_id)
    assert by_uniq.body == by_offset.body == b"findme"
    assert by_offset.offset_msg_id == sent.offset_msg_id
    with pytest.raises(ClientError, match="no message with id"):
        await admin.query_by_id("0" * 32)


async def test_offsets_lag_and_search_by_time(admin: Admin, producer: Producer, topic: str) -> None:
    await admin.create_topic(topic, queues=2)
    mq = MessageQueue(topic, "broker-a", 1)
    for i in range(3):
        await producer.send(Message(topic, f"a{i}".encode()), queue=mq)
    await asyncio.sleep(0.05)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    for i in range(2):
        await producer.send(Message(topic, f"b{i}".encode()), queue=mq)
    # Consume queues are written by dispatch a few ms after the send is acknowledged (as in
    # RocketMQ, whose reput runs every 1 ms): wait for it, within reason.
    deadline = time.monotonic() + 5
    while True:
        rows = {r.queue.queue_id: r for r in await admin.consumer_offsets("nobody", topic)}
        if rows[1].max_offset == 5 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.005)
    assert (rows[1].min_offset, rows[1].max_offset) == (0, 5)
    assert rows[1].lag == 5 - (rows[1].committed or 0)
    found = await admin.search_offset(topic, middle)
    assert found[mq] == 3


async def test_an_operator_watches_a_group_and_replays_it_while_it_consumes(
    admin: Admin, producer: Producer, namesrv: str, topic: str
) -> None:
    """Progress, members and a reset to the start while a push consumer is online: the
    consumer drops where it was and delivers everything again."""
    await admin.create_topic(topic, queues=2)
    for i in range(6):
        await producer.send(Message(topic, f"m{i}".encode()))
    seen: list[bytes] = []

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        seen.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    group = f"{topic}-group"
    consumer = PushConsumer(group, namesrv, listener=listener, consume_from=ConsumeFrom.FIRST,
                            rebalance_interval_s=1.0, commit_interval_s=0.2)  # fmt: skip
    consumer.subscribe(topic, "*")
    async with consumer:
        await until(lambda: len(seen) >= 6, what="the first delivery")
        members = await admin.members(group)
        assert [c["clientId"] for c in members.connections] == [consumer.client_id]
        assert members.subscriptions == {topic: "*", f"%RETRY%{group}": "*"}
        assert members.message_model == "CLUSTERING"
        assert members.connections[0]["language"] == "PYTHON"
        async with asyncio.timeout(10):  # until the consumer's commit reaches the broker
            while (await admin.progress(group, topic)).lag:
                await asyncio.sleep(0.1)
        progress = await admin.progress(group, topic)
        assert sum(q.consumer_offset for q in progress.queues) == 6
        assert all(q.last_timestamp_ms > 0 for q in progress.queues if q.consumer_offset)
        assert group in await admin.consumed_by(topic)
        reset = await admin.reset_offsets(group, topic, 0)
        assert set(reset.values()) == {0} and len(reset) == 2
        await until(lambda: len(seen) >= 12, what="the replay")
    assert sorted(seen[6:]) == sorted(seen[:6])


async def test_a_topic_status_and_a_group_made_by_hand(
    admin: Admin, producer: Producer, topic: str
) -> None:
    await admin.create_topic(topic, queues=2)
    await producer.send(Message(topic, b"x"), queue=MessageQueue(topic, "broker-a", 1))
    status = {s.queue.queue_id: s for s in await admin.topic_status(topic)}
    assert (status[0].max_offset, status[1].max_offset) == (0, 1)
    assert status[1].last_update_ms > 0 and status[0].last_update_ms == 0
    group = f"{topic}-made"
    await admin.create_group(group, retryMaxTimes=2)
    assert (await admin.groups())[group]["retryMaxTimes"] == 2
    await admin.delete_group(group)
    assert group not in await admin.groups()
    with pytest.raises(ClientError, match="online"):
        await admin.members(group)
    config = (await admin.broker_config()).popitem()[1]
    assert config["brokerName"] == "broker-a"


async def test_a_dead_letter_is_given_back_to_its_group_only(
    admin: Admin, producer: Producer, namesrv: str, topic: str
) -> None:
    """A message that went to %DLQ%group after its retries is resent to the group's retry
    topic: that group (and no other) consumes it again, under its original topic."""
    failing = True
    delivered: list[tuple[str, bytes]] = []

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        if failing:
            return ConsumeResult.RECONSUME_LATER
        delivered.extend((m.topic, m.body) for m in msgs)
        return ConsumeResult.SUCCESS

    group = f"{topic}-dlq"
    await admin.create_topic(topic, queues=1)
    consumer = PushConsumer(group, namesrv, listener=listener, consume_from=ConsumeFrom.FIRST,
                            rebalance_interval_s=1.0, max_reconsume_times=1)  # fmt: skip
    consumer.subscribe(topic, "*")
    async with consumer:
        await producer.send(Message(topic, b"poison", keys="p-1"))
        dlq = f"%DLQ%{group}"
        async with asyncio.timeout(20):
            while True:
                with contextlib.suppress(ClientError):
                    if sum(q.max_offset for q in await admin.topic_status(dlq)):
                        break
                await asyncio.sleep(0.2)
        [dead] = await admin.browse(MessageQueue(dlq, "broker-a", 0), 0, 10)
        assert dead.body == b"poison" and dead.reconsume_times >= 1
        failing = False
        copy_id = await admin.resend_to_group(group, dead)
        await until(lambda: bool(delivered), what="the resent message")
    assert delivered == [(topic, b"poison")] and copy_id == dead.msg_id  # as a retry keeps it


async def test_one_message_is_handed_to_one_consumer_to_try(
    admin: Admin, producer: Producer, namesrv: str, topic: str
) -> None:
    """mqadmin's consumeMessage: the consumer's listener runs on the message and the answer
    says how it went; a listener that raises is reported, not retried."""
    seen: list[bytes] = []
    failing = False

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        seen.extend(m.body for m in msgs)
        if failing:
            raise RuntimeError("cannot handle it")
        return ConsumeResult.SUCCESS

    group = f"{topic}-try"
    consumer = PushConsumer(group, namesrv, listener=listener, consume_from=ConsumeFrom.FIRST,
                            rebalance_interval_s=1.0)  # fmt: skip
    consumer.subscribe(topic, "*")
    async with consumer:
        sent = await producer.send(Message(topic, b"try me"))
        await until(lambda: seen == [b"try me"], what="the normal delivery")
        result = await admin.consume_directly(group, sent.offset_msg_id)
        assert result["consumeResult"] == "CR_SUCCESS" and result["order"] is False
        assert seen == [b"try me", b"try me"]
        failing = True
        result = await admin.consume_directly(group, sent.offset_msg_id, consumer.client_id)
        assert result["consumeResult"] == "CR_THROW_EXCEPTION"
        assert "cannot handle it" in result["remark"]
        with pytest.raises(ClientError, match="not online"):
            await admin.consume_directly(group, sent.offset_msg_id, "no-such-client")
