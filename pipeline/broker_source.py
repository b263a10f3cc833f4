"""`format("rmqpy")`: topics of a live broker as a batch table and as a stream (and, written
to, the sink in `pipeline.sink`).

A partition is one message queue over a range of consume-queue offsets; offsets are JSON
`{"topic": {"queueId": nextOffset}}` (a queue on a second broker of the same topic is keyed
`"brokerName:queueId"`), −2 meaning earliest and −1 latest, as in Spark's Kafka source.
A task pulls its range with PULL_MESSAGE and decodes the records straight into Arrow
(`arrow_records.decode_batch`: a pull's body is whole commitlog records, back to back), so a
retried task returns the same rows. A stream's progress lives in Spark's checkpoint; with
`groupId` it is also reported to the broker as that group's consumer offsets, so lag shows
in the broker's metrics. Spark commits a batch to its source when it plans the next one, so
the broker hears of every batch but the last of an availableNow run; restarts always start
from the checkpoint.

Options (names as in Spark's Kafka source): `rmqpy.namesrv` (or `rmqpy.servers`);
`subscribe` (comma-separated) | `subscribePattern` (a regex) | `assign` (`{"topic": [0, 1]}`);
`startingOffsets` (`earliest`, `latest` or JSON; a stream defaults to latest, a batch to
earliest), `endingOffsets` (batch: `latest` or JSON), `startingTimestamp` (ms; per queue, the
first offset stored at or after it); `maxOffsetsPerTrigger` (split across queues by lag),
`minPartitions`, `failOnDataLoss` (true), `pullBatchSize` (32), `pullsInFlight` (2),
`includeProperties` (true), `groupId`.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import deque
from collections.abc import Coroutine, Generator, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import structlog
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rmqpy.client.admin import Admin
from rmqpy.client.consumer import ConsumerBase, PullStatus, RawPull
from rmqpy.client.message import MessageQueue
from rmqpy.pipeline.arrow_records import decode_batch
from rmqpy.pipeline.commitlog_scan import scan
from rmqpy.pipeline.options import (
    EARLIEST,
    LATEST,
    Offsets,
    flag,
    lowered,
    namesrv,
    offset_of,
    offset_spec,
    positive,
)
from rmqpy.pipeline.schema import DDL, chosen_columns, select
from rmqpy.pipeline.sink import BatchWriter, SinkOptions, StreamWriter
from rmqpy.store.layout import (
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    RECORD_HEAD,
    RECORD_HEAD_OFFSETS,
)

log = structlog.get_logger(__name__)

DEFAULT_GROUP = "rmqpy-spark"
T = TypeVar("T")
CLOSE_TIMEOUT_S = 5.0
# The pulls of a range are decoded and handed to Spark together, in batches of about this
# many rows (or bytes), as the store source's are: each batch costs Spark's side the same
# whatever its size, and batches of one pull (32-1024 rows) made a stream into Parquet a
# fifth slower.
BATCH_RECORDS = 8192
BATCH_BYTES = 8 * 1024 * 1024
MAGIC_FIELD = list(RECORD_HEAD_OFFSETS).index("magic")
QUEUE_OFFSET_FIELD = list(RECORD_HEAD_OFFSETS).index("queue_offset")


class DataLoss(RuntimeError):
    """Messages a query was to read are gone (expired, or its queues started over after the
    topic was deleted) and failOnDataLoss is true."""


def queue_key(mq: MessageQueue, first_broker: str) -> str:
    return str(mq.queue_id) if mq.broker_name == first_broker else f"{mq.broker_name}:{mq.queue_id}"


@dataclass(frozen=True)
class Options:
    namesrv: str
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, list[int]] = field(default_factory=dict)
    starting: str | None = None
    ending: str = "latest"
    starting_timestamp: int | None = None
    max_per_trigger: int = 0
    min_partitions: int = 0
    fail_on_data_loss: bool = True
    pull_batch: int = 32
    include_properties: bool = True
    group: str | None = None
    pulls_in_flight: int = 2

    @classmethod
    def parse(cls, given: dict[str, str]) -> Options:
        o = lowered(given)
        chosen = [k for k in ("subscribe", "subscribepattern", "assign") if o.get(k)]
        if len(chosen) != 1:
            raise ValueError("give exactly one of subscribe, subscribePattern, assign")
        assign = {t: [int(q) for q in qs] for t, qs in json.loads(o.get("assign", "{}")).items()}
        return cls(
            namesrv(o),
            tuple(t.strip() for t in o.get("subscribe", "").split(",") if t.strip()),
            o.get("subscribepattern") or None,
            assign,
            o.get("startingoffsets"),
            o.get("endingoffsets", "latest"),
            int(o["startingtimestamp"]) if o.get("startingtimestamp") else None,
            int(o.get("maxoffsetspertrigger", "0")),
            int(o.get("minpartitions", "0")),
            flag(o, "failondataloss", True),
            int(o.get("pullbatchsize", "32")),
            flag(o, "includeproperties", True),
            o.get("groupid") or None,
            positive(o, "pullsInFlight", 2),
        )


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """Offsets [start, end) of one queue; start −2: the queue's earliest (a queue new since
    the last batch)."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int


