"""`df.write.format("rmqpy")` and `df.writeStream.format("rmqpy")`: rows become messages.

Columns: `body` (binary or string, required), and optionally `topic` (else the `topic`
option), `queue_id` (else the producer picks a queue), `keys`, `tags`, `properties`
(map<string,string>). Each task sends its rows with batched SEND_BATCH_MESSAGE requests of up
to `batchSize` messages of one topic and queue, `inFlight` requests at a time.

Delivery is at-least-once: a task that fails after some of its requests were stored is run
again by Spark and sends those rows again, so consumers may see duplicates (each copy gets
its own message id). An exactly-once sink needs broker transactions, which do not exist yet.

Options: `rmqpy.namesrv` (or `rmqpy.servers`), `topic`, `producerGroup` (`rmqpy-spark-sink`),
`batchSize` (64), `inFlight` (8).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from rmqpy.client.message import Message, MessageQueue
from rmqpy.client.producer import Producer
from rmqpy.pipeline.options import lowered, namesrv


@dataclass(frozen=True)
class SinkOptions:
    namesrv: str
    topic: str | None
    group: str
    batch_size: int
    in_flight: int

    @classmethod
    def parse(cls, given: dict[str, str]) -> SinkOptions:
        o = lowered(given)
        batch_size = int(o.get("batchsize", "64"))
        in_flight = int(o.get("inflight", "8"))
        if batch_size < 1 or in_flight < 1:
            raise ValueError("batchSize and inFlight must be at least 1")
        return cls(
            namesrv(o),
            o.get("topic") or None,
            o.get("producergroup", "rmqpy-spark-sink"),
            batch_size,
            in_flight,
        )


@dataclass(frozen=True)
class Sent(WriterCommitMessage):
    rows: int


def _messages(
    batch: pa.RecordBatch, default_topic: str | None
) -> Iterator[tuple[Message, int | None]]:
    """(message, queue id or None) per row."""
    names = set(batch.schema.names)
    if "body" not in names:
        raise ValueError("the rmqpy sink needs a body column")
    columns = {name: batch[name].to_pylist() for name in names}
    for i in range(batch.num_rows):
        topic = columns["topic"][i] if "topic" in names else None
        topic = topic or default_topic
        if not topic:
            raise ValueError("a row has no topic: give a topic column or the topic option")
        body = columns["body"][i]
        if body is None:
            raise ValueError("a row has a null body")
        props = columns["properties"][i] if "properties" in names else None
        msg = Message(
            topic,
            body.encode("utf-8") if isinstance(body, str) else bytes(body),
            tags=columns["tags"][i] if "tags" in names else None,
            keys=columns["keys"][i] if "keys" in names else None,
            properties=dict(props or []),
        )
        yield msg, columns["queue_id"][i] if "queue_id" in names else None


async def send_all(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row; the number sent. Rows are grouped by (topic, queue) into requests of
    up to `batchSize`; at most `inFlight` requests run at once, and no more input is read
    meanwhile. Any failed request fails the whole call."""
    sent = 0
    async with Producer(options.group, options.namesrv) as producer:
        running: set[asyncio.Task[None]] = set()

        async def send(topic: str, queue_id: int | None, group: list[Message]) -> None:
            queue = None
            if queue_id is not None:
                queue = MessageQueue(topic, await _broker_of(producer, topic), queue_id)
            await producer.send_batch(group, queue=queue)

        async def launch(topic: str, queue_id: int | None, group: list[Message]) -> None:
            while len(running) >= options.in_flight:
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                running.difference_update(done)
                for task in done:
                    task.result()  # a refused or failed request fails the task here
            running.add(asyncio.ensure_future(send(topic, queue_id, group)))

        try:
            for batch in batches:
                pending: dict[tuple[str, int | None], list[Message]] = {}
                for msg, queue_id in _messages(batch, options.topic):
                    key = (msg.topic, queue_id)
                    group = pending.setdefault(key, [])
                    group.append(msg)
                    sent += 1
                    if len(group) >= options.batch_size:
                        await launch(*key, pending.pop(key))
                for key, group in pending.items():
                    await launch(*key, group)
            await asyncio.gather(*running)
        finally:  # on a failure, let the requests in flight end before the producer closes
            await asyncio.gather(*running, return_exceptions=True)
    return sent


async def _broker_of(producer: Producer, topic: str) -> str:
    """The broker of the topic's first queue: a row's queue_id names a queue there."""
    queues = await producer.queues(topic)
    return queues[0].broker_name


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Sent:
        return Sent(asyncio.run(send_all(self.options, iterator)))


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Sent:
        return Sent(asyncio.run(send_all(self.options, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to do: every row was stored when its task answered."""
