"""The commitlog: every message of every topic, appended in order (RocketMQ `CommitLog`).

A put takes *groups* of messages: each group lands in one file with consecutive queue offsets
(a batch, spec §2.3); many groups (say, every send request that arrived together) share one
lock acquisition and one `pwrite` per file touched. Under the put lock records are encoded
into a staging `bytearray` and then written; the write position only moves after the bytes
are in the page cache, so readers and dispatch never see a half-written record.

When a group does not fit the current file, the BLANK filler (spec §3.1) closes the file and
the group goes to offset 0 of the next one, which the allocate service has usually prepared.
A failed write (EIO, ENOSPC) rolls the in-memory state back, answers the affected puts with
an error, and sticks: the commitlog refuses writes until restart, and reads keep working.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from config.store_config import MessageStoreConfig
from store.allocate import AllocateMappedFileService
from store.layout import (
    BLANK,
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    I32,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    PutMessageStatus,
    SysFlag,
    transaction_type,
)
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.message import Host, Message, RecordError, check_record, encode_record, validate_topic
from store.message_id import create_offset_msg_id

log = structlog.get_logger(__name__)

_QUEUED_TYPES = (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE)


@dataclass(slots=True)
class PutMessageResult:
    """RocketMQ `PutMessageResult` + `AppendMessageResult` in one."""

    status: PutMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    queue_offset: int = 0
    msg_num: int = 0
    store_timestamp: int = 0
    record_offsets: list[int] = field(default_factory=list)
    store_host: Host | None = None
    remark: str = ""

    @property
    def ok(self) -> bool:
        return self.status == PutMessageStatus.PUT_OK

    @property
    def msg_ids(self) -> list[str]:
        """offsetMsgId of each record (spec §4), made on demand: most callers never ask."""
        host = self.store_host
        return [create_offset_msg_id(host, phy) for phy in self.record_offsets] if host else []

    @property
    def msg_id(self) -> str:
        """offsetMsgId; for a batch the ids joined by commas, as the send response carries."""
        return ",".join(self.msg_ids)


def _failed(status: PutMessageStatus, remark: str) -> PutMessageResult:
    return PutMessageResult(status, remark=remark)


@dataclass(slots=True)
class _Pending:
    """A group encoded under the lock, waiting for its segment's write."""

    result: PutMessageResult
    queue_key: str
    old_queue_offset: int | None
    wait_flush: bool


# (file, bytes to write at its write position, the puts they carry, ends with BLANK)
_Segment = tuple[MappedFile, bytearray, list[_Pending], bool]