# --- the driver's view of the broker -------------------------------------------------------------
class BrokerView:
    """Queues and their offsets, through a client made at the first call and kept until
    `close` (a stream's reader keeps it for the query's life: planning each micro-batch asks
    several times, and a new client each time took a name-server lookup and a connection)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._client: ClientThread | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_client": None}  # a client stays in its process

    def run(self, work: Any) -> Any:
        if self._client is None:
            self._client = ClientThread(self.options)
        return self._client.call(work(self._client.client))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def queues(self) -> list[MessageQueue]:
        async def work(client: ConsumerBase) -> list[MessageQueue]:
            o = self.options
            topics = list(o.subscribe) or list(o.assign)
            if o.pattern is not None:
                async with Admin(o.namesrv) as admin:
                    names = await admin.topics()
                regex = re.compile(o.pattern)
                topics = sorted(t for t in names if regex.fullmatch(t) and not _system(t))
            out: list[MessageQueue] = []
            for topic in topics:
                queues = await client.queues_of(topic)
                if topic in o.assign:
                    queues = [q for q in queues if q.queue_id in o.assign[topic]]
                out += queues
            return out

        result: list[MessageQueue] = self.run(work)
        return result

    def bounds(self, queues: Sequence[MessageQueue]) -> dict[MessageQueue, tuple[int, int]]:
        """(min, max) offset of each queue."""

        async def work(client: ConsumerBase) -> dict[MessageQueue, tuple[int, int]]:
            return {mq: (await client.min_offset(mq), await client.max_offset(mq)) for mq in queues}

        result: dict[MessageQueue, tuple[int, int]] = self.run(work)
        return result

    def at_timestamp(self, queues: Sequence[MessageQueue], ms: int) -> dict[MessageQueue, int]:
        async def work(client: ConsumerBase) -> dict[MessageQueue, int]:
            return {mq: await client.search_offset(mq, ms) for mq in queues}

        result: dict[MessageQueue, int] = self.run(work)
        return result

    def commit(self, offsets: dict[MessageQueue, int]) -> None:
        async def work(client: ConsumerBase) -> None:
            for mq, offset in offsets.items():
                client.offsets.update(mq, offset)
            await client.offsets.persist(list(offsets))

        self.run(work)


def _system(topic: str) -> bool:
    return topic.startswith(("%RETRY%", "%DLQ%", "rmq_sys_")) or topic in ("TBW102",)


class QueueTable:
    """Queues, their JSON keys, and offsets as JSON."""

    def __init__(self, queues: Sequence[MessageQueue]) -> None:
        self.queues = list(queues)
        first: dict[str, str] = {}
        for mq in self.queues:
            first.setdefault(mq.topic, mq.broker_name)
        self.first = first

    def key(self, mq: MessageQueue) -> str:
        return queue_key(mq, self.first[mq.topic])

    def to_json(self, offsets: dict[MessageQueue, int]) -> Offsets:
        out: Offsets = {}
        for mq, offset in offsets.items():
            out.setdefault(mq.topic, {})[self.key(mq)] = offset
        return out

    def lookup(self, offsets: Offsets, mq: MessageQueue) -> int | None:
        return offsets.get(mq.topic, {}).get(self.key(mq))


def resolve(
    table: QueueTable,
    bounds: dict[MessageQueue, tuple[int, int]],
    text: str,
    missing: int,
) -> dict[MessageQueue, int]:
    """`earliest`, `latest` or JSON (with −2 / −1) as offsets per queue."""
    spec = offset_spec(text)
    return {
        mq: offset_of(spec, mq.topic, table.key(mq), missing, bounds[mq]) for mq in table.queues
    }


# --- reading a range -----------------------------------------------------------------------------
class ClientThread:
    """A consumer client on an event loop in a thread of its own: a task puts its next pulls
    (`pullsInFlight`) on the wire before it decodes the last one, so the broker serves them
    while the task decodes; the driver's `BrokerView` keeps one between calls."""

    def __init__(self, options: Options) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = ConsumerBase(options.group or DEFAULT_GROUP, options.namesrv)
        self._thread = threading.Thread(target=self.loop.run_forever, name="rmqpy-client")
        self._thread.daemon = True
        self._thread.start()

    def submit(self, work: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        return self.submit(work).result()

    def close(self) -> None:
        """Close the client and stop the loop; bounded in time, since a reader dropped
        without being closed is only closed when collected, perhaps at interpreter exit,
        when this daemon thread may be gone."""
        if not self._thread.is_alive():
            return
        try:
            self.submit(self.client.instance.close()).result(CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.warning("a pull client did not close in time", timeout_s=CLOSE_TIMEOUT_S)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self.loop.close()


def read_range(
    options: Options, part: QueueRange, columns: tuple[str, ...] | None = None
) -> Generator[pa.RecordBatch, None, None]:
    """Pull [start, end) of one queue and yield it as Arrow batches of `columns` (None: all),
    in offset order, with its next pulls in flight while a batch is decoded. Pulls are decoded
    together, about `BATCH_RECORDS` rows or `BATCH_BYTES` at a time."""
    pulls = _pulled_records(options, part)
    pending: list[bytes] = []
    rows = size = 0
    try:
        for records, count in pulls:
            pending.append(records)
            rows += count
            size += len(records)
            if rows >= BATCH_RECORDS or size >= BATCH_BYTES:
                yield from _rows_below(options, part.end, pending, columns)
                pending, rows, size = [], 0, 0
        if pending:
            yield from _rows_below(options, part.end, pending, columns)
    finally:  # a reader stopped early: its pull client closes now, not when collected
        pulls.close()


def _pulled_records(options: Options, part: QueueRange) -> Generator[tuple[bytes, int], None, None]:
    """`read_range`'s pulls, in order: the records found, and how many offsets they take;
    offsets found gone are reported (`failOnDataLoss`) before their pull is. Up to
    `pullsInFlight` pulls are out at once, sent ahead from where full pulls would end; when
    one ends early (a commitlog file's end, a byte limit, offsets gone) those sent after it
    are dropped and the pulls go on from where it really ended."""
    puller = ClientThread(options)
    mq = MessageQueue(part.topic, part.broker, part.queue_id)

    def want(offset: int) -> int:
        return min(options.pull_batch, part.end - offset)

    def pull(offset: int) -> Future[RawPull]:
        return puller.submit(puller.client.pull_records(mq, offset, want(offset)))

    sent: deque[tuple[int, Future[RawPull]]] = deque()  # (offset pulled from, its pull)
    ahead = part.start  # where the next pull to send starts

    def drop_sent() -> None:
        while sent:
            sent.popleft()[1].cancel()

    def send_ahead() -> None:
        nonlocal ahead
        while len(sent) < options.pulls_in_flight and ahead < part.end:
            sent.append((ahead, pull(ahead)))
            ahead += want(ahead)

    try:
        offset = part.start
        if offset == EARLIEST:
            offset = puller.call(puller.client.min_offset(mq))
        while offset < part.end:
            if not sent or sent[0][0] != offset:  # the pulls sent ahead missed: start over
                drop_sent()
                ahead = offset
                send_ahead()
            raw = sent.popleft()[1].result()
            if raw.next_offset != (sent[0][0] if sent else ahead):  # it ended early
                drop_sent()
                ahead = raw.next_offset
            if ahead > offset:
                send_ahead()  # in flight while this one is handed on
            if raw.status is PullStatus.OFFSET_ILLEGAL or (
                raw.status is not PullStatus.FOUND and raw.min_offset > offset
            ):
                _lost(options, mq, offset, raw.next_offset)
                offset = max(raw.next_offset, raw.min_offset)
                continue
            if raw.status is not PullStatus.FOUND:
                raise DataLoss(
                    f"{mq.topic} queue {mq.queue_id}: nothing at offset {offset} though the "
                    f"range ends at {part.end} ({raw.status.name})"
                )
            first_offset = _first_offset(raw.records, offset)
            if first_offset > offset:
                _lost(options, mq, offset, first_offset)
            if raw.records:
                yield raw.records, raw.next_offset - offset
            offset = raw.next_offset
    finally:
        drop_sent()
        puller.close()


def _first_offset(records: bytes, otherwise: int) -> int:
    """The queue offset of the first record (`otherwise` when its head is not a record's:
    the decode then says what is wrong with it)."""
    if len(records) < RECORD_HEAD.size:
        return otherwise
    head = RECORD_HEAD.unpack_from(records)
    if head[MAGIC_FIELD] not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2):
        return otherwise
    offset: int = head[QUEUE_OFFSET_FIELD]
    return offset


def _rows_below(
    options: Options, end: int, pulls: list[bytes], columns: tuple[str, ...] | None
) -> Generator[pa.RecordBatch, None, None]:
    """The rows of the records of `pulls` whose queue offset is below `end` (a pull may
    return more), decoded together, with `columns` (None: all); none when there is none."""
    records = pulls[0] if len(pulls) == 1 else b"".join(pulls)
    walk = scan(records)
    positions = walk.positions
    if walk.damage is not None:  # (a broker that serves what its disk holds, as Java's does)
        raise ValueError(f"a pulled record is damaged: {walk.damage.reason}")
    ends_at = 0
    if len(positions):
        last = int(positions[-1])
        ends_at = last + RECORD_HEAD.unpack_from(records, last)[0]
    if ends_at != len(records):  # zeros or a filler where records were to be
        raise ValueError(
            f"a pulled record is damaged: the records end at byte {ends_at} of {len(records)}"
        )
    batch, damage = decode_batch(records, positions)
    if damage is not None:
        raise ValueError(f"a pulled record is damaged: {damage.reason}")
    offsets = batch["queue_offset"]
    if batch.num_rows and pc.max(offsets).as_py() >= end:  # (only a range's last pull)
        batch = batch.filter(pc.less(offsets, end))
    if not options.include_properties:
        index = batch.schema.get_field_index("properties")
        batch = batch.set_column(
            index,
            batch.schema.field(index),
            pa.nulls(batch.num_rows, batch.schema.field(index).type),
        )
    if batch.num_rows:
        yield select(batch, columns)


def _went_back(options: Options, mq: MessageQueue, was: int, now: int) -> None:
    what = (
        f"{mq.topic} queue {mq.queue_id}: its offsets went back from {was} to {now} (the topic "
        "was deleted and sent to again, or the broker's store replaced)"
    )
    _data_loss(options, what, "read it again from its start")


def _lost(options: Options, mq: MessageQueue, start: int, resumed: int) -> None:
    what = f"{mq.topic} queue {mq.queue_id}: offsets {start}..{resumed - 1} are gone (expired)"
    _data_loss(options, what, "skip them")


def _data_loss(options: Options, what: str, instead: str) -> None:
    """Fail the query (failOnDataLoss, the default) or log and go on, doing `instead`."""
    if options.fail_on_data_loss:
        raise DataLoss(f"{what}; set failOnDataLoss=false to {instead}")
    log.warning("data loss", what=what)


def split_ranges(ranges: list[QueueRange], min_partitions: int) -> list[QueueRange]:
    """Split the longest ranges until there are at least `min_partitions`."""
    out = list(ranges)
    while 0 < len(out) < min_partitions:
        longest = max(out, key=lambda r: r.end - r.start)
        if longest.end - longest.start < 2 or longest.start < 0:
            break
        middle = (longest.start + longest.end) // 2
        i = out.index(longest)
        out[i : i + 1] = [replace(longest, end=middle), replace(longest, start=middle)]
    return out


# --- batch ---------------------------------------------------------------------------------------
class BatchReader(DataSourceReader):
    def __init__(self, options: Options, columns: tuple[str, ...] | None = None) -> None:
        self.options = options
        self.columns = columns  # those of a schema given to the read, else all

    def partitions(self) -> list[QueueRange]:
        view = BrokerView(self.options)
        try:
            table = QueueTable(view.queues())
            bounds = view.bounds(table.queues)
            if self.options.starting_timestamp is not None:
                starts = view.at_timestamp(table.queues, self.options.starting_timestamp)
            else:
                starts = resolve(table, bounds, self.options.starting or "earliest", EARLIEST)
            ends = resolve(table, bounds, self.options.ending, LATEST)
        finally:
            view.close()
        ranges = [
            QueueRange(mq.topic, mq.broker_name, mq.queue_id, starts[mq], ends[mq])
            for mq in table.queues
            if ends[mq] > starts[mq]
        ]
        return split_ranges(ranges, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange)
        return read_range(self.options, partition, self.columns)


# --- streaming -----------------------------------------------------------------------------------
class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options, columns: tuple[str, ...] | None = None) -> None:
        self.options = options
        self.columns = columns  # those of a schema given to the read, else all
        self.view = BrokerView(options)
        self.target: dict[MessageQueue, int] | None = None  # trigger(availableNow=True)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Read up to what is there now, and nothing that arrives later."""
        table = self._table()
        self.target = {mq: high for mq, (_low, high) in self.view.bounds(table.queues).items()}

    def _table(self) -> QueueTable:
        return QueueTable(self.view.queues())

    def initialOffset(self) -> Offsets:  # noqa: N802 - Spark's name
        table = self._table()
        if self.options.starting_timestamp is not None:
            at = self.view.at_timestamp(table.queues, self.options.starting_timestamp)
            return table.to_json(at)
        bounds = self.view.bounds(table.queues)
        return table.to_json(resolve(table, bounds, self.options.starting or "latest", LATEST))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        if self.options.max_per_trigger > 0:
            return ReadMaxRows(self.options.max_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:  # noqa: N802
        table = self._table()
        bounds = self.view.bounds(table.queues)
        ends: dict[MessageQueue, int] = {}
        begins: dict[MessageQueue, int] = {}
        for mq in table.queues:
            begun = table.lookup(start, mq)
            low, high = bounds[mq]
            if self.target is not None:
                high = self.target.get(mq, high)
            if begun is not None and high < begun:
                # The queue started over (its topic deleted and sent to again): as Spark's
                # Kafka source, data loss; if allowed, this batch ends at the queue's start
                # and the next one reads it from there.
                _went_back(self.options, mq, begun, high)
                ends[mq] = begins[mq] = low
                continue
            begins[mq] = low if begun is None else begun  # a new queue: earliest
            ends[mq] = max(high, begins[mq])
        if isinstance(limit, ReadMaxRows):
            ends = cap_by_lag(begins, ends, limit.max_rows)
        return table.to_json(ends)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[QueueRange]:
        table = self._table()
        ranges = []
        for mq in table.queues:
            stop = table.lookup(end, mq)
            if stop is None:
                continue
            begun = table.lookup(start, mq)
            begin = EARLIEST if begun is None else begun
            if stop > begin:
                ranges.append(QueueRange(mq.topic, mq.broker_name, mq.queue_id, begin, stop))
        return split_ranges(ranges, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange)
        return read_range(self.options, partition, self.columns)

    def commit(self, end: Offsets) -> None:
        if self.options.group is None:
            return
        table = self._table()
        done = {mq: v for mq in table.queues if (v := table.lookup(end, mq)) is not None}
        self.view.commit(done)

    def stop(self) -> None:
        self.view.close()


def cap_by_lag(
    begins: dict[MessageQueue, int], ends: dict[MessageQueue, int], budget: int
) -> dict[MessageQueue, int]:
    """At most `budget` offsets in all, shared across queues in proportion to their lag
    (Spark's Kafka source does the same with maxOffsetsPerTrigger)."""
    lag = {mq: ends[mq] - begins[mq] for mq in ends}
    total = sum(lag.values())
    if total <= budget:
        return ends
    capped = {mq: begins[mq] + lag[mq] * budget // total for mq in ends}
    left = budget - sum(capped[mq] - begins[mq] for mq in ends)
    for mq in sorted(ends, key=lambda q: lag[q] - (capped[q] - begins[q]), reverse=True):
        if left <= 0:
            break
        if capped[mq] < ends[mq]:
            capped[mq] += 1
            left -= 1
    return capped


class BrokerDataSource(DataSource):
    """Format `rmqpy`."""

    @classmethod
    def name(cls) -> str:
        return "rmqpy"

    def schema(self) -> str:
        return DDL

    def reader(self, schema: Any) -> BatchReader:
        return BatchReader(Options.parse(dict(self.options)), chosen_columns(schema))

    def streamReader(self, schema: Any) -> StreamReader:  # noqa: N802 - Spark's name
        return StreamReader(Options.parse(dict(self.options)), chosen_columns(schema))

    def writer(self, schema: Any, overwrite: bool) -> BatchWriter:
        return BatchWriter(SinkOptions.parse(dict(self.options)))

    def streamWriter(self, schema: Any, overwrite: bool) -> StreamWriter:  # noqa: N802
        return StreamWriter(SinkOptions.parse(dict(self.options)))
