"""The admin API against a real broker."""

from __future__ import annotations

import asyncio
import time

import pytest

from client.admin import Admin
from client.errors import ClientError
from client.message import Message, MessageQueue
from client.producer import Producer
from tests.integration.daemon import BrokerProcess


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
