"""One topic-queue's index into the commitlog (RocketMQ `ConsumeQueue`).

Logical offset N is the 20-byte entry at byte N*20 of `consumequeue/<topic>/<queueId>/`:
``i64 commitLogOffset | i32 size | i64 tagsCode``. Dispatch appends entries in batches (one
pwrite per queue per dispatch round); an entry whose record ends at or below
`max_physic_offset` was already written and is skipped, so dispatching twice is harmless.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from itertools import chain

import numpy as np
import structlog

from rmqpy.config.compiled import twin
from rmqpy.store.layout import (
    CQ_ENTRY,
    CQ_ENTRY_DTYPE,
    CQ_PLACEHOLDER,
    CQ_STORE_UNIT_SIZE,
    cq_entries,
)
from rmqpy.store.mapped_file import MappedFile
from rmqpy.store.mapped_file_queue import MappedFileQueue
from rmqpy.store.queue_check import first_disagreement

log = structlog.get_logger(__name__)

CQEntry = tuple[int, int, int]  # (commitlog offset, size, tags code)
# The same for several entries, column by column.
CQColumns = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
# (queue offset, commitlog offset, size, tags code)
DispatchEntry = tuple[int, int, int, int]


class BoundaryType(Enum):
    """RocketMQ 5 `BoundaryType` for search by time."""

    LOWER = "lower"
    UPPER = "upper"


def _written_entries(data: bytes) -> int:
    """How many 20-byte entries of `data` hold anything but zeros."""
    entries = np.frombuffer(data[: len(data) - len(data) % CQ_STORE_UNIT_SIZE], np.uint8)
    return int(entries.reshape(-1, CQ_STORE_UNIT_SIZE).any(axis=1).sum())


def encode_entries(phys: list[int], sizes: list[int], tags: list[int]) -> bytes:
    """Consume-queue entries of these columns, back to back."""
    entries = np.empty(len(phys), CQ_ENTRY_DTYPE)
    entries["offset"] = phys
    entries["size"] = sizes
    entries["tags"] = tags
    return entries.tobytes()


_compiled = twin("rmqpy.store._consume_queue")
encode: Callable[[list[int], list[int], list[int]], bytes] = (
    encode_entries if _compiled is None else _compiled.encode_entries
)
# `MessageStore.get_max_offset_in_queue` read from the consume queues' table, compiled (its
# reference is that method; None where the compiled core is not built).
max_offset_in: Callable[[dict[str, dict[int, ConsumeQueue]], str, int], int] | None = (
    None if _compiled is None else _compiled.max_offset_in
)


def columns(data: bytes) -> CQColumns:
    """Entries as stored (20 bytes each) as columns: commitlog offsets, sizes and tags codes."""
    flat = cq_entries(len(data) // CQ_STORE_UNIT_SIZE).unpack(data)
    return flat[0::3], flat[1::3], flat[2::3]


class ConsumeQueue:
    def __init__(self, root_dir: str, topic: str, queue_id: int, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.store_path = os.path.join(root_dir, topic, str(queue_id))
        self.queue = MappedFileQueue(
            self.store_path, file_size, mapped=False, defer_dir_sync=True, append_mapped=True
        )
        self.max_physic_offset = -1
        self.min_logic_offset = 0

    # --- load / recover -------------------------------------------------------------------------
    def load(self) -> int:
        """Open the queue's files; returns how many were dropped as damaged (see
        `MappedFileQueue.load`): the caller re-dispatches what they held."""
        return self.queue.load(derived=True)

    def recover(self) -> int:
        """Find the last valid entry (offset >= 0 and size > 0) and cut what follows;
        returns how many entries were cut that were not blank (damage: a file's unwritten
        tail is zeros)."""
        files = self.queue.files
        if not files:
            return 0
        index = max(len(files) - 3, 0)
        valid_end = files[index].file_from_offset
        max_phy = -1
        cut = 0
        for n, mapped in enumerate(files[index:], start=index):
            data = mapped.read(0, mapped.file_size)
            pos = 0
            while pos < mapped.file_size:
                offset, size, _tags = CQ_ENTRY.unpack_from(data, pos)
                if offset < 0 or size <= 0:
                    break
                if size != CQ_PLACEHOLDER[1]:
                    max_phy = offset + size
                pos += CQ_STORE_UNIT_SIZE
            valid_end = mapped.file_from_offset + pos
            if pos < mapped.file_size:
                cut = _written_entries(data[pos:]) + sum(
                    _written_entries(later.read(0, later.file_size)) for later in files[n + 1 :]
                )
                break
        self.max_physic_offset = max_phy
        self.queue.truncate_dirty_files(valid_end)
        for mapped in self.queue.files:
            if mapped.end_offset <= valid_end:
                mapped.set_positions(mapped.file_size)
        return cut

    # --- write ----------------------------------------------------------------------------------
    def put_columns(
        self, queue_offsets: list[int], phys: list[int], sizes: list[int], tags: list[int]
    ) -> int:
        """A dispatch round's entries for this queue, as columns in queue-offset order: at once
        where `append_run` can, else (a gap, a new file, a repeat) entry by entry."""
        if self.append_run(
            queue_offsets[0],
            queue_offsets[-1],
            len(queue_offsets),
            phys[0] + sizes[0],
            phys[-1] + sizes[-1],
            encode(phys, sizes, tags),
        ):
            return len(queue_offsets)
        return self.put_entries(list(zip(queue_offsets, phys, sizes, tags, strict=True)))

    def append_run(
        self,
        first_offset: int,
        last_offset: int,
        count: int,
        first_end: int,
        last_end: int,
        entries: bytes,
    ) -> bool:
        """Write `count` encoded `entries` in one go when they are consecutive
        (queue offsets `first_offset` to `last_offset`), continue the queue, fit its file and
        are new (the first record ends past `max_physic_offset`); False, with nothing
        written, otherwise. `first_end`/`last_end`: where their first and last records end."""
        last = self.queue.last()
        if (
            last is None
            or last_offset - first_offset != count - 1
            or first_offset * CQ_STORE_UNIT_SIZE != last.file_from_offset + last.wrote_position
            or last.free_space < count * CQ_STORE_UNIT_SIZE
            or first_end <= self.max_physic_offset
        ):
            return False
        last.append(entries)
        self.max_physic_offset = last_end
        return True

    def put_entries(self, entries: Sequence[DispatchEntry]) -> int:
        """Append dispatched entries in queue-offset order; returns how many were written."""
        buf = bytearray()
        mapped: MappedFile | None = None
        written = 0
        repeated: list[int] = []  # queue offsets already taken by other records
        for queue_offset, phy, size, tags in entries:
            if phy + size <= self.max_physic_offset:
                continue  # already dispatched
            expected = queue_offset * CQ_STORE_UNIT_SIZE
            current = self.queue.max_offset() + len(buf)
            if mapped is None or expected != current or mapped.free_space <= len(buf):
                if buf and mapped is not None:
                    mapped.append(buf)
                    buf = bytearray()
                mapped = self._file_for(expected)
                if mapped is None:
                    repeated.append(queue_offset)
                    continue
            buf += CQ_ENTRY.pack(phy, size, tags)
            self.max_physic_offset = phy + size
            written += 1
        if buf and mapped is not None:
            mapped.append(buf)
        if repeated:  # one line for the lot: a recovery may re-dispatch thousands
            log.warning(
                "consume queue entries already present",
                topic=self.topic,
                queue_id=self.queue_id,
                count=len(repeated),
                first_queue_offset=repeated[0],
                last_queue_offset=repeated[-1],
            )
        return written

    def _file_for(self, expected: int) -> MappedFile | None:
        """The file to write the entry at byte `expected` into, filling gaps with placeholders."""
        current = self.queue.max_offset()
        last = self.queue.last()
        if last is None:
            mapped = self.queue.create_file(expected - expected % self.file_size)
            self.min_logic_offset = expected
            self._fill_placeholders(mapped, expected - mapped.file_from_offset)
            return mapped
        if expected < current:
            return None  # taken already: put_entries says so
        if expected > current:
            log.warning(
                "consume queue gap filled with placeholders",
                topic=self.topic,
                queue_id=self.queue_id,
                from_offset=current // CQ_STORE_UNIT_SIZE,
                to_offset=expected // CQ_STORE_UNIT_SIZE,
            )
        while True:
            last_file = self.queue.get_last_mapped_file(expected)
            assert last_file is not None
            mapped = last_file
            end = mapped.file_from_offset + mapped.file_size
            target = min(expected, end)
            self._fill_placeholders(mapped, target - mapped.file_from_offset)
            if expected < end:
                return mapped

    @staticmethod
    def _fill_placeholders(mapped: MappedFile, upto: int) -> None:
        gap = upto - mapped.wrote_position
        if gap > 0:
            mapped.append(CQ_ENTRY.pack(*CQ_PLACEHOLDER) * (gap // CQ_STORE_UNIT_SIZE))

    # --- read -----------------------------------------------------------------------------------
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def max_offset_in_queue(self) -> int:
        return self.queue.max_offset() // CQ_STORE_UNIT_SIZE

    def get_entries(self, start: int, max_count: int) -> list[CQEntry]:
        """Up to `max_count` entries from logical offset `start`, within one file."""
        return list(CQ_ENTRY.iter_unpack(self.entry_bytes(start, max_count)))

    def get_columns(self, start: int, max_count: int) -> CQColumns:
        """The same entries as columns: commitlog offsets, sizes and tags codes."""
        return columns(self.entry_bytes(start, max_count))

    def entry_bytes(self, start: int, max_count: int) -> bytes:
        """The same entries as stored, 20 bytes each."""
        pos = start * CQ_STORE_UNIT_SIZE
        mapped = self.queue.find_mapped_file_by_offset(pos)
        if mapped is None:
            return b""
        local = pos - mapped.file_from_offset
        count = min(max_count, (mapped.wrote_position - local) // CQ_STORE_UNIT_SIZE)
        if count <= 0:
            return b""
        try:
            return mapped.read(local, count * CQ_STORE_UNIT_SIZE)
        except ValueError:  # closed by expiry
            return b""

    def iter_entries(self, start: int, limit: int, chunk: int) -> Iterator[CQEntry]:
        """Entries from `start`, at most `limit`, read `chunk` at a time as the caller asks."""
        return chain.from_iterable(self._entry_chunks(start, limit, chunk))

    def _entry_chunks(self, start: int, limit: int, chunk: int) -> Iterator[list[CQEntry]]:
        index, end = start, start + limit
        while index < end:
            entries = self.get_entries(index, min(chunk, end - index))
            if not entries:
                return
            yield entries
            index += len(entries)

    def get_entry(self, index: int) -> CQEntry | None:
        entries = self.get_entries(index, 1)
        return entries[0] if entries else None

    def get_offset_in_queue_by_time(
        self,
        timestamp: int,
        store_time_of: Callable[[int, int], int | None],
        commitlog_min: int,
        boundary: BoundaryType = BoundaryType.LOWER,
    ) -> int:
        """Binary search by store time; `store_time_of(phy, size)` reads the record."""
        low = self.min_offset_in_queue()
        high = self.max_offset_in_queue() - 1
        if high < low:
            return 0

        def time_at(index: int) -> int:
            entry = self.get_entry(index)
            if entry is None or entry[0] < commitlog_min:
                return -1  # data gone counts as earlier
            stamp = store_time_of(entry[0], entry[1])
            return -1 if stamp is None else stamp

        if boundary is BoundaryType.LOWER:
            lo, hi = low, high + 1  # first index with time >= timestamp
            while lo < hi:
                mid = (lo + hi) // 2
                if time_at(mid) < timestamp:
                    lo = mid + 1
                else:
                    hi = mid
            return lo
        lo, hi = low - 1, high  # last index with time <= timestamp
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if time_at(mid) <= timestamp:
                lo = mid
            else:
                hi = mid - 1
        return lo if lo >= low else 0

    # --- maintenance ------------------------------------------------------------------------------
    def truncate_dirty_logic_files(self, phy_offset: int) -> int:
        """Drop entries pointing at or beyond `phy_offset`; returns how many were cut."""
        files = self.queue.files
        cut_at: int | None = None
        for mapped in reversed(files):
            data = mapped.read(0, mapped.wrote_position)
            first_kept = None
            for pos in range(len(data) - CQ_STORE_UNIT_SIZE, -1, -CQ_STORE_UNIT_SIZE):
                offset, size, _ = CQ_ENTRY.unpack_from(data, pos)
                if size == CQ_PLACEHOLDER[1] or offset + size <= phy_offset:
                    first_kept = pos + CQ_STORE_UNIT_SIZE
                    break
            if first_kept is None:
                cut_at = mapped.file_from_offset
                continue
            cut_at = mapped.file_from_offset + first_kept
            break
        if cut_at is None:
            return 0
        before = self.queue.max_offset()
        self.queue.truncate_dirty_files(cut_at)
        self._recompute_max_physic()
        return (before - cut_at) // CQ_STORE_UNIT_SIZE

    def repair_against(self, commitlog: Sequence[MappedFile], verify_from: int) -> int | None:
        """Cut the queue at its first entry the commitlog does not back (`queue_check`), the
        bytes after it zeroed; returns how many entries were cut, None when all agree. The
        caller dispatches the commitlog again from `max_physic_offset` to rebuild the rest."""
        for mapped in self.queue.files:
            if mapped.wrote_position < CQ_STORE_UNIT_SIZE:
                continue
            last = CQ_ENTRY.unpack_from(
                mapped.read(mapped.wrote_position - CQ_STORE_UNIT_SIZE, CQ_STORE_UNIT_SIZE)
            )
            if last[0] >= 0 and 0 < last[1] < CQ_PLACEHOLDER[1] and sum(last[:2]) <= verify_from:
                continue  # it all points below the window recovery checked
            first = mapped.file_from_offset // CQ_STORE_UNIT_SIZE
            data = mapped.read(0, mapped.wrote_position)
            bad = first_disagreement(data, first, self.queue_id, commitlog, verify_from)
            if bad is None:
                continue
            cut_at = bad * CQ_STORE_UNIT_SIZE
            before = self.queue.max_offset()
            self.queue.truncate_dirty_files(cut_at)
            position = cut_at - mapped.file_from_offset
            mapped.write_at(position, bytes(mapped.file_size - position))
            self._recompute_max_physic()
            return (before - cut_at) // CQ_STORE_UNIT_SIZE
        return None

    def _recompute_max_physic(self) -> None:
        self.max_physic_offset = -1
        for mapped in reversed(self.queue.files):
            data = mapped.read(0, mapped.wrote_position)
            for pos in range(len(data) - CQ_STORE_UNIT_SIZE, -1, -CQ_STORE_UNIT_SIZE):
                offset, size, _ = CQ_ENTRY.unpack_from(data, pos)
                if size != CQ_PLACEHOLDER[1]:
                    self.max_physic_offset = offset + size
                    return

    def correct_min_offset(self, commitlog_min: int) -> None:
        """Move the minimum to the first entry whose data still exists."""
        for mapped in self.queue.files:
            data = mapped.read(0, mapped.wrote_position)
            for pos in range(0, len(data), CQ_STORE_UNIT_SIZE):
                offset, size, _ = CQ_ENTRY.unpack_from(data, pos)
                if size != CQ_PLACEHOLDER[1] and offset >= commitlog_min:
                    self.min_logic_offset = mapped.file_from_offset + pos
                    return
        self.min_logic_offset = self.queue.max_offset()

    def delete_expired_files(self, commitlog_min: int) -> int:
        """Delete files whose last entry points below the commitlog minimum (never the last)."""
        doomed = []
        for mapped in self.queue.files[:-1]:
            if mapped.wrote_position < CQ_STORE_UNIT_SIZE:
                break
            offset, size, _ = CQ_ENTRY.unpack_from(
                mapped.read(mapped.wrote_position - CQ_STORE_UNIT_SIZE, CQ_STORE_UNIT_SIZE)
            )
            if offset + size > commitlog_min or size == CQ_PLACEHOLDER[1]:
                break
            doomed.append(mapped)
        if doomed:
            self.queue.delete_files(doomed)
        self.correct_min_offset(commitlog_min)
        return len(doomed)

    def flush(self, least_pages: int, sync: Callable[[int], None] = os.fdatasync) -> bool:
        return self.queue.flush(least_pages, sync)

    def close(self) -> None:
        self.queue.close()
