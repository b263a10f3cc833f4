"""Reading a broker's store directory with Spark, no broker running: what was sent comes back
field for field, the fast decoder agrees with the plain one, and damage stops a file cleanly
(or fails the query, when asked)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.errors import PythonException
from pyspark.sql import SparkSession

from rmqpy.client.message import Message, MessageQueue, SendResult
from rmqpy.client.producer import Producer
from rmqpy.pipeline.arrow_records import _ranges, decode_batch, reference_rows
from rmqpy.pipeline.commitlog_scan import scan
from rmqpy.pipeline.store_source import commitlog_files
from rmqpy.store.fileio import map_read_only
from rmqpy.store.layout import BLANK, MESSAGE_MAGIC_V1, RECORD_HEAD
from tests.integration.daemon import BrokerProcess

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Sent:
    store: Path
    messages: list[tuple[Message, SendResult]]


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sent]:
    """A broker that took 600 messages over three commitlog files (64 KiB each), then stopped."""
    store = tmp_path_factory.mktemp("spark-store") / "store"
    broker = BrokerProcess(store, extra={"mappedFileSizeCommitLog": str(64 * 1024)}).start()

    async def produce() -> list[tuple[Message, SendResult]]:
        out = []
        async with Producer("spark-producer", broker.namesrv) as producer:
            for i in range(600):
                msg = Message(
                    "SparkOrders" if i % 3 else "SparkAudit",
                    f"order {i} ".encode() * (1 + i % 7),
                    tags=f"Tag{i % 4}",
                    keys=[f"order-{i}", f"user-{i % 10}"],
                    properties={"region": f"r{i % 2}"},
                )
                queue = MessageQueue(msg.topic, "broker-a", i % 4)
                out.append((msg, await producer.send(msg, queue=queue)))
        return out

    messages = asyncio.run(produce())
    assert broker.stop() == 0
    yield Sent(store, messages)


def test_the_store_reads_back_what_was_sent(spark: SparkSession, sent: Sent) -> None:
    df = spark.read.format("rmqpy-store").load(str(sent.store))
    rows = {r.msg_id: r for r in df.collect()}
    assert len(commitlog_files(sent.store)) >= 3
    assert len(rows) == len(sent.messages)
    for msg, result in sent.messages:
        row = rows[result.msg_id]  # the id the producer got back
        assert row.offset_msg_id == result.offset_msg_id
        assert (row.topic, row.body, row.tags) == (msg.topic, msg.body, msg.tags)
        assert row.keys == " ".join(msg.keys or [])
        assert (row.queue_id, row.queue_offset) == (result.queue.queue_id, result.queue_offset)
        assert row.properties["region"] == msg.properties["region"]
        assert row.properties["UNIQ_KEY"] == result.msg_id
        assert row.store_host == "127.0.0.1:" + str(sent_port(sent))
        assert row.born_host.startswith("127.0.0.1:")
        assert row.born_timestamp <= row.store_timestamp
        assert row.reconsume_times == 0
    by_topic: dict[str, int] = dict(df.groupBy("topic").count().collect())
    assert by_topic == {"SparkOrders": 400, "SparkAudit": 200}


def test_a_schema_given_to_the_read_chooses_its_columns(spark: SparkSession, sent: Sent) -> None:
    """Spark does not tell a Python source which columns a query reads; a schema given to
    the read does, and only those columns cross to the JVM."""
    read = spark.read.format("rmqpy-store")
    df = read.schema("body binary, topic string, queue_offset bigint").load(str(sent.store))
    assert df.columns == ["body", "topic", "queue_offset"]
    rows = sorted((r.topic, r.queue_offset, r.body) for r in df.collect())
    whole = read.load(str(sent.store)).select("topic", "queue_offset", "body").collect()
    assert rows == sorted(map(tuple, whole)) and len(rows) == len(sent.messages)
    for wrong, says in (
        ("body binary, color string", "no column 'color'"),
        ("body string", "column 'body' is binary in rmqpy sources, not string"),
    ):
        with pytest.raises(Exception, match=says):
            read.schema(wrong).load(str(sent.store)).collect()


def sent_port(sent: Sent) -> int:
    host = sent.messages[0][1].offset_msg_id[8:16]
    return int(host, 16)


def test_topic_filter_and_split_partitions(spark: SparkSession, sent: Sent) -> None:
    audit = spark.read.format("rmqpy-store").option("topic", "SparkAudit").load(str(sent.store))
    assert audit.count() == 200
    split = (
        spark.read.format("rmqpy-store")
        .option("maxRecordsPerPartition", "50")
        .load(str(sent.store))
    )
    assert split.rdd.getNumPartitions() >= 600 // 50
    assert sorted(r.msg_id for r in split.select("msg_id").collect()) == sorted(
        result.msg_id for _, result in sent.messages
    )


def test_the_fast_decoder_agrees_with_the_plain_one(sent: Sent) -> None:
    for path in commitlog_files(sent.store):
        buf = map_read_only(path)
        positions = scan(buf).positions
        batch, damage = decode_batch(buf, positions)
        assert damage is None
        rows = batch.to_pylist()
        assert rows == reference_rows(buf, positions)
        assert [r["commitlog_offset"] for r in rows] == (positions + int(path.name)).tolist()


def test_byte_ranges_out_of_order_or_outside_the_buffer_are_refused_not_read() -> None:
    """Arrow's take trusts the offsets laid over the buffer: ranges that overlap, run
    backwards or pass its end raise instead of reading memory they should not."""
    buf = b"xxhello--world"
    ok = _ranges(pa.string(), buf, np.array([2, 9]), np.array([5, 5]))
    assert ok.to_pylist() == ["hello", "world"]
    for starts, lengths in (([9, 2], [5, 5]), ([2, 3], [5, 5]), ([2, 9], [5, 6])):
        with pytest.raises(ValueError, match="in order, apart, and inside the buffer"):
            _ranges(pa.binary(), buf, np.array(starts), np.array(lengths))


def test_the_walk_stops_at_the_filler_or_at_the_first_damaged_head(sent: Sent) -> None:
    """A full file ends in the BLANK filler (no damage); a record with a bad magic, a size too
    small for a record or one running past the file stops the walk there, and says so."""
    first = commitlog_files(sent.store)[0]
    data = bytearray(first.read_bytes())
    whole = scan(data)
    assert whole.damage is None and len(whole.positions) > 3
    third = int(whole.positions[2])
    for head, reason in [
        (BLANK.pack(int(whole.positions[3]) - third, 0x12345678), "bad magic"),
        (BLANK.pack(RECORD_HEAD.size, MESSAGE_MAGIC_V1), "bad total size"),
        (BLANK.pack(len(data), MESSAGE_MAGIC_V1), "bad total size"),
    ]:
        damaged = bytearray(data)
        damaged[third : third + BLANK.size] = head
        walked = scan(damaged)
        assert walked.positions.tolist() == whole.positions[:2].tolist()
        assert walked.damage is not None and walked.damage.position == third
        assert walked.damage.reason.startswith(reason)


def test_a_torn_tail_stops_the_file_or_fails_the_query(
    spark: SparkSession, sent: Sent, tmp_path: Path
) -> None:
    copy = tmp_path / "store"
    (copy / "commitlog").mkdir(parents=True)
    last = commitlog_files(sent.store)[-1]
    data = bytearray(last.read_bytes())
    positions = scan(data).positions
    torn_at = int(positions[-1])
    data[torn_at + 30 :] = bytes(len(data) - torn_at - 30)  # the last record half written
    (copy / "commitlog" / last.name).write_bytes(bytes(data))

    rows = spark.read.format("rmqpy-store").load(str(copy)).collect()
    assert len(rows) == len(positions) - 1
    assert max(r.commitlog_offset for r in rows) < int(last.name) + torn_at

    corrupt = spark.read.format("rmqpy-store").option("onCorruptRecord", "fail")
    with pytest.raises(PythonException, match="damaged record"):
        corrupt.load(str(copy)).collect()


def test_a_flipped_body_bit_is_caught_with_check_crc(
    spark: SparkSession, sent: Sent, tmp_path: Path
) -> None:
    copy = tmp_path / "store"
    (copy / "commitlog").mkdir(parents=True)
    first = commitlog_files(sent.store)[0]
    data = bytearray(first.read_bytes())
    second = int(scan(data).positions[1])
    data[second + 100] ^= 0x01  # inside the second record's body
    (copy / "commitlog" / first.name).write_bytes(bytes(data))
    reader = spark.read.format("rmqpy-store")
    assert reader.load(str(copy)).count() == len(scan(data).positions)  # unchecked: all
    checked = reader.option("checkCRC", "true").load(str(copy))
    assert checked.count() == 1  # the file stops at the bad record
