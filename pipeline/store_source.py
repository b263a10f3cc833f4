"""`spark.read.format("rmqpy-store").load(STORE_DIR)`: a broker's store directory as a table,
read-only, with no broker running (a backup, a dead broker's disk, RocketMQ's own files).

One partition per commitlog file. With `maxRecordsPerPartition` a file is split further, at
record boundaries taken from the consume queues' entries (every entry is the start of a
record), so no partition has to walk another's records to find its first one. A partition
maps its file read-only, walks it (`commitlog_scan`) and yields Arrow batches
(`arrow_records.decode_batch`).

Options:
- `topic`: only these topics (comma-separated).
- `checkCRC` (false): validate every body's CRC as recovery does.
- `onCorruptRecord` (`stopFile`): at a damaged or torn record, `stopFile` keeps what came
  before it in that file and logs where and why it stopped; `fail` fails the query.
- `maxRecordsPerPartition` (0: one partition per file).
- `via` (`commitlog`): `consumequeue` reads each (topic, queue) through its consume queue
  instead, one partition per queue, between `startingOffsets` and `endingOffsets` given as
  the live `rmqpy` source takes them (`{"topic": {"queueId": offset}}`, −2 earliest, −1
  latest), so the same ranges can be read from a live broker or from its disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import structlog
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from rmqpy.pipeline.arrow_records import decode_batch
from rmqpy.pipeline.commitlog_scan import Damage, scan
from rmqpy.pipeline.options import EARLIEST, LATEST, flag, lowered, offset_of, offset_spec
from rmqpy.pipeline.schema import DDL, chosen_columns, select
from rmqpy.store.fileio import map_read_only
from rmqpy.store.layout import CQ_ENTRY_DTYPE, CQ_PLACEHOLDER, I32

log = structlog.get_logger(__name__)

BATCH_RECORDS = 8192  # records per Arrow batch
BATCH_BYTES = 64 * 1024 * 1024  # and at most this many bytes of records
ON_CORRUPT = ("stopFile", "fail")
VIAS = ("commitlog", "consumequeue")


class CorruptStore(ValueError):
    """A damaged record met with onCorruptRecord=fail."""


@dataclass(frozen=True)
class FileRange(InputPartition):
    """Records of one commitlog file from byte `start` up to `end` (None: the written end)."""

    path: str
    start: int
    end: int | None


@dataclass(frozen=True)
class StoreOptions:
    root: Path
    topics: frozenset[str]
    check_crc: bool
    on_corrupt: str
    max_records: int
    via: str = "commitlog"
    starting: str = "earliest"
    ending: str = "latest"

    @classmethod
    def parse(cls, given: dict[str, str]) -> StoreOptions:
        options = lowered(given)
        path = options.get("path")
        if not path:
            raise ValueError("rmqpy-store needs the store directory: .load(STORE_DIR)")
        root = Path(path)
        if not (root / "commitlog").is_dir():
            raise ValueError(f"{root} is not a store directory: it has no commitlog/")
        on_corrupt = options.get("oncorruptrecord", "stopFile")
        if on_corrupt not in ON_CORRUPT:
            raise ValueError(f"onCorruptRecord must be one of {', '.join(ON_CORRUPT)}")
        topics = frozenset(t.strip() for t in options.get("topic", "").split(",") if t.strip())
        via = options.get("via", "commitlog")
        if via not in VIAS:
            raise ValueError(f"via must be one of {', '.join(VIAS)}")
        ranged = [k for k in ("startingoffsets", "endingoffsets") if k in options]
        if ranged and via != "consumequeue":
            raise ValueError("startingOffsets and endingOffsets need via=consumequeue")
        return cls(
            root,
            topics,
            flag(options, "checkcrc", False),
            on_corrupt,
            int(options.get("maxrecordsperpartition", "0")),
            via,
            options.get("startingoffsets", "earliest"),
            options.get("endingoffsets", "latest"),
        )


def commitlog_files(root: Path) -> list[Path]:
    """The commitlog files in offset order (named by their first byte's offset)."""
    return sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit())


def _live(entries: npt.NDArray[np.void]) -> npt.NDArray[np.bool_]:
    """Entries that point at a record: not the unwritten tail, not a placeholder."""
    size = entries["size"]
    live: npt.NDArray[np.bool_] = (size > 0) & (size != CQ_PLACEHOLDER[1])
    return live


def record_starts(root: Path) -> npt.NDArray[np.int64]:
    """Every commitlog offset a consume-queue entry points at, sorted and distinct."""
    found = [np.zeros(0, dtype=np.int64)]
    cq_root = root / "consumequeue"
    if cq_root.is_dir():
        for top, _dirs, files in os.walk(cq_root):
            for name in files:
                entries = np.fromfile(os.path.join(top, name), dtype=CQ_ENTRY_DTYPE)
                found.append(entries["offset"][_live(entries)].astype(np.int64))
    return np.unique(np.concatenate(found))


def plan(options: StoreOptions) -> list[FileRange]:
    files = commitlog_files(options.root)
    if options.max_records <= 0:
        return [FileRange(str(p), 0, None) for p in files]
    starts = record_starts(options.root)
    ranges: list[FileRange] = []
    for path in files:
        base = int(path.name)
        inside = starts[(starts >= base) & (starts < base + path.stat().st_size)] - base
        cuts = [0, *inside[options.max_records :: options.max_records].tolist()]
        ends: list[int | None] = [*cuts[1:], None]
        ranges += [FileRange(str(path), a, b) for a, b in zip(cuts, ends, strict=True)]
    return ranges


@dataclass(frozen=True)
class QueueSlice(InputPartition):
    """Queue offsets [start, end) of one consume queue, read through its entries."""

    topic: str
    queue_id: int
    start: int
    end: int


