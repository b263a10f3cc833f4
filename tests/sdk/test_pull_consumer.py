"""The lite pull consumer: assign or subscribe, poll, seek, commit, resume."""

from __future__ import annotations

import asyncio
import time

import pytest

from rmqpy.client.admin import Admin
from rmqpy.client.consumer import ConsumeFrom
from rmqpy.client.errors import ClientError
from rmqpy.client.message import Message, MessageQueue, ReceivedMessage
from rmqpy.client.producer import Producer
from rmqpy.client.pull_consumer import PullConsumer
from tests.integration.daemon import BrokerProcess
from tests.sdk.conftest import drain, until


async def fill(producer: Producer, topic: str, queue: MessageQueue, count: int) -> None:
    for i in range(count):
        await producer.send(Message(topic, f"m{i}".encode(), tags=f"T{i % 2}"), queue=queue)


async def new_queue(
    producer: Producer, admin: Admin, topic: str, queues: int, queue: int, count: int
) -> MessageQueue:
    """Create `topic` with `queues` queues and send `count` messages to queue `queue`."""
    await admin.create_topic(topic, queues=queues)
    mq = MessageQueue(topic, "broker-a", queue)
    await fill(producer, topic, mq, count)
    return mq


def from_first(group: str, namesrv: str, mq: MessageQueue) -> PullConsumer:
    """A consumer of `group` assigned `mq`, from its first message when nothing is committed."""
    consumer = PullConsumer(group, namesrv, consume_from=ConsumeFrom.FIRST)
    consumer.assign([mq])
    return consumer


