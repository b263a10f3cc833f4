"""Crash recovery: scan, validate, truncate at the first bad record, report what was cut.

Mirrors RocketMQ `CommitLog.recoverNormally/recoverAbnormally`:

* normal (no `abort` file): validate records from the third file from the end;
* abnormal: walk back to the newest file whose first record is older than the checkpoint's
  safe point (min(physic, logics) - 3 s) and re-dispatch everything from there.

Either way the commitlog is cut at the first record with a bad length, magic or CRC, the bytes
after it in that file are zeroed (so nothing stale can look valid later), later files are
deleted, and consume queues and the index are trimmed to match. A run of zero bytes where
the next record would start is the normal end of data, not damage.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

import structlog

from rmqpy.store.checkpoint import StoreCheckpoint
from rmqpy.store.layout import RECORD_HEAD
from rmqpy.store.mapped_file import MappedFile
from rmqpy.store.mapped_file_queue import MappedFileQueue
from rmqpy.store.message import RecordError, check_record, record_store_timestamp

log = structlog.get_logger(__name__)

ZERO_CHUNK = 64 * 1024


@dataclass(slots=True)
class RecoveryReport:
    abnormal: bool
    files_scanned: int = 0
    records_valid: int = 0
    process_offset: int = 0
    bytes_truncated: int = 0
    damage: str | None = None
    consume_queue_entries_trimmed: int = 0
    index_files_dropped: int = 0
    reput_from_offset: int = 0
    entries_redispatched: int = 0
    # Consume queues that disagreed with the commitlog: `topic-queueId` -> entries cut there
    # (dispatch rebuilt them from the commitlog).
    queues_repaired: dict[str, int] = field(default_factory=dict)
    took_ms: int = 0


@dataclass(frozen=True, slots=True)
class FileScan:
    valid_bytes: int
    records: int
    ended_by_blank: bool
    damage: str | None


def scan_file(mapped: MappedFile, check_crc: bool) -> FileScan:
    """Walk one file's records; stop at BLANK, at zeros (end of data) or at damage. Reads
    through the file's mapping: a copy would cost a file's size in memory (1 GiB at the
    default size) for every file recovery scans."""
    data = mapped.mapping
    pos = 0
    records = 0
    while pos + 8 <= len(data):
        try:
            size = check_record(data, pos, check_crc)
        except RecordError as exc:
            head = data[pos : pos + RECORD_HEAD.size]  # (shorter at the file's end)
            if head.count(0) == len(head):
                return FileScan(pos, records, False, None)
            return FileScan(
                pos, records, False, f"{exc} (commitlog offset {mapped.file_from_offset + pos})"
            )
        if size == 0:
            return FileScan(pos, records, True, None)
        pos += size
        records += 1
    return FileScan(pos, records, False, None)


def first_record_store_timestamp(mapped: MappedFile) -> int:
    """STORETIMESTAMP of the file's first record, 0 when it does not start with a record."""
    (size,) = struct.unpack(">i", mapped.read(0, 4))
    if not RECORD_HEAD.size < size <= mapped.file_size:
        return 0
    first = mapped.read(0, size)
    try:
        check_record(first, 0, check_crc=False)
    except RecordError:
        return 0
    return record_store_timestamp(first)


def choose_start_file(queue: MappedFileQueue, abnormal: bool, checkpoint: StoreCheckpoint) -> int:
    files = queue.files
    if not abnormal:
        return max(len(files) - 3, 0)
    safe = checkpoint.min_timestamp()
    for index in range(len(files) - 1, -1, -1):
        stamp = first_record_store_timestamp(files[index])
        if stamp != 0 and stamp <= safe:
            return index
    return 0


def recover_commitlog(
    queue: MappedFileQueue, abnormal: bool, checkpoint: StoreCheckpoint, check_crc: bool
) -> RecoveryReport:
    """Validate the commitlog tail, cut it at the first bad record, set the write position."""
    report = RecoveryReport(abnormal=abnormal)
    files = queue.files
    if not files:
        return report
    start_index = choose_start_file(queue, abnormal, checkpoint)
    report.reput_from_offset = files[start_index].file_from_offset
    process_offset = files[start_index].file_from_offset
    for mapped in files[start_index:]:
        scan = scan_file(mapped, check_crc)
        report.files_scanned += 1
        report.records_valid += scan.records
        process_offset = mapped.file_from_offset + scan.valid_bytes
        if not scan.ended_by_blank:
            report.damage = scan.damage
            break
        process_offset = mapped.end_offset
    report.process_offset = process_offset
    report.bytes_truncated = _zero_tail(queue, process_offset)
    queue.truncate_dirty_files(process_offset)
    queue.flushed_where = process_offset
    for mapped in queue.files:
        if mapped.end_offset <= process_offset:
            mapped.set_positions(mapped.file_size)
    if report.damage:
        log.warning("commitlog damaged; truncated", reason=report.damage, at=process_offset)
    return report


def _zero_tail(queue: MappedFileQueue, process_offset: int) -> int:
    """Zero the stale bytes after `process_offset` in its file; return how many bytes of data
    are cut there and in the files after it (which truncation deletes)."""
    cut = 0
    for mapped in queue.files:
        if mapped.end_offset <= process_offset:
            continue
        start = max(process_offset - mapped.file_from_offset, 0)
        pos = data_end = start
        while pos < mapped.file_size:
            chunk = mapped.read(pos, min(ZERO_CHUNK, mapped.file_size - pos))
            if chunk.count(0) == len(chunk):
                break
            data_end = pos + len(chunk.rstrip(b"\0"))
            pos += len(chunk)
        cut += data_end - start
        if mapped.file_from_offset < process_offset and data_end > start:
            mapped.write_at(start, bytes(data_end - start))
            os.fdatasync(mapped.fd)
    return cut
