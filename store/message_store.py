"""The store facade: start/recover, put, get, query, shutdown (RocketMQ `DefaultMessageStore`).

It wires the parts and owns their lifecycle; the work lives in the part modules. Start-up
order follows RocketMQ's `DefaultMessageStore.load`: lock, load commitlog / consume queues /
checkpoint / index, recover,
dispatch what the consume queues miss (and wait for it), start the flush and expiry services,
create the `abort` file. `shutdown()` does the reverse and removes `abort` only when
everything was flushed and dispatched; `halt()` stops like a crash would (tests use it).
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import partial
from itertools import accumulate, chain, pairwise

import structlog

from rmqpy.config.store_config import FlushDiskType, MessageStoreConfig
from rmqpy.store.checkpoint import StoreCheckpoint
from rmqpy.store.commitlog import CommitLog, HotWindow, PutMessageResult
from rmqpy.store.consume_queue import BoundaryType, ConsumeQueue, max_offset_in
from rmqpy.store.consume_queue import columns as cq_columns
from rmqpy.store.consume_queue_store import ConsumeQueueStore
from rmqpy.store.deleted_topics import DeletedTopics
from rmqpy.store.dispatch import ArrivalListener, ReputService, RoundScheduler
from rmqpy.store.expiry import ExpiryService
from rmqpy.store.fileio import unwritable
from rmqpy.store.flush import (
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitService,
    ServiceThread,
)
from rmqpy.store.hot_read import read_hot
from rmqpy.store.index_file import IndexService
from rmqpy.store.layout import (
    BLANK,
    CQ_PLACEHOLDER,
    CQ_STORE_UNIT_SIZE,
    HOST_V6,
    MARK_DELAY,
    MESSAGE_MAGIC_V1,
    RECORD_HEAD,
    GetMessageStatus,
    PutMessageStatus,
    queue_key,
)
from rmqpy.store.message import Message, decode_record, record_store_timestamp
from rmqpy.store.queue_ends import save_queue_ends, take_queue_ends
from rmqpy.store.recovery import RecoveryReport, recover_commitlog
from rmqpy.store.schedule import ScheduleService, delay_level, scheduled
from rmqpy.store.staged import StagedSends
from rmqpy.store.store_lock import (
    StoreLock,
    create_abort_file,
    last_exit_was_clean,
    remove_abort_file,
)

log = structlog.get_logger(__name__)


class GetMessageResult:
    """RocketMQ `GetMessageResult`: whole records as stored, and where to pull next.

    The records are `messages`, one bytes each. Records that lie back to back in the
    commitlog are copied out as one buffer, `body`, and `messages` is only cut from it when
    asked for: a pull answers with the buffer as it is."""

    __slots__ = ("_body", "_messages", "_sizes", "max_offset", "min_offset", "next_begin_offset",
                 "status")  # fmt: skip

    def __init__(
        self,
        status: GetMessageStatus,
        next_begin_offset: int,
        min_offset: int,
        max_offset: int,
        messages: list[bytes] | None = None,
        *,
        body: bytes = b"",
        sizes: Sequence[int] = (),
    ) -> None:
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self._messages = messages if messages is not None or sizes else []
        self._body = body
        self._sizes = sizes

    @property
    def messages(self) -> list[bytes]:
        if self._messages is None:
            cuts = list(accumulate(self._sizes, initial=0))
            self._messages = [self._body[a:b] for a, b in pairwise(cuts)]
        return self._messages

    @property
    def count(self) -> int:
        return len(self._sizes) if self._messages is None else len(self._messages)

    @property
    def body(self) -> bytes:
        """Every record, back to back (a pull response's body)."""
        return self._body if self._messages is None else b"".join(self._messages)

    def _key(self) -> tuple[object, ...]:
        return (self.status, self.next_begin_offset, self.min_offset, self.max_offset,
                self.messages)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GetMessageResult) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it replaced

    def __repr__(self) -> str:
        return (
            f"GetMessageResult({self.status.name}, next={self.next_begin_offset}, "
            f"min={self.min_offset}, max={self.max_offset}, records={self.count})"
        )


