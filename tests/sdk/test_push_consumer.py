"""The push consumer: clustering with rebalance, orderly, retry and DLQ, broadcasting."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from rmqpy.client.admin import Admin
from rmqpy.client.consumer import ConsumeFrom, MessageModel
from rmqpy.client.message import Message, ReceivedMessage
from rmqpy.client.producer import Producer, select_by_hash
from rmqpy.client.pull_consumer import PullConsumer
from rmqpy.client.push_consumer import ConsumeResult, Listener, PushConsumer
from tests.sdk.conftest import drain, until


def push(namesrv: str, topic: str, group: str, listener: Listener, **kw: Any) -> PushConsumer:
    consumer = PushConsumer(
        group,
        namesrv,
        listener=listener,
        consume_from=ConsumeFrom.FIRST,
        rebalance_interval_s=1.0,
        commit_interval_s=0.5,
        **kw,
    )
    consumer.subscribe(topic)
    return consumer


async def test_concurrent_listener_gets_every_message_once(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    await admin.create_topic(topic, queues=4)
    seen: Counter[bytes] = Counter()

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        seen.update(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    async with push(namesrv, topic, "g-all", listener, consume_batch_size=4):
        for i in range(100):
            await producer.send(Message(topic, f"m{i}".encode()))
        await until(lambda: len(seen) == 100, what="100 messages")
    assert set(seen.values()) == {1}
    rows = await admin.consumer_offsets("g-all", topic)
    assert sum(r.lag for r in rows) == 0


async def test_a_queue_is_pulled_ahead_only_up_to_its_threshold(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    """Pulls run ahead of a slow listener until `pull_threshold_for_queue` messages of the
    queue wait for it (RocketMQ's pullThresholdForQueue), then resume as they are consumed."""
    await admin.create_topic(topic, queues=1)
    for i in range(40):
        await producer.send(Message(topic, f"m{i}".encode()))
    release = asyncio.Event()
    started: list[bytes] = []
    done: list[bytes] = []

    async def slow(msgs: list[ReceivedMessage]) -> ConsumeResult:
        started.extend(m.body for m in msgs)
        await release.wait()
        done.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    async with push(namesrv, topic, "g-slow", slow, pull_batch_size=4, pull_threshold_for_queue=8):
        await until(lambda: len(started) == 8, what="the first 8 handed to the listener")
        await asyncio.sleep(0.5)  # no more pulls while 8 wait (its concurrency allows 20)
        assert len(started) == 8
        release.set()
        await until(lambda: len(done) == 40, what="all 40 consumed")
    assert sorted(done) == sorted(f"m{i}".encode() for i in range(40))


async def test_a_consumer_started_before_its_topic_exists_gets_its_first_messages(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    seen: list[bytes] = []

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        seen.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    async with push(namesrv, topic, "g-early", listener):
        assert topic not in await admin.topics()  # subscribing created nothing
        for i in range(6):
            await producer.send(Message(topic, f"early {i}".encode()))
        await until(lambda: len(seen) == 6, what="the 6 messages sent after the start")
    assert sorted(seen) == [f"early {i}".encode() for i in range(6)]


async def test_members_of_a_new_group_started_at_once_all_start_and_share_the_work(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    """Their retry topic (%RETRY%group) exists only once a heartbeat made it: members that
    ask for its route before then start anyway, as Java's do, and pick it up later."""
    await admin.create_topic(topic, queues=4)
    seen: Counter[bytes] = Counter()

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        seen.update(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    members = [push(namesrv, topic, "g-crowd", listener) for _ in range(6)]
    await asyncio.gather(*(m.start() for m in members))
    try:
        for i in range(60):
            await producer.send(Message(topic, f"c{i}".encode()))
        await until(lambda: len(seen) == 60, what="the 60 messages")
    finally:
        await asyncio.gather(*(m.close() for m in members))
    assert set(seen.values()) == {1}


async def test_plain_function_listener_runs_in_a_thread(
    producer: Producer, namesrv: str, topic: str
) -> None:
    seen: list[bytes] = []
    threads: list[threading.Thread] = []

    def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        threads.append(threading.current_thread())
        seen.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    await producer.send(Message(topic, b"sync"))
    async with push(namesrv, topic, "g-sync", listener):
        await until(lambda: seen == [b"sync"], what="the message")
    assert threads and threading.main_thread() not in threads  # the loop stays free


async def test_members_joining_and_leaving_lose_nothing_and_never_overlap(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    await admin.create_topic(topic, queues=4)
    total = 400
    in_flight: dict[bytes, str] = {}
    overlaps: list[bytes] = []
    consumed: defaultdict[str, set[bytes]] = defaultdict(set)

    def listener_for(name: str) -> Listener:
        async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            for m in msgs:
                if m.body in in_flight:
                    overlaps.append(m.body)
                in_flight[m.body] = name
            await asyncio.sleep(random.uniform(0, 0.01))
            for m in msgs:
                consumed[name].add(m.body)
                in_flight.pop(m.body, None)
            return ConsumeResult.SUCCESS

        return listener

    def everything() -> set[bytes]:
        return set().union(*consumed.values()) if consumed else set()

    async def produce(start: int, end: int) -> None:
        for i in range(start, end):
            await producer.send(Message(topic, f"m{i}".encode()))

    one = push(namesrv, topic, "g-rebalance", listener_for("one"))
    two = push(namesrv, topic, "g-rebalance", listener_for("two"))
    async with one:
        await produce(0, 100)
        await two.start()
        await until(
            lambda: len(one.assignment() - {q for q in one.assignment() if "%" in q.topic}) == 2,
            what="the first member giving up half its queues",
        )
        await produce(100, 300)
        await until(lambda: len(everything()) >= 300, what="300 messages")
        assert consumed["two"], "the second member consumed nothing"
        await two.close()
        await produce(300, total)
        await until(lambda: len(everything()) == total, what="every message")
    assert not overlaps
    assert everything() == {f"m{i}".encode() for i in range(total)}


async def test_orderly_listener_sees_each_queue_in_order(
    producer: Producer, admin: Admin, namesrv: str, topic: str
) -> None:
    await admin.create_topic(topic, queues=4)
    seen: defaultdict[str, list[int]] = defaultdict(list)
    busy: set[int] = set()
    parallel: list[int] = []
    failed_once: set[bytes] = set()

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        [msg] = msgs
        if msg.queue_id in busy:
            parallel.append(msg.queue_id)
        busy.add(msg.queue_id)
        await asyncio.sleep(0.001)
        busy.discard(msg.queue_id)
        if msg.body.endswith(b"-5") and msg.body not in failed_once:
            failed_once.add(msg.body)  # the queue waits for this message to succeed
            return ConsumeResult.RECONSUME_LATER
        order, _, seq = msg.body.decode().partition("-")
        seen[order].append(int(seq))
        return ConsumeResult.SUCCESS

    for seq in range(20):
        for order in ("o1", "o2", "o3"):
            await producer.send(
                Message(topic, f"{order}-{seq}".encode()), selector=select_by_hash, arg=order
            )
    async with push(namesrv, topic, "g-orderly", listener, orderly=True, suspend_s=0.1):
        await until(lambda: sum(map(len, seen.values())) == 60, what="60 messages")
    assert dict(seen) == {o: list(range(20)) for o in ("o1", "o2", "o3")}
    assert len(failed_once) == 3
    assert not parallel


async def test_reconsume_later_retries_then_dead_letters(
    producer: Producer, namesrv: str, topic: str
) -> None:
    attempts: list[int] = []

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        for m in msgs:
            assert m.topic == topic  # retried messages come back under their own topic
            if m.body == b"always-fails":
                attempts.append(m.reconsume_times)
                return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    result = await producer.send(Message(topic, b"always-fails"))
    async with push(namesrv, topic, "g-retry", listener, max_reconsume_times=2):
        await until(lambda: len(attempts) == 3, what="three attempts")
        await asyncio.sleep(0.5)
    assert attempts == [0, 1, 2]
    dlq = PullConsumer("g-dlq-reader", namesrv, consume_from=ConsumeFrom.FIRST)
    dlq.subscribe("%DLQ%g-retry")
    async with dlq:
        [dead] = [m for m in await dlq.poll(5.0)]
    assert dead.body == b"always-fails"
    assert dead.msg_id == result.msg_id


async def test_a_raising_listener_means_consume_later(
    producer: Producer, namesrv: str, topic: str
) -> None:
    calls: list[int] = []

    async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        calls.append(msgs[0].reconsume_times)
        if len(calls) == 1:
            raise RuntimeError("database down")
        return ConsumeResult.SUCCESS

    await producer.send(Message(topic, b"x"))
    async with push(namesrv, topic, "g-raise", listener):
        await until(lambda: calls == [0, 1], what="the retry")


async def test_broadcasting_gives_every_member_everything_with_local_offsets(
    producer: Producer, admin: Admin, namesrv: str, topic: str, tmp_path: Path
) -> None:
    await admin.create_topic(topic, queues=2)
    seen: defaultdict[str, list[bytes]] = defaultdict(list)

    def listener_for(name: str) -> Listener:
        async def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            seen[name] += [m.body for m in msgs]
            return ConsumeResult.SUCCESS

        return listener

    members = [
        push(
            namesrv,
            topic,
            "g-broadcast",
            listener_for(name),
            model=MessageModel.BROADCASTING,
            offsets_dir=tmp_path / name,
        )
        for name in ("a", "b")
    ]
    for m in members:
        await m.start()
    for i in range(20):
        await producer.send(Message(topic, f"m{i}".encode()))
    await until(lambda: len(seen["a"]) == 20 and len(seen["b"]) == 20, what="both members")
    for m in members:
        await m.close()
    assert sorted(seen["a"]) == sorted(seen["b"])
    offsets = json.loads((tmp_path / "a" / "g-broadcast" / "offsets.json").read_text())
    assert sum(v for k, v in offsets["offsetTable"].items() if k.startswith(topic)) == 20
    # nothing went to the broker for the group
    assert all(r.committed in (None, 0) for r in await admin.consumer_offsets("g-broadcast", topic))


async def test_pull_consumer_and_push_consumer_agree(
    producer: Producer, namesrv: str, topic: str
) -> None:
    for i in range(5):
        await producer.send(Message(topic, f"x{i}".encode()))
    reader = PullConsumer("g-agree", namesrv, consume_from=ConsumeFrom.FIRST)
    reader.subscribe(topic)
    async with reader:
        assert sorted(await drain(reader, 5)) == [f"x{i}".encode() for i in range(5)]
