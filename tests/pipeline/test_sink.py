"""Writing rows as messages with Spark: every row arrives (batch and streaming), columns map
to the message's fields, and a task run twice (Spark's retry) sends its rows twice: the sink
is at-least-once, as documented."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from rmqpy.client.errors import MessageRefusedError
from rmqpy.pipeline.sink import BatchWriter, SinkOptions
from tests.integration.daemon import BrokerProcess
from tests.pipeline.live import reader, send


def test_a_batch_write_sends_every_row(spark: SparkSession, broker: BrokerProcess) -> None:
    topic = "SparkSinkBatch"
    send(broker, topic, 0, queues=4)
    rows = [(f"row {i}", f"T{i % 3}", f"key-{i}", i % 4) for i in range(500)]
    df = spark.createDataFrame(rows, "body string, tags string, keys string, queue_id int")
    (
        df.repartition(3)
        .write.format("rmqpy")
        .option("rmqpy.namesrv", broker.namesrv)
        .option("topic", topic)
        .option("batchSize", "16")
        .mode("append")
        .save()
    )
    back = reader(spark, broker, topic).collect()
    assert sorted((r.body.decode(), r.tags, r.keys, r.queue_id) for r in back) == sorted(rows)


def test_a_stream_copies_one_topic_into_another(
    spark: SparkSession, broker: BrokerProcess, tmp_path: object
) -> None:
    source, target = "SparkSinkIn", "SparkSinkOut"
    send(broker, source, 90, queues=3)
    send(broker, target, 0, queues=2)
    query = (
        spark.readStream.format("rmqpy")
        .option("rmqpy.namesrv", broker.namesrv)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("body", "tags", "map('copied_from', topic) AS properties")
        .writeStream.format("rmqpy")
        .option("rmqpy.namesrv", broker.namesrv)
        .option("topic", target)
        .option("checkpointLocation", f"{tmp_path}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    copied = reader(spark, broker, target).collect()
    assert sorted(r.body for r in copied) == sorted(f"m{i}".encode() for i in range(90))
    assert {r.properties["copied_from"] for r in copied} == {source}


def test_a_retried_task_sends_its_rows_again(spark: SparkSession, broker: BrokerProcess) -> None:
    topic = "SparkSinkRetry"
    send(broker, topic, 0, queues=1)
    batch = pa.RecordBatch.from_pydict({"body": [b"a", b"b", b"c"]})
    writer = BatchWriter(SinkOptions.parse({"rmqpy.namesrv": broker.namesrv, "topic": topic}))
    assert writer.write(iter([batch])).rows == 3
    assert writer.write(iter([batch])).rows == 3  # what Spark does when a task is retried
    back = reader(spark, broker, topic).collect()
    assert sorted(r.body for r in back) == [b"a", b"a", b"b", b"b", b"c", b"c"]
    assert len({r.msg_id for r in back}) == 6


def test_a_row_that_cannot_be_sent_fails_the_task(broker: BrokerProcess) -> None:
    """A refused send must fail the write (Spark then retries or fails the job), never be
    dropped while the task reports success."""
    refused = pa.RecordBatch.from_pydict(
        {
            "body": [b"refused"],
            "topic": ["no spaces allowed"],
            "queue_id": pa.array([None], pa.int32()),
        }
    )
    fine = pa.RecordBatch.from_pydict(
        {"body": [b"fine"] * 200, "topic": ["SparkSinkFine"] * 200, "queue_id": [0] * 200}
    )
    options = {"rmqpy.namesrv": broker.namesrv, "batchSize": "1", "inFlight": "2"}
    writer = BatchWriter(SinkOptions.parse(options))
    with pytest.raises(MessageRefusedError, match="no spaces allowed"):
        writer.write(iter([refused, fine]))