def queue_entries(root: Path, topic: str, queue_id: int) -> tuple[int, npt.NDArray[np.void]]:
    """(the queue offset of the first entry, every entry from there on, placeholders and the
    unwritten tail left out at the ends). Files are named by their first entry's byte offset."""
    directory = root / "consumequeue" / topic / str(queue_id)
    files = sorted((p for p in directory.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    if not files:
        return 0, np.zeros(0, dtype=CQ_ENTRY_DTYPE)
    first = int(files[0].name) // CQ_ENTRY_DTYPE.itemsize
    entries = np.concatenate([np.fromfile(p, dtype=CQ_ENTRY_DTYPE) for p in files])
    live = _live(entries)
    if not live.any():
        return first + len(entries), entries[:0]
    low, high = int(np.argmax(live)), len(live) - int(np.argmax(live[::-1]))
    return first + low, entries[low:high]


def plan_queues(options: StoreOptions) -> list[QueueSlice]:
    """A slice per queue, from startingOffsets to endingOffsets (`{"topic": {"queueId": n}}`,
    −2 earliest, −1 latest, or the words), clamped to what the queue holds."""
    starting = offset_spec(options.starting)
    ending = offset_spec(options.ending)
    slices = []
    cq_root = options.root / "consumequeue"
    topics = sorted(p.name for p in cq_root.iterdir()) if cq_root.is_dir() else []
    for topic in topics:
        if options.topics and topic not in options.topics:
            continue
        for queue_dir in sorted((cq_root / topic).iterdir(), key=lambda p: p.name):
            if not queue_dir.name.isdigit():
                continue
            queue_id = int(queue_dir.name)
            low, entries = queue_entries(options.root, topic, queue_id)
            high = low + len(entries)

            key = str(queue_id)
            start = max(offset_of(starting, topic, key, EARLIEST, (low, high)), low)
            end = min(offset_of(ending, topic, key, LATEST, (low, high)), high)
            if end > start:
                slices.append(QueueSlice(topic, queue_id, start, end))
    return slices


def read_queue(root: Path, part: QueueSlice) -> Iterator[pa.RecordBatch]:
    """The slice's records, in queue order: each entry's record is found in its commitlog
    file; consecutive entries in one file are decoded together."""
    low, entries = queue_entries(root, part.topic, part.queue_id)
    wanted = entries[part.start - low : part.end - low]
    phy = wanted["offset"].astype(np.int64)
    files = commitlog_files(root)
    bases = np.array([int(p.name) for p in files], dtype=np.int64)
    which = np.searchsorted(bases, phy, side="right") - 1
    mapped: dict[int, memoryview] = {}  # each file once, however many batches it serves
    start = 0
    while start < len(phy):
        index = int(which[start])
        stop = start
        while stop < len(phy) and which[stop] == index and stop - start < BATCH_RECORDS:
            stop += 1
        if index < 0:
            raise CorruptStore(f"{part.topic} queue {part.queue_id}: record gone (expired)")
        path = files[index]
        if index not in mapped:
            mapped[index] = map_read_only(path)
        buf = mapped[index]
        batch, damage = decode_batch(buf, phy[start:stop] - bases[index])
        if damage is not None:
            raise CorruptStore(f"damaged record in {path} at byte {damage.position}")
        yield batch
        start = stop


class StoreReader(DataSourceReader):
    def __init__(self, options: StoreOptions, columns: tuple[str, ...] | None = None) -> None:
        self.options = options
        self.columns = columns  # those of a schema given to the read, else all

    def partitions(self) -> Sequence[InputPartition]:
        if self.options.via == "consumequeue":
            return plan_queues(self.options)
        return plan(self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, QueueSlice):
            for batch in read_queue(self.options.root, partition):
                yield select(batch, self.columns)
            return
        assert isinstance(partition, FileRange)
        path = Path(partition.path)
        buf = map_read_only(path)
        found = scan(buf, partition.start, partition.end, self.options.check_crc)
        positions = found.positions
        damage = found.damage
        for chunk in _chunks(buf, positions):
            batch, broken = decode_batch(buf, chunk)
            if self.options.topics:
                batch = batch.filter(pc.is_in(batch["topic"], pa.array(self.options.topics)))
            if batch.num_rows:
                yield select(batch, self.columns)
            if broken is not None:
                damage = broken
                break
        if damage is not None:
            self._damaged(path, damage)

    def _damaged(self, path: Path, damage: Damage) -> None:
        where = f"{path} at byte {damage.position}: {damage.reason}"
        if self.options.on_corrupt == "fail":
            raise CorruptStore(f"damaged record in {where} (onCorruptRecord=fail)")
        log.warning("commitlog file read up to a damaged record", where=where)


def _chunks(buf: memoryview, positions: npt.NDArray[np.int64]) -> Iterator[npt.NDArray[np.int64]]:
    """Runs of at most BATCH_RECORDS records and about BATCH_BYTES bytes."""
    if not len(positions):
        return
    last = int(positions[-1])
    ends = np.append(positions[1:], last + I32.unpack_from(buf, last)[0])
    start = 0
    while start < len(positions):
        stop = min(start + BATCH_RECORDS, len(positions))
        span = np.searchsorted(ends, positions[start] + BATCH_BYTES, side="right")
        stop = max(start + 1, min(stop, int(span)))
        yield positions[start:stop]
        start = stop


class StoreDataSource(DataSource):
    """Format `rmqpy-store`."""

    @classmethod
    def name(cls) -> str:
        return "rmqpy-store"

    def schema(self) -> str:
        return DDL

    def reader(self, schema: Any) -> StoreReader:
        return StoreReader(StoreOptions.parse(dict(self.options)), chosen_columns(schema))
