"""Helpers for tests against a live broker: send messages, read a topic back with Spark."""

from __future__ import annotations

import asyncio
import random

from pyspark.sql import DataFrame, SparkSession

from rmqpy.client.admin import Admin
from rmqpy.client.message import Message, MessageQueue, SendResult
from rmqpy.client.producer import Producer
from tests.integration.daemon import BrokerProcess


def send(
    broker: BrokerProcess, topic: str, count: int, queues: int, first: int = 0, pad: int = 0
) -> list[SendResult]:
    """`count` messages spread round robin over queues 0..queues-1 (creating the topic), the
    i-th with body `body(i, pad)`."""

    async def go() -> list[SendResult]:
        async with Admin(broker.namesrv) as admin:
            await admin.create_topic(topic, queues=queues)
        async with Producer("spark-live-producer", broker.namesrv) as producer:
            return [
                await producer.send(
                    Message(topic, body(i, pad), tags=f"T{i % 2}"),
                    queue=MessageQueue(topic, "broker-a", i % queues),
                )
                for i in range(first, first + count)
            ]

    return asyncio.run(go())


def body(i: int, pad: int = 0) -> bytes:
    """`m{i}`, then `pad` bytes that do not compress (the same for the same i): a body over
    4 KiB is sent compressed, and stays about as large in the store."""
    return f"m{i}".encode() + random.Random(i).randbytes(pad)


def reader(spark: SparkSession, broker: BrokerProcess, topic: str, **options: str) -> DataFrame:
    r = spark.read.format("rmqpy").option("rmqpy.namesrv", broker.namesrv)
    for key, value in {"subscribe": topic, **options}.items():
        r = r.option(key, value)
    return r.load()
