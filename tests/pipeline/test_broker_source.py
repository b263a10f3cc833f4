"""Reading topics of a live broker with Spark: a batch read returns what was sent, a stream
paces itself with maxOffsetsPerTrigger, and a stopped stream resumes from its checkpoint with
no duplicate and no gap, taking in queues added while it was stopped."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable

from rmqpy.client.admin import Admin
from rmqpy.client.consumer import ConsumerBase, RawPull
from rmqpy.client.message import MessageQueue
from rmqpy.pipeline import broker_source
from rmqpy.pipeline.broker_source import DataLoss, Options, QueueRange, read_range
from rmqpy.store.message import Host, Message, encode_record
from tests.integration.daemon import BrokerProcess
from tests.pipeline import live
from tests.pipeline.live import reader, send

pytestmark = pytest.mark.slow


def test_a_batch_read_returns_what_was_sent(spark: SparkSession, broker: BrokerProcess) -> None:
    topic = "SparkLiveBatch"
    results = send(broker, topic, 120, queues=4)
    rows = reader(spark, broker, topic).collect()
    assert sorted(r.msg_id for r in rows) == sorted(r.msg_id for r in results)
    by_id = {r.msg_id: r for r in rows}
    for i, result in enumerate(results):
        row = by_id[result.msg_id]
        assert row.offset_msg_id == result.offset_msg_id
        assert (row.body, row.tags, row.queue_id) == (f"m{i}".encode(), f"T{i % 2}", i % 4)
        assert row.queue_offset == result.queue_offset

    ranged = reader(
        spark,
        broker,
        topic,
        startingOffsets=json.dumps({topic: {"0": 5, "1": -1}}),
        endingOffsets=json.dumps({topic: {"0": 10}}),
    ).collect()
    assert sorted((r.queue_id, r.queue_offset) for r in ranged if r.queue_id == 0) == [
        (0, o) for o in range(5, 10)
    ]
    assert not [r for r in ranged if r.queue_id == 1]  # from latest: nothing
    assert len([r for r in ranged if r.queue_id == 2]) == 30  # not given: earliest to latest

    no_props = reader(spark, broker, topic, includeProperties="false").limit(1).collect()
    assert no_props[0].properties is None
    assert no_props[0].tags in ("T0", "T1")

    chosen = (
        spark.read.format("rmqpy")
        .schema("body binary, msg_id string")
        .option("rmqpy.namesrv", broker.namesrv)
        .option("subscribe", topic)
        .load()
        .collect()
    )
    assert [tuple(r.asDict()) for r in chosen[:1]] == [("body", "msg_id")]
    assert sorted((r.msg_id, r.body) for r in chosen) == sorted(
        (result.msg_id, f"m{i}".encode()) for i, result in enumerate(results)
    )


def stream(
    spark: SparkSession,
    broker: BrokerProcess,
    topic: str,
    checkpoint: Path,
    out: Path,
    **options: str,
) -> list[int]:
    """Run the query with availableNow until it has read everything; the size of each
    micro-batch, in order. Rows go to Parquet under `out`."""
    sizes: list[int] = []

    def each(batch: DataFrame, _batch_id: int) -> None:
        sizes.append(batch.count())
        batch.write.mode("append").parquet(str(out))

    r = spark.readStream.format("rmqpy").option("rmqpy.namesrv", broker.namesrv)
    for key, value in {"subscribe": topic, "startingOffsets": "earliest", **options}.items():
        r = r.option(key, value)
    query = (
        r.load()
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the stream did not finish"
    assert query.exception() is None
    return sizes


def test_a_stream_paces_itself_and_resumes_without_duplicates_or_gaps(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = "SparkLiveStream"
    send(broker, topic, 100, queues=4)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"

    sizes = stream(spark, broker, topic, checkpoint, out, maxOffsetsPerTrigger="30")
    assert sizes == [30, 30, 30, 10]

    # Stopped; meanwhile more messages, and two more queues.
    send(broker, topic, 60, queues=6, first=100)
    sizes = stream(spark, broker, topic, checkpoint, out)
    assert sum(sizes) == 60

    rows = spark.read.parquet(str(out)).select("queue_id", "queue_offset", "body").collect()
    assert len(rows) == 160
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == 160
    for queue in range(6):
        offsets = sorted(r.queue_offset for r in rows if r.queue_id == queue)
        assert offsets == list(range(len(offsets))), f"queue {queue} has a gap"
    assert sorted(int(r.body[1:]) for r in rows) == list(range(160))


def test_a_stream_whose_topic_was_deleted_and_sent_to_again_reports_it_or_reads_it_anew(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    """The topic's queues start over at offset 0 after its deletion. As Spark's Kafka source
    does when offsets go back: data loss, which fails the query, or with failOnDataLoss=false
    a warning and the queues read anew from their start. Before, the stream waited silently
    until the new offsets passed the old ones, and skipped everything below them."""
    topic = "SparkDeletedTopic"
    send(broker, topic, 40, queues=2)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    assert sum(stream(spark, broker, topic, checkpoint, out)) == 40

    async def delete() -> None:
        async with Admin(broker.namesrv) as admin:
            await admin.delete_topic(topic)

    asyncio.run(delete())
    send(broker, topic, 6, queues=2, first=100)
    with pytest.raises(StreamingQueryException, match="went back from 20 to 3"):
        stream(spark, broker, topic, checkpoint, out)
    assert sum(stream(spark, broker, topic, checkpoint, out, failOnDataLoss="false")) == 6
    bodies = [r.body for r in spark.read.parquet(str(out)).select("body").collect()]
    assert sorted(bodies) == sorted(f"m{i}".encode() for i in [*range(40), *range(100, 106)])


def test_the_store_read_through_consume_queues_equals_the_live_read(
    spark: SparkSession, broker: BrokerProcess
) -> None:
    topic = "SparkLiveVsStore"
    send(broker, topic, 90, queues=3)
    ranges = {
        "startingOffsets": json.dumps({topic: {"0": 4, "1": -2, "2": 29}}),
        "endingOffsets": json.dumps({topic: {"0": 17, "1": -1}}),
    }
    live = reader(spark, broker, topic, **ranges).collect()
    on_disk = (
        spark.read.format("rmqpy-store")
        .option("via", "consumequeue")
        .option("topic", topic)
        .options(**ranges)
        .load(str(broker.store_dir))
        .collect()
    )
    assert len(live) == 13 + 30 + 1
    assert sorted(map(tuple, on_disk)) == sorted(map(tuple, live))


def test_pattern_assign_timestamp_and_min_partitions(
    spark: SparkSession, broker: BrokerProcess
) -> None:
    first = send(broker, "SparkPatternA", 20, queues=2)
    send(broker, "SparkPatternB", 10, queues=1)

    def r() -> DataFrameReader:
        """A fresh reader: a DataFrameReader keeps the options it was given."""
        return spark.read.format("rmqpy").option("rmqpy.namesrv", broker.namesrv)

    by_pattern = r().option("subscribePattern", "SparkPattern[AB]").load()
    assert dict(by_pattern.groupBy("topic").count().collect()) == {
        "SparkPatternA": 20,
        "SparkPatternB": 10,
    }
    assigned = r().option("assign", json.dumps({"SparkPatternA": [1]})).load().collect()
    assert {row.queue_id for row in assigned} == {1} and len(assigned) == 10

    split = r().option("subscribe", "SparkPatternA").option("minPartitions", "6").load()
    assert split.rdd.getNumPartitions() >= 6
    assert split.count() == 20

    rows = r().option("subscribe", "SparkPatternA").load().collect()
    stamp = sorted(rows, key=lambda row: row.queue_offset)[5].store_timestamp
    ms = int(stamp.timestamp() * 1000)
    later = r().option("subscribe", "SparkPatternA").option("startingTimestamp", str(ms)).load()
    assert all(row.store_timestamp >= stamp for row in later.collect())
    assert 0 < later.count() < 20
    assert len(first) == 20


def test_a_stream_with_a_group_id_commits_its_progress_to_the_broker(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    """Spark tells a source a batch is done when it plans the next one, so the broker hears
    of every batch but the last of an availableNow run."""
    topic = "SparkGroupCommit"
    send(broker, topic, 30, queues=3)
    sizes = stream(
        spark,
        broker,
        topic,
        tmp_path / "checkpoint",
        tmp_path / "out",
        groupId="spark-etl",
        maxOffsetsPerTrigger="10",
    )
    assert sizes == [10, 10, 10]

    async def committed() -> dict[int, int | None]:
        async with Admin(broker.namesrv) as admin:
            rows = await admin.consumer_offsets("spark-etl", topic)
            return {r.queue.queue_id: r.committed for r in rows}

    offsets = asyncio.run(committed())
    assert sum(o or 0 for o in offsets.values()) == 20  # the end of the second batch
    assert all(o is not None and o <= 10 for o in offsets.values())


def test_a_task_pulls_ahead_and_stops_cleanly_when_its_reader_stops(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's reader has its next pull in flight while it decodes: pulls of 7 over a range
    that ends mid-pull give every offset once, in order, joined into batches of at least
    `BATCH_RECORDS` rows (here 14: two pulls); a reader closed after its first batch (a
    `limit`) leaves no pull thread behind."""
    monkeypatch.setattr(broker_source, "BATCH_RECORDS", 14)
    topic = "SparkLivePullAhead"
    send(broker, topic, 50, queues=1)
    options = Options.parse(
        {"rmqpy.namesrv": broker.namesrv, "subscribe": topic, "pullBatchSize": "7"}
    )
    part = QueueRange(topic, "broker-a", 0, 3, 44)
    batches = list(read_range(options, part))
    assert [b.num_rows for b in batches] == [14, 14, 13]
    offsets = [o for b in batches for o in b["queue_offset"].to_pylist()]
    assert offsets == list(range(3, 44))
    assert [b.decode() for b in batches[0]["body"].to_pylist()] == [f"m{i}" for i in range(3, 17)]

    rows = read_range(options, part)
    assert next(rows).num_rows == 14
    rows.close()
    assert not [t for t in threading.enumerate() if t.name == "rmqpy-pull"]


