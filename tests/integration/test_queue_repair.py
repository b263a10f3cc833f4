"""A consume queue damaged while the broker was stopped is rebuilt from the commitlog at the
next start: every acknowledged message is served again, no queue offset is reused, and the
log says which queue was repaired."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from rmqpy.client.consumer import ConsumeFrom
from rmqpy.client.message import Message, MessageQueue
from rmqpy.client.producer import Producer
from rmqpy.client.pull_consumer import PullConsumer
from tests.integration.daemon import BrokerProcess
from tests.sdk.conftest import drain

pytestmark = pytest.mark.slow

TOPIC = "Repaired"
COUNT = 3_000
ENTRY = 20  # bytes of a consume-queue entry


async def produce(broker: BrokerProcess, first: int, count: int, topic: str = TOPIC) -> list[int]:
    """`count` messages to queue 0 of `topic`, in batches; their queue offsets."""
    mq = MessageQueue(topic, "broker-a", 0)
    offsets: list[int] = []
    async with Producer("repair-producer", broker.namesrv) as producer:
        for start in range(first, first + count, 50):
            batch = [Message(topic, f"m{i}".encode()) for i in range(start, start + 50)]
            result = await producer.send_batch(batch, queue=mq)
            offsets += range(result.queue_offset, result.queue_offset + len(batch))
    return offsets


async def read_all(broker: BrokerProcess, group: str, count: int) -> list[bytes]:
    consumer = PullConsumer(group, broker.namesrv, consume_from=ConsumeFrom.FIRST)
    consumer.assign([MessageQueue(TOPIC, "broker-a", 0)])
    async with consumer:
        return await drain(consumer, count, timeout_s=30)


def flip_bytes(data: bytearray) -> None:
    rng = random.Random(7)
    for _ in range(30):  # in entries 100-200
        data[rng.randrange(100 * ENTRY, 200 * ENTRY)] ^= 0xFF


def zero_tail(data: bytearray) -> None:
    data[(COUNT - 300) * ENTRY : COUNT * ENTRY] = bytes(300 * ENTRY)


@pytest.mark.parametrize(
    "damage", [flip_bytes, zero_tail, None], ids=["flipped", "zeroed-tail", "files-gone"]
)
def test_a_damaged_consume_queue_is_rebuilt_from_the_commitlog(
    tmp_path: Path, damage: object
) -> None:
    store = tmp_path / "store"
    broker = BrokerProcess(store).start()
    try:
        assert asyncio.run(produce(broker, 0, COUNT)) == list(range(COUNT))
        asyncio.run(produce(broker, 0, 50, topic="Other"))  # later records of another queue
    finally:
        assert broker.stop() == 0, broker.log_text()
    files = sorted((store / "consumequeue" / TOPIC / "0").iterdir())  # 1,000 entries each
    if damage is None:  # every file of the queue gone
        for path in files:
            path.unlink()
    else:
        data = bytearray(b"".join(f.read_bytes() for f in files))
        damage(data)  # type: ignore[operator]
        size = files[0].stat().st_size
        for n, path in enumerate(files):
            path.write_bytes(data[n * size : (n + 1) * size])

    broker = BrokerProcess(store).start()
    try:
        bodies = asyncio.run(read_all(broker, "repair-readers", COUNT))
        assert bodies == [f"m{i}".encode() for i in range(COUNT)]
        # New sends continue after the last acknowledged offset, never reusing one.
        assert asyncio.run(produce(broker, COUNT, 50)) == list(range(COUNT, COUNT + 50))
    finally:
        assert broker.stop() == 0, broker.log_text()
    events = [json.loads(line) for line in broker.log_text().splitlines() if line.startswith("{")]
    started = [e for e in events if e["event"] == "store started"]
    repaired = started[-1]["queues_repaired"] or {}
    assert list(repaired) == [f"{TOPIC}-0"] and repaired[f"{TOPIC}-0"] > 0
    warned = [e for e in events if e["event"].startswith("consume queue disagreed")]
    assert [w["queue"] for w in warned] == [f"{TOPIC}-0"]