@dataclass(frozen=True, slots=True)
class QueryMessageResult:
    messages: list[bytes]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int


def scan_limits(max_msg_nums: int) -> tuple[int, int]:
    """A get scans at most max(16000 B of entries, maxMsgNums) consume-queue entries
    (RocketMQ's maxFilterMessageCount), reading them a pull's worth (at least 16) at a
    time: (that limit, that chunk)."""
    return max(16000 // CQ_STORE_UNIT_SIZE, max_msg_nums), max(max_msg_nums, 16)


class MessageStore:
    def __init__(self, config: MessageStoreConfig, clock_ms: Callable[[], int] | None = None):
        self.config = config
        self.root = config.store_path_root_dir
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self.lock: StoreLock | None = None
        self.commitlog = CommitLog(config, self._clock_ms)
        self.consume_queues = ConsumeQueueStore(
            config.consume_queue_dir, config.mapped_file_size_consume_queue
        )
        self.checkpoint: StoreCheckpoint | None = None
        self.index: IndexService | None = None
        if config.message_index_enable:
            self.index = IndexService(
                config.index_dir,
                config.max_hash_slot_num,
                config.max_index_num,
                on_file_full=self._index_file_full,
                clock_ms=self._clock_ms,
                sparse=not config.warm_mapped_file_enable,
            )
        self.delay_levels_ms = config.delay_levels_ms
        self.deleted_topics = DeletedTopics(config.config_dir)
        self.reput = ReputService(
            self.commitlog,
            self.consume_queues,
            self.index,
            self.delay_levels_ms,
            self.deleted_topics,
        )
        self.schedule = ScheduleService(
            self.delay_levels_ms,
            self.consume_queues,
            self.commitlog.get_data,
            self.put_message,
            config.config_dir,
            self._clock_ms,
        )
        self.expiry = ExpiryService(
            config,
            self.commitlog,
            self.consume_queues,
            self.index,
            pending_floor=self.schedule.pending_floor,
        )
        self.group_commit: GroupCommitService | None = None
        self.services: list[ServiceThread] = []
        self.recovery_report: RecoveryReport | None = None
        self.running = False
        self.shutting_down = False
        self._queue_table_ready = False

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> RecoveryReport:
        os.makedirs(self.root, exist_ok=True)
        self.lock = StoreLock(self.root)
        self.lock.acquire()
        began = time.monotonic()
        try:
            report = self._load_and_recover()
        except BaseException:
            self.lock.release()
            raise
        report.took_ms = round((time.monotonic() - began) * 1000)
        self._start_services()
        create_abort_file(self.root)
        self.running = True
        self.recovery_report = report
        log.info("store started", root=self.root, **_report_fields(report))
        return report

    def _load_and_recover(self) -> RecoveryReport:
        abnormal = not last_exit_was_clean(self.root)
        self.checkpoint = StoreCheckpoint(os.path.join(self.root, "checkpoint"))
        self.commitlog.queue.load()
        damaged_queues = self.consume_queues.load()
        dropped = 0
        if self.index is not None:
            dropped = self.index.load(not abnormal, self.checkpoint.index_msg_timestamp)
        report = recover_commitlog(
            self.commitlog.queue, abnormal, self.checkpoint, self.config.check_crc_on_recover
        )
        report.index_files_dropped = dropped
        report.queues_repaired.update(self.consume_queues.recover())
        if self.consume_queues.max_physic_offset() > report.process_offset:
            report.consume_queue_entries_trimmed = self.consume_queues.truncate_dirty(
                report.process_offset
            )
        if self.index is not None:
            report.index_files_dropped += self.index.truncate(report.process_offset)
        commitlog_min = self.commitlog.min_offset()
        self.deleted_topics.load()
        self.deleted_topics.settle(commitlog_min, self.commitlog.max_offset())
        for topic, deleted_at in self.deleted_topics.below.items():  # a deletion cut short
            self.consume_queues.delete_topic(topic, older_than=deleted_at)
        self.consume_queues.correct_min_offsets(commitlog_min)
        reput_from = self._repair_queues(report, abnormal, commitlog_min)
        self.commitlog.topic_queue_table = self.consume_queues.queue_offset_table()
        for cq in damaged_queues:  # dropped damaged files: refill from their end
            refill_from = cq.max_physic_offset if cq.max_physic_offset >= 0 else commitlog_min
            reput_from = min(reput_from, max(refill_from, commitlog_min))
        if self.index is not None and report.index_files_dropped:
            # Re-index everything the dropped files covered, not only what the CQs miss.
            indexed_to = self.index.files[-1].end_phy_offset if self.index.files else 0
            reput_from = min(reput_from, max(indexed_to, commitlog_min))
        report.reput_from_offset = reput_from
        # Re-dispatch what the consume queues and index miss, before any put.
        ends = self.consume_queues.queue_offset_table()
        self.reput.reput_from_offset = reput_from
        try:
            self.reput.do_reput()
        except OSError as exc:  # e.g. no space for a consume-queue file: retried once running
            self.reput.stuck_reason = f"dispatch at startup failed: {exc}"
            log.error("dispatch could not catch up at startup", error=str(exc))
        report.entries_redispatched = self.reput.dispatched_entries
        self._report_repairs(report, ends)
        self.schedule.load()
        self._queue_table_ready = False
        self._rebuild_queue_table_if_caught_up()
        return report

    def _repair_queues(self, report: RecoveryReport, abnormal: bool, commitlog_min: int) -> int:
        """Where dispatch must start again so the consume queues match the commitlog, the
        truth: a queue whose entries in the window recovery checked (the last three files, or
        from the checkpoint after a crash) disagree with it is cut there; one shorter than it
        was at the last clean stop (its newest entries zeroed, cut short or gone) is rebuilt
        from its end. Each is named in `report.queues_repaired`."""
        verify_from = report.reput_from_offset
        reput_from = max(self.consume_queues.max_physic_offset(), commitlog_min)
        if abnormal:
            reput_from = min(reput_from, max(verify_from, commitlog_min))
        repaired = report.queues_repaired
        for key, end in take_queue_ends(self.config.config_dir).items():
            topic, _, qid = key.rpartition("-")
            cq = self.consume_queues.find(topic, int(qid)) if qid.isdigit() else None
            short = end - (cq.max_offset_in_queue() if cq is not None else 0)
            if short > 0 and topic not in self.deleted_topics.below:
                repaired[key] = max(repaired.get(key, 0), short)
                refill = cq.max_physic_offset if cq is not None else -1
                reput_from = min(reput_from, max(refill, commitlog_min))
        for cq in self.consume_queues:
            key = queue_key(cq.topic, cq.queue_id)
            cut = cq.repair_against(self.commitlog.queue.files, verify_from)
            if cut is None and key not in repaired:
                continue
            repaired[key] = repaired.get(key, 0) + (cut or 0)
            reput_from = min(reput_from, max(cq.max_physic_offset, commitlog_min))
        return reput_from

    def _report_repairs(self, report: RecoveryReport, ends: dict[str, int]) -> None:
        """Name each consume queue rebuilt from the commitlog: those cut for disagreeing with
        it, and after a clean stop (when nothing should be missing) those dispatch had to
        extend, their newest entries gone (zeroed, or a file cut short)."""
        grown = {
            key: end - ends.get(key, 0)
            for key, end in self.consume_queues.queue_offset_table().items()
            if end > ends.get(key, 0)
        }
        if not report.abnormal:
            for key in grown:
                report.queues_repaired.setdefault(key, 0)
        for key in sorted(report.queues_repaired):
            log.warning("consume queue disagreed with the commitlog: rebuilt from it", queue=key,
                        entries_cut=report.queues_repaired[key],
                        entries_rebuilt=grown.get(key, 0))  # fmt: skip
            report.queues_repaired[key] = max(report.queues_repaired[key], grown.get(key, 0))

    def _rebuild_queue_table_if_caught_up(self) -> bool:
        """Next queue offsets come from the consume queues, so they are only right once
        dispatch has caught up with the commitlog; until then puts are refused."""
        if self._queue_table_ready:
            return True
        if self.reput.reput_from_offset < self.commitlog.max_offset():
            return False
        with self.commitlog.put_lock:
            self.commitlog.topic_queue_table = self.consume_queues.queue_offset_table()
            self._queue_table_ready = True
        return True

    def _start_services(self) -> None:
        cfg = self.config
        self.commitlog.on_append = self.reput.after_append
        self.commitlog.writable_check = self._refusal
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.group_commit = GroupCommitService(
                self.commitlog.queue, cfg.sync_flush_timeout_ms, self._commitlog_flushed
            )
            self.commitlog.flush_waiter = self.group_commit.wait_flushed
            self.commitlog.flush_later = self.group_commit.when_flushed
            commit_service: ServiceThread = self.group_commit
        else:
            commit_service = FlushRealTimeService(
                self.commitlog.queue,
                cfg.flush_interval_commitlog_ms,
                cfg.flush_commitlog_least_pages,
                cfg.flush_commitlog_thorough_interval_ms,
                self._commitlog_flushed,
                cfg.commitlog_writeback_kb * 1024,
            )
        flush_cq = FlushConsumeQueueService(
            self._flush_logics,
            cfg.flush_interval_consume_queue_ms,
            cfg.flush_consume_queue_least_pages,
            cfg.flush_consume_queue_thorough_interval_ms,
            self._write_checkpoint,
        )
        self.services = [commit_service, flush_cq, self.expiry, self.schedule]
        self.commitlog.prepare_files()
        self.reput.start()
        for service in self.services:
            service.start()

    def _refusal(self) -> str | None:
        if self.shutting_down:
            return "the store is shutting down"
        if not self._queue_table_ready and not self._rebuild_queue_table_if_caught_up():
            return f"dispatch has not caught up since startup: {self.reput.stuck_reason}"
        return self.expiry.refusal()

    def _commitlog_flushed(self) -> None:
        if self.checkpoint is not None:
            stamp = self.commitlog.queue.flushed_store_timestamp()
            if stamp:
                self.checkpoint.physic_msg_timestamp = stamp

    def _flush_logics(self, least_pages: int) -> None:
        stamp = self.reput.last_store_timestamp
        self.consume_queues.flush(least_pages)
        if least_pages == 0 and self.checkpoint is not None and stamp:
            self.checkpoint.logics_msg_timestamp = stamp

    def _write_checkpoint(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.flush()

    def _index_file_full(self, end_timestamp: int) -> None:
        if self.checkpoint is not None:
            self.checkpoint.index_msg_timestamp = end_timestamp
            self.checkpoint.flush()

    def shutdown(self) -> None:
        """Clean stop: flush everything, write the checkpoint, remove `abort`."""
        if not self.running:
            return
        self.shutting_down = True
        caught_up = self.reput.wait_dispatched(timeout=30.0)
        self.expiry.shutdown()
        self.reput.shutdown()
        for service in self.services:
            service.shutdown()
        if self.index is not None:
            self.index.flush()
        self._flush_logics(0)
        self._write_checkpoint()
        clean = caught_up and self.commitlog.write_error is None and self.reput.stuck_reason is None
        if clean:
            try:
                save_queue_ends(self.config.config_dir, self.consume_queues.queue_offset_table())
            except OSError as exc:  # only the check for lost queue tails is lost
                log.warning("consume queue ends not saved", error=str(exc))
            remove_abort_file(self.root)
        else:
            log.warning("store stopped with work left; next start recovers", dispatched=caught_up)
        self._close()

    def halt(self) -> None:
        """Stop as a killed process would: no final flush, no checkpoint, `abort` left behind."""
        if not self.running:
            return
        self.shutting_down = True
        self.reput.shutdown()
        for service in self.services:
            service.shutdown(final=False)
        self._close()

    def _close(self) -> None:
        self.running = False
        self.commitlog.shutdown()
        self.consume_queues.close()
        if self.index is not None:
            self.index.close()
        if self.checkpoint is not None:
            self.checkpoint.close()
        if self.lock is not None:
            self.lock.release()

    def __enter__(self) -> MessageStore:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- put --------------------------------------------------------------------------------------
    def put_message(self, msg: Message) -> PutMessageResult:
        return self._put([[msg]])[0]

    def put_batch(self, msgs: Sequence[Message]) -> PutMessageResult:
        """One batch: same topic and queue, consecutive queue offsets, one file."""
        return self._put([msgs])[0]

    def put_messages(self, groups: Sequence[Sequence[Message]]) -> list[PutMessageResult]:
        """Many independent puts (each a message or a batch) under one lock acquisition."""
        return self._put(groups)

    def put_messages_then(
        self,
        groups: Sequence[Sequence[Message]],
        then: Callable[[list[PutMessageResult]], None],
    ) -> tuple[list[PutMessageResult], bool]:
        """`put_messages` that never waits for a flush: (the results, whether `then(results)`
        follows from the group-commit thread once SYNC_FLUSH has made them durable)
        (`CommitLog.put_groups_then`). The caller keeps its own timeout."""
        if not self.running:
            return self._not_running(groups), False
        return self.commitlog.put_groups_then(self._with_delays(groups), then)

    def put_staged(
        self, staged: StagedSends, then: Callable[[StagedSends], None] | None = None
    ) -> bool:
        """Staged sends into the commitlog (`CommitLog.put_staged`); False when declined
        (nothing changed: put them as messages instead). None of them asks for a delay."""
        if not self.running:
            return False
        return self.commitlog.put_staged(staged, then)

    def _put(self, groups: Sequence[Sequence[Message]]) -> list[PutMessageResult]:
        if not self.running:
            return self._not_running(groups)
        return self.commitlog.put_groups(self._with_delays(groups))

    @staticmethod
    def _not_running(groups: Sequence[Sequence[Message]]) -> list[PutMessageResult]:
        return [
            PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store not running")
            for _ in groups
        ]

    def _with_delays(self, groups: Sequence[Sequence[Message]]) -> Sequence[Sequence[Message]]:
        if any([g[0].marks & MARK_DELAY for g in groups if len(g) == 1]):
            return [self._scheduled(g) for g in groups]
        return groups

    def _scheduled(self, group: Sequence[Message]) -> Sequence[Message]:
        """A single message asking for a delay level goes to the schedule topic to wait
        (batches do not take delays, as in RocketMQ)."""
        if len(group) != 1:
            return group
        level = delay_level(group[0], len(self.delay_levels_ms))
        return [scheduled(group[0], level)] if level else group

    # --- get --------------------------------------------------------------------------------------
    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        tag_codes: AbstractSet[int] | None = None,
        max_total_bytes: int | None = None,
    ) -> GetMessageResult:
        """Up to `max_msg_nums` whole records from `offset` (RocketMQ `getMessage`).
        The first record found is always taken, whatever the limits say (RocketMQ's
        `isTheBatchFull`): a pull for 0 or fewer messages gets one."""
        max_msg_nums = max(max_msg_nums, 1)
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        # The common get - the queue's end, or hot records in one commitlog file - in one call.
        entries, count, size = self.hot_limits(max_msg_nums, tag_codes, max_total_bytes)
        hot = read_hot(cq, self.commitlog, offset, entries, tag_codes, count, size, False)
        if hot:
            status, next_offset, min_off, max_off, body, sizes = hot
            return GetMessageResult(
                GetMessageStatus(status), next_offset, min_off, max_off, body=body, sizes=sizes
            )
        min_off, max_off = cq.min_offset_in_queue(), cq.max_offset_in_queue()
        if max_off == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            # Back to the start of a queue that still begins at 0 (it started over: its
            # topic deleted and sent to again), else to its end: RocketMQ 4.x's answer.
            next_offset = min_off if min_off == 0 else max_off
            return GetMessageResult(
                GetMessageStatus.OFFSET_OVERFLOW_BADLY, next_offset, min_off, max_off
            )
        return self._read_queue(
            cq, offset, max_msg_nums, tag_codes, max_total_bytes, min_off, max_off
        )

    def hot_limits(
        self, max_msg_nums: int, tag_codes: AbstractSet[int] | None, max_total_bytes: int | None
    ) -> tuple[int, int, int]:
        """`read_hot`'s limits for a get of `max_msg_nums` (at least 1): the consume-queue
        entries it reads at once (`scan_limits`: a pull's worth, or all it may scan when a
        tag filter may skip most), and the records and bytes it may take from memory."""
        cfg = self.config
        limit, chunk = scan_limits(max_msg_nums)
        entries = limit if tag_codes is not None else min(chunk, limit)
        size = cfg.max_transfer_bytes_on_message_in_memory
        if max_total_bytes is not None:
            size = min(size, max_total_bytes)
        return entries, min(max_msg_nums, cfg.max_transfer_count_on_message_in_memory), size

    def pull_reads_memory(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether `get_message` from `offset` would read nothing from the disk: no such
        queue or no entry there (it answers with a status only), or the consume-queue entry
        and the first record it would read are in the page cache. The broker runs
        such pulls on its event loop instead of handing them to a pull thread."""
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return True
        position = offset * CQ_STORE_UNIT_SIZE
        cq_file = cq.queue.find_mapped_file_by_offset(position)
        if cq_file is None or position >= cq_file.file_from_offset + cq_file.wrote_position:
            return True
        if not cq_file.in_memory(position - cq_file.file_from_offset):
            return False
        entry = cq.get_entry(offset)
        if entry is None:
            return True
        # Records after the first were written later: they leave the page cache after it.
        mapped = self.commitlog.queue.find_mapped_file_by_offset(entry[0])
        if mapped is None:
            return False
        return mapped.in_memory(entry[0] - mapped.file_from_offset)

    def _read_queue(
        self,
        cq: ConsumeQueue,
        offset: int,
        max_msg_nums: int,
        tag_codes: AbstractSet[int] | None,
        max_total_bytes: int | None,
        min_off: int,
        max_off: int,
    ) -> GetMessageResult:
        cfg = self.config
        limit, chunk = scan_limits(max_msg_nums)
        first_read, _, memory_bytes = self.hot_limits(max_msg_nums, tag_codes, max_total_bytes)
        entries_bytes = cq.entry_bytes(offset, first_read)
        commitlog = self.commitlog
        commitlog_min = commitlog.min_offset()
        hot_from = commitlog.max_offset() - commitlog.hot_bytes
        bytes_cap = max_total_bytes if max_total_bytes is not None else 1 << 62
        memory_count = cfg.max_transfer_count_on_message_in_memory
        cq_phys, cq_sizes, cq_tags = cq_columns(entries_bytes)
        count = len(cq_phys)
        entries = chain(
            zip(cq_phys, cq_sizes, cq_tags, strict=True),
            cq.iter_entries(offset + count, limit - count, chunk),
        )
        disk_count = cfg.max_transfer_count_on_message_in_disk
        disk_bytes = min(cfg.max_transfer_bytes_on_message_in_disk, bytes_cap)
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        messages: list[bytes] = []
        total = 0
        scanned = 0
        floor = commitlog_min  # entries below point at deleted or unreadable records
        placeholder = CQ_PLACEHOLDER[1]
        # The hot run: records of the file the previous one came from, sliced from its mapping.
        window = HotWindow()
        record_head = BLANK.unpack_from
        record: bytes | None
        for phy, size, tags in entries:
            in_disk = phy < hot_from
            if messages:
                if in_disk:
                    if total + size > disk_bytes or len(messages) >= disk_count:
                        break
                elif total + size > memory_bytes or len(messages) >= memory_count:
                    break
            scanned += 1
            if size == placeholder or phy < floor:
                if not messages:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                continue
            if tag_codes is not None and tags not in tag_codes:
                continue
            pos = phy - window.start
            if not in_disk and pos >= 0 and pos + size <= window.length:
                try:
                    record = window.mapping[pos : pos + size]
                    hot = record_head(record) == (size, MESSAGE_MAGIC_V1)
                except (ValueError, struct.error):  # closed by expiry while we looked
                    hot = False
                if not hot:  # a v2 record, or a disagreement get_record logs
                    record = commitlog.get_record(phy, size, in_disk)
            else:
                record = commitlog.get_record(phy, size, in_disk)
                if not in_disk and record is not None:
                    window = commitlog.hot_window(phy)
            if record is None:
                if not messages:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                floor = max(floor, commitlog.next_file_offset(phy))
                continue
            messages.append(record)
            total += size
            status = GetMessageStatus.FOUND
            if len(messages) >= max_msg_nums:
                break
        if scanned == 0:
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, offset, min_off, max_off)
        return GetMessageResult(status, offset + scanned, min_off, max_off, messages)

    def look_message_by_offset(self, phy_offset: int) -> bytes | None:
        """The whole record at a commitlog offset (VIEW_MESSAGE_BY_ID), validated with its CRC."""
        return self.commitlog.read_record(phy_offset)

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int = 0, end: int = 2**62
    ) -> QueryMessageResult:
        """Records whose UNIQ_KEY or one of KEYS is `key`, newest first."""
        if self.index is None:
            return QueryMessageResult([], 0, 0)
        max_num = min(max_num, self.config.max_msgs_num_batch)
        result = self.index.query_offset(topic, key, max_num, begin, end)
        messages = []
        seen = set()
        for phy in result.phy_offsets:
            if phy in seen:
                continue
            seen.add(phy)
            data = self.look_message_by_offset(phy)
            if data is None:
                continue
            record = decode_record(data, 0, check_crc=False)
            if record.topic == topic and (record.uniq_key == key or key in record.keys):
                messages.append(data)
        return QueryMessageResult(
            messages, result.index_last_update_timestamp, result.index_last_update_phy_offset
        )

    # --- offsets ---------------------------------------------------------------------------------
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.max_offset_in_queue() if cq is not None else 0

    def max_offset_reader(self) -> Callable[[str, int], int]:
        """`get_max_offset_in_queue` for a caller that asks it every time (the pulls a broker
        parks): the compiled core's, without a Python call, where it is built."""
        if max_offset_in is None:
            return self.get_max_offset_in_queue
        return partial(max_offset_in, self.consume_queues.table)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.min_offset_in_queue() if cq is not None else 0

    def get_commitlog_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        entry = cq.get_entry(offset) if cq is not None else None
        return entry[0] if entry is not None else 0

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether the message at `offset` exists and lies beyond what counts as hot data
        (RocketMQ `checkInDiskByConsumeOffset`)."""
        cq = self.consume_queues.find(topic, queue_id)
        entry = cq.get_entry(offset) if cq is not None else None
        return entry is not None and not self.commitlog.is_hot(entry[0])

    def store_timestamp_at(self, phy_offset: int, size: int = 0) -> int | None:
        head = self.commitlog.get_data(phy_offset, RECORD_HEAD.size + HOST_V6.size + 8)
        return record_store_timestamp(head) if head is not None else None

    def get_offset_in_queue_by_time(
        self,
        topic: str,
        queue_id: int,
        timestamp: int,
        boundary: BoundaryType = BoundaryType.LOWER,
    ) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(
            timestamp, self.store_timestamp_at, self.commitlog.min_offset(), boundary
        )

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the message at the queue's minimum offset, -1 if there is none."""
        phy = self.get_commitlog_offset_in_queue(
            topic, queue_id, self.get_min_offset_in_queue(topic, queue_id)
        )
        if self.get_max_offset_in_queue(topic, queue_id) == 0:
            return -1
        stamp = self.store_timestamp_at(phy)
        return stamp if stamp is not None else -1

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        entry = cq.get_entry(offset) if cq is not None else None
        stamp = self.store_timestamp_at(entry[0]) if entry is not None else None
        return stamp if stamp is not None else -1

    # --- misc ------------------------------------------------------------------------------------
    def delete_topic(self, topic: str) -> None:
        """Forget a topic's queues: their consume-queue files and next offsets (RocketMQ
        `cleanUnusedTopic`). Its records stay in the commitlog until they expire.

        Puts wait while this runs, and dispatch catches up first: a message sent just before
        must land in the old queues (which go), not in the new ones under a stale queue
        offset, where it would fill the new queue's start with placeholders and push every
        later send's entry out as "already present"; and no round may write to a file being
        deleted. The deletion is remembered (`DeletedTopics`) so that no restart brings the
        topic's old records back. Dispatch is waited for first without the lock, so the
        lock is held (and sends on the broker's event loop wait) only for what came since."""
        self.reput.wait_dispatched(timeout=5.0)
        with self.commitlog.put_lock, self.reput.caught_up():
            commitlog = self.commitlog
            self.deleted_topics.add(topic, commitlog.max_offset(), commitlog.min_offset())
            table = commitlog.topic_queue_table
            for key in [k for k in table if k.rpartition("-")[0] == topic]:
                del table[key]
            self.consume_queues.delete_topic(topic)

    def register_arrival_listener(self, listener: ArrivalListener) -> None:
        self.reput.listeners.append(listener)

    def dispatch_with(self, scheduler: RoundScheduler | None) -> None:
        """Let writers' threads run the dispatch rounds of their puts where `scheduler` can
        schedule them (see `ReputService.after_append`); None: the dispatch thread does."""
        self.reput.schedule_rounds = scheduler

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        """Block until every record written so far is in its consume queue and the index."""
        return self.reput.wait_dispatched(timeout=timeout)

    def flush_behind_bytes(self) -> int:
        """Commitlog bytes written but not yet flushed to disk."""
        return max(self.commitlog.max_offset() - self.commitlog.queue.flushed_where, 0)

    def earliest_store_timestamp(self) -> int | None:
        """Store time of the oldest message the commitlog still holds, None when empty."""
        low = self.commitlog.min_offset()
        if self.commitlog.max_offset() <= low:
            return None
        return self.store_timestamp_at(low)

    def size_on_disk(self) -> int:
        """Bytes of every file under the store root (commitlog files count whole)."""
        total = 0
        for top, _dirs, files in os.walk(self.root):
            for name in files:
                with contextlib.suppress(FileNotFoundError):  # expiry may delete it meanwhile
                    total += os.stat(os.path.join(top, name)).st_size
        return total

    def write_problems(self) -> list[str]:
        """Why the store cannot take writes now; empty when it can (for health checks)."""
        problems: list[str] = []
        if not self.running or self.shutting_down:
            problems.append("the store is not running")
        if self.commitlog.write_error is not None:
            problems.append(f"commitlog write failed: {self.commitlog.write_error}")
        if self.commitlog.file_failure is not None:
            problems.append(f"puts are failing: {self.commitlog.file_failure}")
        if self.index is not None and self.index.error is not None:
            problems.append(f"index write failed: {self.index.error}")
        refusal = self.expiry.refusal()
        if refusal is not None:
            problems.append(refusal)
        cfg = self.config
        dirs = [self.root, cfg.commitlog_dir, cfg.consume_queue_dir, cfg.config_dir]
        if self.index is not None:
            dirs.append(cfg.index_dir)
        problems.extend(unwritable(dirs))
        return problems

    def runtime_info(self) -> dict[str, int | str]:
        return {
            "commitLogMinOffset": self.commitlog.min_offset(),
            "commitLogMaxOffset": self.commitlog.max_offset(),
            "commitLogFlushedOffset": self.commitlog.queue.flushed_where,
            "dispatchBehindBytes": self.reput.behind_bytes(),
            "flushDiskType": self.config.flush_disk_type.value,
            "topicQueues": sum(1 for _ in self.consume_queues),
        }


def _report_fields(report: RecoveryReport) -> dict[str, object]:
    return {
        "abnormal_exit": report.abnormal,
        "files_scanned": report.files_scanned,
        "records_valid": report.records_valid,
        "bytes_truncated": report.bytes_truncated,
        "damage": report.damage,
        "cq_entries_trimmed": report.consume_queue_entries_trimmed,
        "index_files_dropped": report.index_files_dropped,
        "entries_redispatched": report.entries_redispatched,
        "reput_from_offset": report.reput_from_offset,
        "queues_repaired": report.queues_repaired or None,
        "took_ms": report.took_ms,
    }