@pytest.mark.parametrize("in_flight", [1, 3])
def test_pulls_sent_ahead_that_miss_are_dropped_and_every_offset_read_once(
    broker: BrokerProcess, in_flight: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `pullsInFlight` pulls out at once, each sent from where full pulls would end: the
    broker's 256 KiB commitlog files hold about 12 of these 20 KB messages and a pull ends at
    a file's end, so pulls of 7 end early again and again; the reader drops what it sent
    ahead of such a pull (one pull at a time never sends one that misses) and reads every
    offset once, in order, with its own body, inflated (the producer compressed it)."""
    topic = f"SparkLiveInFlight{in_flight}"
    send(broker, topic, 60, queues=1, pad=20_000)
    pulled: list[tuple[int, int | None]] = []  # (from, next offset; None: never answered)
    pull_records = ConsumerBase.pull_records

    async def watched(self: ConsumerBase, mq: MessageQueue, offset: int, *args: Any) -> RawPull:
        pulled.append((offset, None))
        raw = await pull_records(self, mq, offset, *args)
        pulled.append((offset, raw.next_offset))
        return raw

    monkeypatch.setattr(ConsumerBase, "pull_records", watched)
    options = Options.parse(
        {
            "rmqpy.namesrv": broker.namesrv,
            "subscribe": topic,
            "pullBatchSize": "7",
            "pullsInFlight": str(in_flight),
        }
    )
    assert options.pulls_in_flight == in_flight
    batches = list(read_range(options, QueueRange(topic, "broker-a", 0, 3, 57)))
    offsets = [o for b in batches for o in b["queue_offset"].to_pylist()]
    assert offsets == list(range(3, 57))
    bodies = [body for b in batches for body in b["body"].to_pylist()]
    assert bodies == [live.body(i, 20_000) for i in range(3, 57)]
    assert not [t for t in threading.enumerate() if t.name == "rmqpy-pull"]
    answered = {start: end for start, end in pulled if end is not None}
    kept = [3]  # the pulls the reader went on from: each starts where the last one ended
    while kept[-1] < 57:
        kept.append(answered[kept[-1]])
    assert len(kept) - 1 > -(-54 // 7)  # more pulls than full ones would need: some ended early
    sent = [start for start, end in pulled if end is None]
    missed = [start for start in sent if start not in kept]
    assert bool(missed) == (in_flight > 1)


def test_pulls_in_flight_is_a_whole_number_of_at_least_one() -> None:
    given = {"rmqpy.namesrv": "127.0.0.1:9876", "subscribe": "T"}
    assert Options.parse(given).pulls_in_flight == 2
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ValueError, match="pullsInFlight"):
            Options.parse({**given, "pullsInFlight": bad})


def _client_threads() -> int:
    return sum(t.name == "rmqpy-client" and t.is_alive() for t in threading.enumerate())


def test_a_stream_plans_its_batches_through_one_client(broker: BrokerProcess) -> None:
    """Each micro-batch's planning asks the broker several times (offsets, partitions): the
    stream's reader keeps one client for all of them, still ships to Spark's workers, and
    lets go of its client when the query stops."""
    topic = "SparkLivePlanning"
    send(broker, topic, 8, queues=2)
    options = {"rmqpy.namesrv": broker.namesrv, "subscribe": topic}
    reader = broker_source.StreamReader(Options.parse({**options, "startingOffsets": "earliest"}))
    before = _client_threads()
    start = reader.initialOffset()
    for _ in range(3):
        end = reader.latestOffset(start, ReadAllAvailable())
        assert sorted(r.end for r in reader.partitions(start, end)) == [4, 4]
    assert end == {topic: {"0": 4, "1": 4}}
    assert _client_threads() == before + 1
    shipped = pickle.loads(pickle.dumps(reader))
    assert shipped.latestOffset(start, ReadAllAvailable()) == end
    shipped.stop()
    reader.stop()
    assert _client_threads() == before


@pytest.mark.parametrize("damage", ["magic", "zeros"])
def test_a_damaged_record_in_a_pull_fails_the_read(broker: BrokerProcess, damage: str) -> None:
    """A record whose head is damaged on disk (as a failing disk does: a bad magic, or
    zeros) fails the read at its offset; the pulls before it are read as they were."""
    topic = f"SparkLiveDamaged{damage.title()}"
    results = send(broker, topic, 12, queues=1)
    phy = int(results[5].offset_msg_id[16:], 16)  # the host (8 bytes), then the offset
    files = sorted((broker.store_dir / "commitlog").iterdir())
    path = [f for f in files if int(f.name) <= phy][-1]
    head = b"\xde\xad\xbe\xef" if damage == "magic" else bytes(4)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, head, phy - int(path.name) + (4 if damage == "magic" else 0))
    finally:
        os.close(fd)
    options = Options.parse(
        {"rmqpy.namesrv": broker.namesrv, "subscribe": topic, "pullBatchSize": "4"}
    )
    assert [b.num_rows for b in read_range(options, QueueRange(topic, "broker-a", 0, 0, 4))] == [4]
    with pytest.raises(DataLoss, match="nothing at offset 5 "):
        list(read_range(options, QueueRange(topic, "broker-a", 0, 0, 12)))


@pytest.mark.parametrize("damage", ["magic", "zeros"])
def test_a_damaged_record_in_a_pulls_body_fails_the_read(damage: str) -> None:
    """A broker that serves what its disk holds (Java's gathers a pull's records without
    reading them) may hand over a damaged record: the rows are not cut short there, with
    the reader going on from the pull's next offset as if all had been read; the read fails
    and says where."""
    records = bytearray()
    starts = []
    for n in range(6):
        starts.append(len(records))
        encode_record(records, Message("T", b"m%d" % n, 0), n, len(records), 1_700_000_000_000,
                      Host(b"\x7f\0\0\1", 10911))  # fmt: skip
    at = starts[3]
    if damage == "magic":
        records[at + 4 : at + 8] = b"\xde\xad\xbe\xef"
    else:
        records[at:] = bytes(len(records) - at)
    options = Options.parse({"rmqpy.namesrv": "127.0.0.1:9876", "subscribe": "T"})
    whole = list(broker_source._rows_below(options, 6, [bytes(records[:at])], None))
    assert [b.num_rows for b in whole] == [3]
    with pytest.raises(ValueError, match="a pulled record is damaged"):
        list(broker_source._rows_below(options, 6, [bytes(records)], None))
