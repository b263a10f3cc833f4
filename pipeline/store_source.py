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
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import structlog
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pipeline.arrow_records import decode_batch
from pipeline.commitlog_scan import Damage, map_file, scan
from pipeline.schema import DDL
from store.layout import CQ_ENTRY_DTYPE, CQ_PLACEHOLDER, I32

log = structlog.get_logger(__name__)

BATCH_RECORDS = 8192  # records per Arrow batch
BATCH_BYTES = 64 * 1024 * 1024  # and at most this many bytes of records
ON_CORRUPT = ("stopFile", "fail")


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

    @classmethod
    def parse(cls, given: dict[str, str]) -> StoreOptions:
        options = {k.lower(): v for k, v in given.items()}  # Spark's options ignore case
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
        return cls(
            root,
            topics,
            _flag(options, "checkcrc"),
            on_corrupt,
            int(options.get("maxrecordsperpartition", "0")),
        )


def _flag(options: dict[str, str], name: str) -> bool:
    value = options.get(name, "false").lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {value!r}")
    return value == "true"


def commitlog_files(root: Path) -> list[Path]:
    """The commitlog files in offset order (named by their first byte's offset)."""
    return sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit())


def record_starts(root: Path) -> npt.NDArray[np.int64]:
    """Every commitlog offset a consume-queue entry points at, sorted and distinct."""
    found = [np.zeros(0, dtype=np.int64)]
    cq_root = root / "consumequeue"
    if cq_root.is_dir():
        for top, _dirs, files in os.walk(cq_root):
            for name in files:
                entries = np.fromfile(os.path.join(top, name), dtype=CQ_ENTRY_DTYPE)
                live = (entries["size"] > 0) & (entries["size"] != CQ_PLACEHOLDER[1])
                found.append(entries["offset"][live].astype(np.int64))
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


class StoreReader(DataSourceReader):
    def __init__(self, options: StoreOptions) -> None:
        self.options = options

    def partitions(self) -> list[FileRange]:
        return plan(self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileRange)
        path = Path(partition.path)
        buf = map_file(path)
        found = scan(buf, partition.start, partition.end, self.options.check_crc)
        positions = found.positions
        damage = found.damage
        for chunk in _chunks(buf, positions):
            batch, broken = decode_batch(buf, chunk)
            if self.options.topics:
                batch = batch.filter(pc.is_in(batch["topic"], pa.array(self.options.topics)))
            if batch.num_rows:
                yield batch
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
        return StoreReader(StoreOptions.parse(dict(self.options)))
