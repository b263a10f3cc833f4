"""The commitlog: every message of every topic, appended in order (RocketMQ `CommitLog`).

A put takes *groups* of messages: each group lands in one file with consecutive queue offsets
(a batch); many groups (say, every send request that arrived together) share one
lock acquisition and one `pwrite` per file touched. Under the put lock records are encoded
into a staging `bytearray` and then written; the write position only moves after the bytes
are in the page cache, so readers and dispatch never see a half-written record.

When a group does not fit the current file, the BLANK filler closes the file and
the group goes to offset 0 of the next one, which the allocate service has usually prepared.
A failed write (EIO, ENOSPC) rolls the in-memory state back, answers the affected puts with
an error, and sticks: the commitlog refuses writes until restart, and reads keep working.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from rmqpy.config.compiled import twin
from rmqpy.config.store_config import MessageStoreConfig
from rmqpy.store.allocate import AllocateMappedFileService
from rmqpy.store.fileio import NoSpaceError, reserve_step
from rmqpy.store.index_file import index_file_size
from rmqpy.store.layout import (
    BLANK,
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    I32,
    MARK_NO_WAIT,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    PutMessageStatus,
)
from rmqpy.store.mapped_file import MappedFile, file_name
from rmqpy.store.mapped_file_queue import MappedFileQueue
from rmqpy.store.message import (
    Host,
    Message,
    RecordEncoder,
    RecordError,
    check_record,
    encode_records,
    oversized_body,
    place_group,
    validate_topic,
)
from rmqpy.store.message_id import offset_msg_ids
from rmqpy.store.staged import StagedSends, place_staged
from rmqpy.store.system_memory import usable_memory

log = structlog.get_logger(__name__)


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
        """offsetMsgId of each record, made on demand: most callers never ask."""
        host = self.store_host
        return offset_msg_ids(host, self.record_offsets) if host else []

    @property
    def msg_id(self) -> str:
        """offsetMsgId; for a batch the ids joined by commas, as the send response carries."""
        return ",".join(self.msg_ids)


def _failed(status: PutMessageStatus, remark: str) -> PutMessageResult:
    return PutMessageResult(status, remark=remark)


@dataclass(slots=True)
class WrittenSegment:
    """What one write added to the commitlog, handed to dispatch so that it need not parse
    back bytes just encoded: the groups put and their results (where each record landed).
    `end` is where dispatch goes on from: the next file's start when the segment closed its
    file with a BLANK."""

    start: int
    end: int
    groups: list[Sequence[Message]]
    results: list[PutMessageResult]
    store_timestamp: int
    store_v6: bool
    staged: StagedSends | None = None  # a staged put's records, instead of groups
    # Set once the bytes are written (a new file's creation moves max_offset() past an
    # unwritten segment, so the write position alone does not say so).
    done: bool = False


# Segments are handed over only this far ahead of dispatch (they keep their messages alive);
# beyond it dispatch parses the files instead.
WRITTEN_BYTES_MAX = 64 * 1024 * 1024


@dataclass(slots=True)
class HotWindow:
    """A commitlog file's mapping and its written length when looked at (bytes below it
    never change, so records inside are sliced without further checks of the file)."""

    start: int = 0
    length: int = 0
    mapping: mmap.mmap | bytes = b""


@dataclass(slots=True)
class _Segment:
    """The groups placed under the lock for one file, waiting to be encoded and written in
    one pass."""

    mapped: MappedFile
    start: int
    capacity: int  # what groups may take: the file's free space less the BLANK's minimum
    queue_offsets: list[int] = field(default_factory=list)  # each record's QUEUEOFFSET
    blank: bytes = b""  # the filler that closes the file, when the segment does
    results: list[PutMessageResult] = field(default_factory=list)
    groups: list[Sequence[Message]] = field(default_factory=list)  # one per result
    waiting: list[PutMessageResult] = field(default_factory=list)  # SYNC_FLUSH puts with WAIT
    # queue key -> its next queue offset before this segment (None: a new queue), for rollback
    old_offsets: dict[str, int | None] = field(default_factory=dict)
    closes_file: bool = False
    size: int = 0


def dispatch_headroom(config: MessageStoreConfig) -> int:
    """Disk a sparse commitlog leaves free: what dispatch, the index and the config files may
    still need for records already acknowledged (new consume-queue files, the index's next
    reservations, a group's first offsets). Without it a commitlog that filled the disk in
    one burst, faster than the disk ratio check runs, left nothing for them."""
    index = index_file_size(config.max_hash_slot_num, config.max_index_num)
    return 8 * config.mapped_file_size_consume_queue + 2 * reserve_step(index) + 1024 * 1024


class CommitLog:
    def __init__(
        self,
        config: MessageStoreConfig,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.store_host = Host.parse(config.store_host)
        self.encoder = RecordEncoder(self.store_host)
        self.file_size = config.mapped_file_size_commitlog
        sparse, headroom = not config.warm_mapped_file_enable, dispatch_headroom(config)
        self.allocator = AllocateMappedFileService(
            self.file_size,
            enabled=config.preallocate_next_file,
            warm=config.warm_commitlog_files,
            sparse=sparse,
            headroom=headroom,
            min_warm_rate=config.warm_commitlog_min_mb_per_s * 1024 * 1024,
            writer_position=self.max_offset,
        )
        self.queue = MappedFileQueue(
            config.commitlog_dir,
            self.file_size,
            self.allocator.take,
            sparse=sparse,
            headroom=headroom,
        )
        self.topic_queue_table: dict[str, int] = {}
        self.put_lock = threading.Lock()
        self.write_error: OSError | None = None
        # Why the last put that needed a new file could not have one (a full disk, no file
        # descriptors left); None once a file is created again. Health reports it.
        self.file_failure: str | None = None
        self.writable_check: Callable[[], str | None] = lambda: None
        self.on_append: Callable[[], None] = lambda: None
        self.flush_waiter: Callable[[int], bool] | None = None
        # SYNC_FLUSH: call back once bytes below an offset are durable (GroupCommitService).
        self.flush_later: Callable[[int, Callable[[bool], None]], None] | None = None
        # Segments written and not yet taken by dispatch (only kept while one is running,
        # and only within WRITTEN_BYTES_MAX of `dispatched_offset`, which dispatch moves).
        self.written: deque[WrittenSegment] = deque()
        self.keep_written = False
        self.dispatched_offset = 0
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._valid_topics: set[str] = set()
        # `place_singles`, or its compiled twin where it is built.
        compiled = twin("rmqpy.store._commitlog")
        self._place_singles: PlaceSingles = (
            CommitLog.place_singles if compiled is None else compiled.place_singles
        )
        self._validate_groups: ValidateGroups = (
            CommitLog.validate_groups if compiled is None else compiled.validate_groups
        )
        ratio = config.access_message_in_memory_max_ratio
        self.hot_bytes = usable_memory() * ratio // 100

    # --- put ------------------------------------------------------------------------------------
    def put_message(self, msg: Message) -> PutMessageResult:
        return self.put_groups([[msg]])[0]

    def put_groups(self, groups: Sequence[Sequence[Message]]) -> list[PutMessageResult]:
        """Append each group contiguously; one result per group, in order. Under
        SYNC_FLUSH, returns once the puts asking to wait are durable."""
        results, waiting = self._put_groups(groups)
        waiter = self.flush_waiter
        if waiting and waiter is not None and not waiter(_flushed_end(waiting)):
            for r in waiting:
                r.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        return results

    def put_groups_then(
        self,
        groups: Sequence[Sequence[Message]],
        then: Callable[[list[PutMessageResult]], None],
    ) -> tuple[list[PutMessageResult], bool]:
        """`put_groups` without waiting: (the results, whether some wait for a flush). When
        they do, `then(results)` follows on the group-commit thread once they are durable
        (FLUSH_DISK_TIMEOUT where the flush failed); the caller times out on its own."""
        results, waiting = self._put_groups(groups)
        if not waiting or self.flush_later is None:
            return results, False

        def flushed(ok: bool) -> None:
            if not ok:
                for r in waiting:
                    r.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
            then(results)

        self.flush_later(_flushed_end(waiting), flushed)
        return results, True

    def _put_groups(
        self, groups: Sequence[Sequence[Message]]
    ) -> tuple[list[PutMessageResult], list[PutMessageResult]]:
        """(one result per group, those stored that wait for a flush under SYNC_FLUSH)."""
        results = self._validate_groups(self, groups)
        refusal = self._refusal()
        if refusal is not None:
            refused = [
                r or _failed(PutMessageStatus.SERVICE_NOT_AVAILABLE, refusal) for r in results
            ]
            return refused, []
        with self.put_lock:
            no_room = self._room_for(lambda: sum(m.lengths[1] for g in groups for m in g))
            if no_room is not None:
                refused = [
                    r or _failed(PutMessageStatus.SERVICE_NOT_AVAILABLE, no_room) for r in results
                ]
                return refused, []
            segments = self._append_locked(groups, results)
        if segments:
            self.on_append()
        waiting = [r for seg in segments for r in seg.waiting if r.ok]
        return results, waiting  # type: ignore[return-value]  # every group has its result

    def put_staged(
        self, staged: StagedSends, then: Callable[[StagedSends], None] | None = None
    ) -> bool:
        """Store staged sends at the end of the current file, their bytes written as they
        are once `place_staged` has placed them. False when it declines, having changed
        nothing: the store refuses writes, a topic is not valid, or the records do not all
        fit the current file (the message path then stores them, or says why not).

        True: `staged.status` says how it went. Under SYNC_FLUSH stored records wait for
        the flush, unless they carry WAIT false (all of them do, or none): with `then`,
        `staged.waits` is set and `then(staged)` follows on the group-commit thread once
        they are durable (FLUSH_DISK_TIMEOUT where it failed); without, this returns once
        they are."""
        if self.write_error is not None or self.writable_check() is not None:
            return False  # (`_refusal`, inline: every read of sends asks)
        valid = self._valid_topics
        for template in staged.templates:
            if template.topic not in valid:
                if validate_topic(template.topic) is not None:
                    return False
                valid.add(template.topic)
        size = len(staged.data)
        with self.put_lock:
            files = self.queue.files  # (`last` and `free_space`, inline: every read of sends)
            mapped = files[-1] if files else None
            if (
                mapped is None
                or size > mapped.file_size - mapped.wrote_position - END_FILE_MIN_BLANK_LENGTH
            ):
                return False
            no_room = self._room_for(lambda: size)
            if no_room is not None:
                staged.status = PutMessageStatus.SERVICE_NOT_AVAILABLE
                staged.remark = no_room
                return True
            start = mapped.file_from_offset + mapped.wrote_position
            store_ts = self._clock_ms()
            old = place_staged(self.topic_queue_table, staged, start, store_ts)
            handed: WrittenSegment | None = None
            if self.keep_written and start - self.dispatched_offset < WRITTEN_BYTES_MAX:
                v6 = self.store_host.is_v6
                handed = WrittenSegment(start, start + size, [], [], store_ts, v6, staged)
                self.written.append(handed)
            try:
                mapped.append(staged.data)
                mapped.store_timestamp = store_ts
            except OSError as exc:
                self._write_failed(exc, handed, [old])
                staged.status = PutMessageStatus.SERVICE_NOT_AVAILABLE
                staged.remark = f"commitlog write failed: {exc}"
                return True
            if handed is not None:
                handed.done = True
        self.on_append()
        end = start + size
        if staged.marks and staged.marks[0] & MARK_NO_WAIT:  # (all of them, or none)
            return True
        if then is not None and self.flush_later is not None:
            staged.waits = True

            def flushed(ok: bool) -> None:
                if not ok:
                    staged.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
                then(staged)

            self.flush_later(end, flushed)
        elif self.flush_waiter is not None and not self.flush_waiter(end):
            staged.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        return True

    def _room_for(self, size: Callable[[], int]) -> str | None:
        """Reserve the disk blocks the current file needs for `size()` more bytes (sparse
        files, `MappedFile.reserve_for`), before anything of a put is placed: None when
        there is room, else why the put is refused. Nothing sticks: the next put tries again,
        so puts go through once space is freed. (What spills into the next file is reserved
        when that file is created, whose failure is refused the same way.) A file whose
        blocks are all reserved (reserved whole, or written to its end) costs no `size()`."""
        mapped = self.queue.last()
        if mapped is None or mapped.blocks.reserved >= mapped.file_size:
            return None
        need = size()
        if mapped.wrote_position + need <= mapped.blocks.reserved:
            return None  # reserved already (`BlockReserve.cover`'s first test, without a call)
        try:
            mapped.reserve_for(need)
        except NoSpaceError as exc:
            log.warning("no disk space for a put", error=str(exc))
            return f"disk full: {exc}"
        return None

    def _refusal(self) -> str | None:
        if self.write_error is not None:
            return f"the commitlog is read-only after a write error: {self.write_error}"
        return self.writable_check()

    def validate_groups(self, groups: Sequence[Sequence[Message]]) -> list[PutMessageResult | None]:
        """`_validate` of each group: None for a group that may be stored, else its
        refusal."""
        return [self._validate(g) for g in groups]

    def _validate(self, group: Sequence[Message]) -> PutMessageResult | None:
        """None when every message of the group may be stored: one test per message (the
        put path's cost), the reason found by `_refused` only when that test fails."""
        if not group:
            return _failed(PutMessageStatus.MESSAGE_ILLEGAL, "an empty batch")
        queue_key = group[0].queue_key
        max_size = self.config.max_message_size
        valid_topics = self._valid_topics
        for msg in group:
            if (
                msg.topic not in valid_topics
                or msg.queue_key != queue_key
                or msg.queue_id < 0
                or len(msg.body) > max_size
                or len(msg.props_bytes) > MAX_PROPERTIES_LENGTH
            ):
                return self._refused(group)
        return None

    def _refused(self, group: Sequence[Message]) -> PutMessageResult | None:
        """Why the group may not be stored, with the status that names the first problem;
        None when nothing is wrong after all (a topic seen for the first time is checked
        here, and remembered once valid)."""
        queue_key = group[0].queue_key
        max_size = self.config.max_message_size
        for msg in group:
            if msg.topic not in self._valid_topics:
                why = validate_topic(msg.topic)
                if why is not None:
                    return _failed(PutMessageStatus.MESSAGE_ILLEGAL, why)
                self._valid_topics.add(msg.topic)
            if msg.queue_key != queue_key:
                return _failed(PutMessageStatus.MESSAGE_ILLEGAL, "a batch spans several queues")
            if msg.queue_id < 0:
                return _failed(PutMessageStatus.MESSAGE_ILLEGAL, f"queueId {msg.queue_id} < 0")
            if len(msg.body) > max_size:
                return _failed(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    oversized_body(len(msg.body), max_size),
                )
            if len(msg.props_bytes) > MAX_PROPERTIES_LENGTH:
                return _failed(
                    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                    f"properties size {len(msg.props_bytes)} exceeds {MAX_PROPERTIES_LENGTH}",
                )
        return None

    def _append_locked(
        self, groups: Sequence[Sequence[Message]], results: list[PutMessageResult | None]
    ) -> list[_Segment]:
        """Place every valid group in per-file segments (offsets and results), then encode
        and write them; returns them."""
        store_ts = self._clock_ms()
        host = self.store_host
        store_v6 = host.is_v6
        table = self.topic_queue_table
        limit = self.file_size - END_FILE_MIN_BLANK_LENGTH
        sync = self.flush_waiter is not None
        segments: list[_Segment] = []
        seg: _Segment | None = None
        mapped = self.queue.last()
        if mapped is not None and not mapped.is_full():
            seg = self._segment(mapped, mapped.file_from_offset + mapped.wrote_position)
        failure: tuple[PutMessageStatus, str] | None = None
        singles = self._place_singles
        index, count = 0, len(groups)
        while index < count:
            if seg is not None and failure is None:
                # Sends of one message that fit the segment, placed in one call.
                index = singles(self, groups, index, results, seg, store_ts, sync)
                if index >= count:
                    break
            group = groups[index]
            index += 1
            if results[index - 1] is not None:
                continue
            if failure is not None:
                results[index - 1] = _failed(*failure)
                continue
            first = group[0]
            single = len(group) == 1
            if single:
                total = first.lengths[store_v6]
            else:
                sizes = [m.lengths[store_v6] for m in group]
                total = sum(sizes)
            if total > limit:
                results[index - 1] = _failed(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    f"{total} bytes do not fit a commitlog file of {self.file_size}",
                )
                continue
            if seg is None or seg.size + total > seg.capacity:
                try:
                    seg = self._next_segment(seg, segments)
                    self.file_failure = None
                except OSError as exc:
                    log.error("cannot create a commitlog file", error=str(exc))
                    self.file_failure = f"cannot create a commitlog file: {exc}"
                    failure = (PutMessageStatus.CREATE_MAPPED_FILE_FAILED, self.file_failure)
                    results[index - 1] = _failed(*failure)
                    seg = None
                    continue
            key = first.queue_key
            queue_offset = table.get(key)
            if key not in seg.old_offsets:
                seg.old_offsets[key] = queue_offset
            queue_offset = queue_offset or 0
            first_phy = seg.start + seg.size
            if single:
                offsets = [first_phy]
                seg.queue_offsets.append(queue_offset if first.queued else 0)
                table[key] = queue_offset + first.queued
            else:
                offsets, queue_offsets, table[key] = place_group(
                    group, sizes, queue_offset, first_phy
                )
                seg.queue_offsets += queue_offsets
            self._placed(
                seg, group, results, index - 1, offsets, total, queue_offset, store_ts, sync
            )
        if seg is not None and seg.size:
            segments.append(seg)
        self._write_segments_locked(segments, store_ts)
        return segments

    def _placed(
        self,
        seg: _Segment,
        group: Sequence[Message],
        results: list[PutMessageResult | None],
        index: int,
        offsets: list[int],
        total: int,
        queue_offset: int,
        store_ts: int,
        sync: bool,
    ) -> None:
        """A group placed in `seg` at `offsets` (its queue offsets already taken): its
        result, and its wait for the flush under SYNC_FLUSH."""
        seg.size += total
        result = PutMessageResult(
            PutMessageStatus.PUT_OK,
            offsets[0],
            total,
            queue_offset,
            len(group),
            store_ts,
            offsets,
            self.store_host,
        )
        results[index] = result
        seg.results.append(result)
        seg.groups.append(group)
        if sync and not group[0].marks & MARK_NO_WAIT:
            seg.waiting.append(result)

    def place_singles(
        self,
        groups: Sequence[Sequence[Message]],
        index: int,
        results: list[PutMessageResult | None],
        seg: _Segment,
        store_ts: int,
        sync: bool,
    ) -> int:
        """Place the sends of one message from `index` on that fit `seg` (skipping those
        already refused); returns where the general loop takes over: a batch, a message too
        large for a file, one that needs the next file, or the end."""
        store_v6 = self.store_host.is_v6
        limit = self.file_size - END_FILE_MIN_BLANK_LENGTH
        table = self.topic_queue_table
        count = len(groups)
        while index < count:
            if results[index] is not None:
                index += 1
                continue
            group = groups[index]
            if len(group) != 1:
                return index
            first = group[0]
            total = first.lengths[store_v6]
            if total > limit or seg.size + total > seg.capacity:
                return index
            key = first.queue_key
            queue_offset = table.get(key)
            if key not in seg.old_offsets:
                seg.old_offsets[key] = queue_offset
            queue_offset = queue_offset or 0
            seg.queue_offsets.append(queue_offset if first.queued else 0)
            table[key] = queue_offset + first.queued
            offsets = [seg.start + seg.size]
            self._placed(seg, group, results, index, offsets, total, queue_offset, store_ts, sync)
            index += 1
        return index

    def _next_segment(self, seg: _Segment | None, segments: list[_Segment]) -> _Segment:
        """Close the current file with a BLANK (its segment joins `segments`) and start the
        next file; raises OSError when that file cannot be created."""
        start = 0
        if seg is not None:
            left = seg.mapped.free_space - seg.size
            seg.blank = BLANK.pack(left, BLANK_MAGIC) if left >= BLANK.size else bytes(left)
            seg.closes_file = True
            segments.append(seg)
            start = seg.mapped.end_offset
        else:
            last = self.queue.last()
            if last is not None:
                start = last.end_offset
        return self._segment(self.queue.create_file(start), start)

    def _segment(self, mapped: MappedFile, start: int) -> _Segment:
        return _Segment(mapped, start, mapped.free_space - END_FILE_MIN_BLANK_LENGTH)

    def _write_segments_locked(self, segments: list[_Segment], store_ts: int) -> None:
        """Encode each segment, then hand it to dispatch and write it (dispatch takes it
        once it is `done`, and so never needs the put lock). Encoding comes first: a record
        that failed to encode must not leave dispatch waiting on a segment never written."""
        store_v6 = self.store_host.is_v6
        for n, seg in enumerate(segments):
            mapped = seg.mapped
            parts: list[bytes] = []
            records = [msg for group in seg.groups for msg in group]
            phys = [phy for result in seg.results for phy in result.record_offsets]
            encode_records(self.encoder, parts, records, seg.queue_offsets, phys, store_ts)
            parts.append(seg.blank)
            handed: WrittenSegment | None = None
            if self.keep_written and seg.start - self.dispatched_offset < WRITTEN_BYTES_MAX:
                end = mapped.end_offset if seg.closes_file else seg.start + seg.size
                handed = WrittenSegment(seg.start, end, seg.groups, seg.results, store_ts, store_v6)
                self.written.append(handed)
            try:
                mapped.append(b"".join(parts))
                mapped.store_timestamp = store_ts
                if seg.closes_file:  # the BLANK's length covers the rest of the file
                    mapped.wrote_position = mapped.file_size
                if handed is not None:
                    handed.done = True
            except OSError as exc:
                failed = segments[n:]
                self._write_failed(exc, handed, [f.old_offsets for f in reversed(failed)])
                for result in (r for f in failed for r in f.results):
                    result.status = PutMessageStatus.SERVICE_NOT_AVAILABLE
                    result.remark = f"commitlog write failed: {exc}"
                return

    def _write_failed(
        self,
        exc: OSError,
        handed: WrittenSegment | None,
        old_offsets: list[dict[str, int | None]],
    ) -> None:
        """A write failed: what it handed to dispatch is taken back, the queue offsets it
        placed are rolled back (`old_offsets`, latest first), and the commitlog turns
        read-only."""
        if handed is not None and self.written and self.written[-1] is handed:
            self.written.pop()
        self.write_error = exc
        log.error("commitlog write failed; the store is now read-only", error=str(exc))
        table = self.topic_queue_table
        for offsets in old_offsets:
            for key, old in offsets.items():
                if old is None:
                    table.pop(key, None)
                else:
                    table[key] = old

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
        if data is None or not _head_matches(data, phy_offset, size):
            return None
        return _verified(data, phy_offset) if from_disk else data

    def hot_window(self, phy_offset: int) -> HotWindow:
        """The mapping of the file holding `phy_offset` and how much of it is written: a
        pull slices the run of hot records that follows straight from it."""
        mapped = self.queue.find_mapped_file_by_offset(phy_offset)
        if mapped is None:
            return HotWindow()
        return HotWindow(mapped.file_from_offset, mapped.wrote_position, mapped.mapping)

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

    def prepare_files(self) -> None:
        """At start, once recovered: prepare the first file of an empty commitlog in the
        background, or warm the rest of the file writes go on in."""
        last = self.queue.last()
        if last is None:
            os.makedirs(self.queue.store_path, exist_ok=True)
            self.allocator.prepare(os.path.join(self.queue.store_path, file_name(0)))
        else:
            self.allocator.warm(last)

    def retry_file_creation(self, timeout_s: float = 5.0) -> None:
        """After a commitlog file could not be created (`file_failure`, which health
        reports): create the next one now, writing nothing, so the failure clears as soon as
        its cause has (space freed, descriptors returned) rather than at the next put."""
        if self.file_failure is None:
            return
        with self.put_lock:
            last = self.queue.last()
            start = last.end_offset if last is not None else 0
            os.makedirs(self.queue.store_path, exist_ok=True)
            if self.allocator.ready(
                os.path.join(self.queue.store_path, file_name(start)), timeout_s
            ):
                log.info("a commitlog file could be created again", offset=start)
                self.file_failure = None

    def next_file_offset(self, phy_offset: int) -> int:
        """Where the file after the one holding `phy_offset` starts (RocketMQ `rollNextFile`)."""
        return phy_offset + self.file_size - phy_offset % self.file_size

    def shutdown(self) -> None:
        self.allocator.shutdown()
        self.queue.close()


PlaceSingles = Callable[
    [
        CommitLog,
        Sequence[Sequence[Message]],
        int,
        list[PutMessageResult | None],
        _Segment,
        int,
        bool,
    ],
    int,
]

ValidateGroups = Callable[[CommitLog, Sequence[Sequence[Message]]], list[PutMessageResult | None]]


def _flushed_end(waiting: list[PutMessageResult]) -> int:
    return max(r.wrote_offset + r.wrote_bytes for r in waiting)


def _head_matches(data: bytes, phy_offset: int, size: int) -> bool:
    """The record's TOTALSIZE is the entry's size and its magic is a message's."""
    if len(data) < 8:
        return False
    total, magic = BLANK.unpack_from(data, 0)
    if total != size or magic not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2):
        log.error("consume queue entry disagrees with the commitlog", phy=phy_offset)
        return False
    return True


def _verified(data: bytes, phy_offset: int) -> bytes | None:
    """`data` if it is a whole record with a matching CRC; a damaged one is logged, not served."""
    try:
        check_record(data, 0, check_crc=True)
    except RecordError as exc:
        log.error("damaged record not served", phy=phy_offset, error=str(exc))
        return None
    return data