async def test_assign_poll_and_resume_from_the_committed_offset(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    mq = await new_queue(producer, admin, topic, queues=2, queue=1, count=10)
    consumer = from_first("g-resume", namesrv, mq)
    async with consumer:
        first = await drain(consumer, 10)
        assert first == [f"m{i}".encode() for i in range(10)]
        assert consumer.position(mq) == 10
    [row] = [r for r in await admin.consumer_offsets("g-resume", topic) if r.queue == mq]
    assert (row.committed, row.max_offset, row.lag) == (10, 10, 0)

    await fill(producer, topic, mq, 3)
    again = PullConsumer("g-resume", namesrv, consume_from=ConsumeFrom.FIRST)
    again.assign([mq])
    async with again:
        assert await drain(again, 3) == [b"m0", b"m1", b"m2"]
        assert await again.poll(0.3) == []


async def test_a_waiting_poll_ends_at_its_timeout_on_a_new_batch_or_on_cancel(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    mq = await new_queue(producer, admin, topic, queues=1, queue=0, count=0)
    async with from_first("g-wait", namesrv, mq) as consumer:
        began = time.monotonic()
        assert await consumer.poll(0.3) == []
        assert 0.25 <= time.monotonic() - began < 2.0
        waiting = asyncio.ensure_future(consumer.poll(10.0))
        await asyncio.sleep(0.2)
        await producer.send(Message(topic, b"late"), queue=mq)
        assert [m.body for m in await asyncio.wait_for(waiting, 5.0)] == [b"late"]
        cancelled = asyncio.ensure_future(consumer.poll(10.0))
        await asyncio.sleep(0.1)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await producer.send(Message(topic, b"after"), queue=mq)
        assert [m.body for m in await consumer.poll(5.0)] == [b"after"]


async def test_a_consumer_that_stops_polling_stops_pulling_and_loses_nothing(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    """Eight queues' feeds share a buffer of one batch: while the application does not poll,
    one batch waits and the feeds wait for room; polled again, every message comes, once,
    each queue's in order."""
    await admin.create_topic(topic, queues=8)
    queues = [MessageQueue(topic, "broker-a", q) for q in range(8)]
    for mq in queues:
        await fill(producer, topic, mq, 20)
    consumer = PullConsumer(
        "g-room", namesrv, consume_from=ConsumeFrom.FIRST, pull_batch_size=3, buffered_batches=1
    )
    consumer.assign(queues)
    async with consumer:
        await until(lambda: len(consumer._batches) == 1)  # (what poll has not taken yet)
        await asyncio.sleep(0.5)  # no poll: the feeds wait, the buffer holds one batch
        assert len(consumer._batches) == 1
        messages: list[ReceivedMessage] = []
        async with asyncio.timeout(15):
            while len(messages) < 160:
                messages += await consumer.poll(0.5)
        assert await consumer.poll(0.3) == []
    for q in range(8):
        bodies = [m.body for m in messages if m.queue_id == q]
        assert bodies == [f"m{i}".encode() for i in range(20)]


async def test_subscribe_filters_by_tag(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    await admin.create_topic(topic, queues=2)
    await fill(producer, topic, MessageQueue(topic, "broker-a", 0), 10)
    consumer = PullConsumer("g-tags", namesrv, consume_from=ConsumeFrom.FIRST)
    consumer.subscribe(topic, "T1")
    async with consumer:
        got = await drain(consumer, 5)
        assert got == [b"m1", b"m3", b"m5", b"m7", b"m9"]
        assert await consumer.poll(0.3) == []


async def test_seek_to_offset_time_begin_and_end(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    await admin.create_topic(topic, queues=1)
    mq = MessageQueue(topic, "broker-a", 0)
    await fill(producer, topic, mq, 5)
    await asyncio.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    for i in range(5, 8):
        await producer.send(Message(topic, f"m{i}".encode()), queue=mq)
    consumer = PullConsumer("g-seek", namesrv, consume_from=ConsumeFrom.LAST)
    consumer.assign([mq])
    async with consumer:
        assert consumer.position(mq) == 8  # a new group from LAST: only what comes next
        await consumer.seek(mq, 6)
        assert await drain(consumer, 2) == [b"m6", b"m7"]
        await consumer.seek_to_timestamp(mq, middle_ms)
        assert await drain(consumer, 3) == [b"m5", b"m6", b"m7"]
        await consumer.seek_to_begin(mq)
        assert (await drain(consumer, 8))[:2] == [b"m0", b"m1"]
        await consumer.seek_to_end(mq)
        await producer.send(Message(topic, b"new"), queue=mq)
        assert await drain(consumer, 1) == [b"new"]
        with pytest.raises(ClientError, match="not assigned"):
            await consumer.seek(MessageQueue(topic, "broker-a", 5), 0)


async def test_commit_without_auto_commit(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    await admin.create_topic(topic, queues=1)
    mq = MessageQueue(topic, "broker-a", 0)
    await fill(producer, topic, mq, 4)
    consumer = PullConsumer("g-manual", namesrv, auto_commit=False, consume_from=ConsumeFrom.FIRST)
    consumer.assign([mq])
    async with consumer:
        await drain(consumer, 4)
        assert await consumer.committed(mq) in (None, 0)
        await consumer.commit()
        assert await consumer.committed(mq) == 4


async def test_subscribed_members_share_the_queues(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    await admin.create_topic(topic, queues=4)
    one = PullConsumer("g-share", namesrv, rebalance_interval_s=0.5)
    two = PullConsumer("g-share", namesrv, rebalance_interval_s=0.5)
    one.subscribe(topic)
    two.subscribe(topic)
    async with one:
        assert len(one.assignment()) == 4
        async with two:
            await until(
                lambda: len(one.assignment()) == 2 and len(two.assignment()) == 2,
                what="two members sharing four queues",
            )
            assert one.assignment().isdisjoint(two.assignment())
        await until(lambda: len(one.assignment()) == 4, what="the last member taking all")


async def test_a_damaged_message_does_not_stop_its_queue(
    producer: Producer, admin: Admin, namesrv: str, topic: str, broker: BrokerProcess
) -> None:
    """Bit rot on the broker's disk: one message's properties (which no CRC covers) and
    another's body. The first is delivered with its bad bytes replaced, as Java's client
    decodes them; the second is left out (and logged); the queue goes on. Before, the
    decode error ended the queue's pull task, and nothing more came from that queue."""
    await admin.create_topic(topic, queues=1)
    mq = MessageQueue(topic, "broker-a", 0)
    for i in range(5):
        body, marks = f"body-{i}-{topic}".encode(), {"mark": f"props-{i}-{topic}"}
        await producer.send(Message(topic, body, properties=marks), queue=mq)
    for path in sorted((broker.store_dir / "commitlog").iterdir()):
        with open(path, "r+b") as fh:  # the broker's pages are the same pages
            data = fh.read()
            for needle in (f"props-1-{topic}", f"body-3-{topic}"):
                at = data.find(needle.encode())
                if at >= 0:
                    fh.seek(at)
                    fh.write(b"\xff")
    consumer = PullConsumer("g-damaged", namesrv, consume_from=ConsumeFrom.FIRST)
    consumer.assign([mq])
    async with consumer:
        got = await drain(consumer, 4)
        await producer.send(Message(topic, b"after"), queue=mq)
        got += await drain(consumer, 1)
    assert got == [f"body-{i}-{topic}".encode() for i in (0, 1, 2, 4)] + [b"after"]


async def test_a_consumer_running_across_its_topics_deletion_reads_what_is_sent_after(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    """The topic's queue starts over at 0 while the consumer still pulls at its old offset:
    the broker sends it back to 0 (as RocketMQ 4.x does for a queue that begins at 0),
    not to the queue's end, which skipped what was sent since the deletion."""
    mq = await new_queue(producer, admin, topic, queues=1, queue=0, count=8)
    consumer = from_first("g-deleted", namesrv, mq)
    async with consumer:
        assert len(await drain(consumer, 8)) == 8
        await admin.delete_topic(topic)
        await admin.create_topic(topic, queues=1)
        await fill(producer, topic, mq, 3)
        assert await drain(consumer, 3) == [b"m0", b"m1", b"m2"]


async def test_seeking_while_the_group_rebalances_skips_no_queue(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    """A seek right after start, while a rebalance runs (the group's first heartbeat wakes
    one): the seek's position wins, every time, instead of the new group's start offset."""
    await admin.create_topic(topic, queues=4)
    for q in range(4):
        await fill(producer, topic, MessageQueue(topic, "broker-a", q), 5)
    for attempt in range(10):
        consumer = PullConsumer(f"g-seek-{attempt}", namesrv, consume_from=ConsumeFrom.LAST)
        consumer.subscribe(topic)
        async with consumer:
            queues = sorted(consumer.assignment())
            assert len(queues) == 4
            await asyncio.gather(
                consumer._rebalance(),  # what a group-change notice runs, at the same moment
                *(consumer.seek_to_begin(mq) for mq in queues),
                consumer._rebalance(),
            )
            assert [consumer.position(mq) for mq in queues] == [0, 0, 0, 0], attempt
            assert len(await drain(consumer, 20)) == 20