class CommitLog:
    def __init__(
        self,
        config: MessageStoreConfig,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.store_host = Host.parse(config.store_host)
        self.file_size = config.mapped_file_size_commitlog
        self.allocator = AllocateMappedFileService(
            self.file_size, enabled=config.preallocate_next_file
        )
        self.queue = MappedFileQueue(config.commitlog_dir, self.file_size, self.allocator.take)
        self.topic_queue_table: dict[str, int] = {}
        self.put_lock = threading.Lock()
        self.write_error: OSError | None = None
        self.writable_check: Callable[[], str | None] = lambda: None
        self.on_append: Callable[[], None] = lambda: None
        self.flush_waiter: Callable[[int], bool] | None = None
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._valid_topics: set[str] = set()
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.hot_bytes = memory * config.access_message_in_memory_max_ratio // 100

    # --- put ------------------------------------------------------------------------------------
    def put_message(self, msg: Message) -> PutMessageResult:
        return self.put_groups([[msg]])[0]

    def put_groups(self, groups: Sequence[Sequence[Message]]) -> list[PutMessageResult]:
        """Append each group contiguously; one result per group, in order."""
        results: list[PutMessageResult | None] = [self._validate(g) for g in groups]
        refusal = self._refusal()
        if refusal is not None:
            return [r or _failed(PutMessageStatus.SERVICE_NOT_AVAILABLE, refusal) for r in results]
        wait_until = -1
        with self.put_lock:
            pending = self._append_locked(groups, results)
        for p in pending:
            if p.wait_flush and p.result.ok:
                wait_until = max(wait_until, p.result.wrote_offset + p.result.wrote_bytes)
        if pending:
            self.on_append()
        if wait_until >= 0 and self.flush_waiter is not None and not self.flush_waiter(wait_until):
            for p in pending:
                if p.wait_flush and p.result.ok:
                    p.result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        return [r for r in results if r is not None]

    def _refusal(self) -> str | None:
        if self.write_error is not None:
            return f"the commitlog is read-only after a write error: {self.write_error}"
        return self.writable_check()

    def _validate(self, group: Sequence[Message]) -> PutMessageResult | None:
        if not group:
            return _failed(PutMessageStatus.MESSAGE_ILLEGAL, "an empty batch")
        first = group[0]
        for msg in group:
            if msg.topic not in self._valid_topics:
                why = validate_topic(msg.topic)
                if why is not None:
                    return _failed(PutMessageStatus.MESSAGE_ILLEGAL, why)
                self._valid_topics.add(msg.topic)
            if msg.topic != first.topic or msg.queue_id != first.queue_id:
                return _failed(PutMessageStatus.MESSAGE_ILLEGAL, "a batch spans several queues")
            if msg.queue_id < 0:
                return _failed(PutMessageStatus.MESSAGE_ILLEGAL, f"queueId {msg.queue_id} < 0")
            if len(msg.body) > self.config.max_message_size:
                return _failed(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    f"message body size {len(msg.body)} exceeds the limit "
                    f"{self.config.max_message_size}",
                )
            if len(msg.props_bytes) > MAX_PROPERTIES_LENGTH:
                return _failed(
                    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                    f"properties size {len(msg.props_bytes)} exceeds {MAX_PROPERTIES_LENGTH}",
                )
        return None

    def _append_locked(
        self, groups: Sequence[Sequence[Message]], results: list[PutMessageResult | None]
    ) -> list[_Pending]:
        store_ts = self._clock_ms()
        host = self.store_host
        store_v6 = host.is_v6
        sync = self.flush_waiter is not None
        table = self.topic_queue_table
        limit = self.file_size - END_FILE_MIN_BLANK_LENGTH
        segments: list[_Segment] = []
        mapped = self.queue.last()
        buf = bytearray()
        seg_pending: list[_Pending] = []
        all_pending: list[_Pending] = []
        failure: tuple[PutMessageStatus, str] | None = None
        for index, group in enumerate(groups):
            if results[index] is not None:
                continue
            if failure is not None:
                results[index] = _failed(*failure)
                continue
            sizes = [m.encoded_length(store_v6) for m in group]
            total = sum(sizes)
            if total > limit:
                results[index] = _failed(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    f"{total} bytes do not fit a commitlog file of {self.file_size}",
                )
                continue
            if mapped is None or mapped.free_space - len(buf) < total + END_FILE_MIN_BLANK_LENGTH:
                if mapped is not None:
                    left = mapped.free_space - len(buf)
                    buf += BLANK.pack(left, BLANK_MAGIC) if left >= BLANK.size else bytes(left)
                    segments.append((mapped, buf, seg_pending, True))
                    buf, seg_pending = bytearray(), []
                    start = mapped.end_offset
                else:
                    start = 0
                try:
                    mapped = self.queue.create_file(start)
                except OSError as exc:
                    log.error("cannot create a commitlog file", error=str(exc))
                    failure = (
                        PutMessageStatus.CREATE_MAPPED_FILE_FAILED,
                        f"cannot create a commitlog file: {exc}",
                    )
                    results[index] = _failed(*failure)
                    mapped = None
                    continue
            first = group[0]
            key = f"{first.topic}-{first.queue_id}"
            old = table.get(key)
            queue_offset = old or 0
            phy = mapped.file_from_offset + mapped.wrote_position + len(buf)
            first_phy, first_queue_offset = phy, queue_offset
            phys = []
            queued = 0
            for msg, size in zip(group, sizes, strict=True):
                queued_type = transaction_type(msg.sys_flag) in _QUEUED_TYPES
                encode_record(
                    buf, msg, size, queue_offset if queued_type else 0, phy, store_ts, host
                )
                phys.append(phy)
                phy += size
                if queued_type:
                    queue_offset += 1
                    queued += 1
            if queued:
                table[key] = queue_offset
            result = PutMessageResult(
                PutMessageStatus.PUT_OK,
                first_phy,
                total,
                first_queue_offset,
                len(group),
                store_ts,
                phys,
                host,
            )
            results[index] = result
            wait = sync and first.properties.get("WAIT", "true") != "false"
            p = _Pending(result, key, old, wait)
            seg_pending.append(p)
            all_pending.append(p)
        if buf and mapped is not None:
            segments.append((mapped, buf, seg_pending, False))
        self._write_segments_locked(segments, store_ts)
        return all_pending

    def _write_segments_locked(self, segments: list[_Segment], store_ts: int) -> None:
        for n, (mapped, data, _pending, closes_file) in enumerate(segments):
            try:
                mapped.append(data)
                mapped.store_timestamp = store_ts
                if closes_file:  # the BLANK's length covers the rest of the file
                    mapped.wrote_position = mapped.file_size
            except OSError as exc:
                self.write_error = exc
                log.error("commitlog write failed; the store is now read-only", error=str(exc))
                failed = [p for _, _, ps, _ in segments[n:] for p in ps]
                for p in reversed(failed):
                    if p.old_queue_offset is None:
                        self.topic_queue_table.pop(p.queue_key, None)
                    else:
                        self.topic_queue_table[p.queue_key] = p.old_queue_offset
                    p.result.status = PutMessageStatus.SERVICE_NOT_AVAILABLE
                    p.result.remark = f"commitlog write failed: {exc}"
                return

    # --- reads ----------------------------------------------------------------------------------
    def min_offset(self) -> int:
        return self.queue.min_offset()

    def max_offset(self) -> int:
        return self.queue.max_offset()

    def is_hot(self, phy_offset: int) -> bool:
        return self.max_offset() - phy_offset <= self.hot_bytes

    def get_data(self, phy_offset: int, size: int, from_disk: bool | None = None) -> bytes | None:
        """`size` bytes at `phy_offset` if they are written and in one file: from the mmap
        when hot, with pread from disk (`from_disk`, decided here when not given)."""
        mapped = self.queue.find_mapped_file_by_offset(phy_offset)
        if mapped is None:
            return None
        pos = phy_offset - mapped.file_from_offset
        if pos + size > mapped.wrote_position:
            return None
        if from_disk is None:
            from_disk = not self.is_hot(phy_offset)
        try:
            return mapped.pread(pos, size) if from_disk else mapped.read(pos, size)
        except (ValueError, OSError):  # the file was closed by expiry while we looked
            return None

    def get_record(self, phy_offset: int, size: int, from_disk: bool) -> bytes | None:
        """A record a consume-queue entry points at, if it is there and sane: its size field
        and magic always, its CRC too when it comes from disk (pull's hot/cold split)."""
        data = self.get_data(phy_offset, size, from_disk)
        if data is None:
            return None
        if len(data) < 8:
            return None
        total, magic = BLANK.unpack_from(data, 0)
        if total != size or magic not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2):
            log.error("consume queue entry disagrees with the commitlog", phy=phy_offset)
            return None
        return _verified(data, phy_offset) if from_disk else data

    def read_record(self, phy_offset: int) -> bytes | None:
        """The whole record at `phy_offset`, CRC checked; None if no valid record is there."""
        head = self.get_data(phy_offset, 8)
        if head is None:
            return None
        size = I32.unpack_from(head, 0)[0]
        magic = I32.unpack_from(head, 4)[0]
        if magic not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2) or size <= 8:
            return None
        data = self.get_data(phy_offset, size)
        return _verified(data, phy_offset) if data is not None else None

    def next_file_offset(self, phy_offset: int) -> int:
        """Where the file after the one holding `phy_offset` starts (RocketMQ `rollNextFile`)."""
        return phy_offset + self.file_size - phy_offset % self.file_size

    def shutdown(self) -> None:
        self.allocator.shutdown()
        self.queue.close()


def _verified(data: bytes, phy_offset: int) -> bytes | None:
    """`data` if it is a whole record with a matching CRC; a damaged one is logged, not served."""
    try:
        check_record(data, 0, check_crc=True)
    except RecordError as exc:
        log.error("damaged record not served", phy=phy_offset, error=str(exc))
        return None
    return data
