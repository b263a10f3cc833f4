"""Reput: turns committed commitlog records into consume-queue and index entries.

Mirrors RocketMQ's `ReputMessageService`, but woken by each append instead of polling every
millisecond. A round takes what was written since `reput_from_offset` and writes one
consume-queue entry per NOT/COMMIT record (one write per queue per round) and the index keys
of every record but rolled-back ones (one vectorised pass), then tells the arrival listeners
(long polling) which queues grew.

Two ways in, one way out. While the store runs, the commitlog hands over what each write
contained (`CommitLog.written`), so records just encoded are not parsed back. Anything else
(a store opened on existing files, segments the commitlog stopped keeping because dispatch
fell far behind) is parsed from the files: length and magic checked, no CRC, as Java does.
A record that cannot be parsed stops dispatch there and is logged; `stuck_reason` says why,
for health checks, until recovery cuts it at the next start.
"""

from __future__ import annotations

import struct
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from rmqpy.store.commitlog import CommitLog, WrittenSegment
from rmqpy.store.consume_queue_store import ConsumeQueueStore
from rmqpy.store.deleted_topics import DeletedTopics
from rmqpy.store.dispatch_columns import DispatchColumns
from rmqpy.store.index_file import IndexService
from rmqpy.store.layout import (
    BLANK,
    BLANK_MAGIC,
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    SCHEDULE_TOPIC,
    MessageConst,
    due_time,
    is_indexed,
    is_queued,
    queue_key,
)
from rmqpy.store.mapped_file import MappedFile
from rmqpy.store.message import fixed_part, property_value, tags_code, uniq_key_in
from rmqpy.store.staged import add_staged, dispatch_staged, run_rounds

log = structlog.get_logger(__name__)

CHUNK_BYTES = 4 * 1024 * 1024
BATCH_BYTES = 1024 * 1024  # waiting bytes that make a writer run the rounds itself
BATCH_WAIT_S = 0.001
MAX_WAIT_S = 0.002  # the longest the dispatch thread lets a write wait while writes go on
TAGS_CACHE_MAX = 4096  # distinct TAGS strings the parse path remembers
FAILED = "dispatch failed: "  # how stuck_reason starts when a round raised


@dataclass(slots=True)
class Arrival:
    """New entries in one consume queue during one dispatch round (what wakes long polls).
    Read only; not frozen, as one is made for each queue of every round, and a frozen
    dataclass takes four times as long to make."""

    topic: str
    queue_id: int
    next_offset: int  # the queue's max offset after the round
    tags_codes: frozenset[int]
    store_timestamp: int  # of the newest of them


ArrivalListener = Callable[[Sequence[Arrival]], None]
# Offered by a writer's thread that can run work of its own a little later (an event loop):
# schedules the callback there and returns True, or returns False when called from a thread
# it cannot schedule on.
RoundScheduler = Callable[[Callable[[], None]], bool]


class ReputService:
    def __init__(
        self,
        commitlog: CommitLog,
        consume_queues: ConsumeQueueStore,
        index: IndexService | None,
        delay_levels_ms: Sequence[int],
        deleted_topics: DeletedTopics,
    ) -> None:
        self.commitlog = commitlog
        self.deleted_topics = deleted_topics
        self.consume_queues = consume_queues
        self.index = index
        self.last_store_timestamp = 0
        self.stuck_reason: str | None = None
        self.listeners: list[ArrivalListener] = []
        self.dispatched_entries = 0
        self.delay_levels_ms: Sequence[int] = delay_levels_ms
        self.records_handed_over = 0  # dispatched from the commitlog's own columns
        self.records_parsed = 0  # dispatched by parsing the files
        self.records_skipped = 0  # parsed, but their fields would not decode
        self.schedule_rounds: RoundScheduler | None = None
        self._tags_cache: dict[str | None, int] = {}
        self._wake = threading.Event()
        self._round_lock = threading.Lock()  # one dispatch round at a time
        self._progress = threading.Condition()
        self._waiting = 0  # threads in `wait_dispatched`
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def reput_from_offset(self) -> int:
        """Where dispatch goes on from: everything below is in the consume queues and index."""
        return self.commitlog.dispatched_offset

    @reput_from_offset.setter
    def reput_from_offset(self, offset: int) -> None:
        self.commitlog.dispatched_offset = offset

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self.commitlog.keep_written = True
        self._thread = threading.Thread(target=self._run, name="reput", daemon=True)
        self._thread.start()

    def after_append(self) -> None:
        """A writer's put is in the commitlog. Once a round's worth is waiting the writer runs
        the rounds itself, after any round the dispatch thread is in (so dispatch never falls
        further behind than that). Otherwise the writer's own thread runs them a little later
        when `schedule_rounds` can arrange that (the broker's event loop: once per loop
        iteration, after the answers are written), else the dispatch thread is woken. Under
        the GIL a separate dispatch thread buys no parallelism, only hand-offs, and big rounds
        cost less per record than small ones: the index is written with numpy, a fixed cost
        per round."""
        if self.behind_bytes() >= BATCH_BYTES and not self._stopped.is_set():
            with self._round_lock:
                self._guarded_rounds()
        elif self.schedule_rounds is None or not self.schedule_rounds(self.scheduled_rounds):
            self._wake.set()

    def scheduled_rounds(self) -> None:
        """The rounds `schedule_rounds` runs (none once the store is stopping: `shutdown`
        may be closing the files on another thread); a failed one is left to the dispatch
        thread to retry."""
        with self._round_lock:
            if not self._stopped.is_set() and not self._guarded_rounds():
                self._wake.set()

    def shutdown(self) -> None:
        self.commitlog.keep_written = False
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._round_lock:
            self.commitlog.written.clear()

    def _run(self) -> None:
        """The dispatch thread: takes what writers leave behind (less than a round's worth),
        once `_writes_settled` says so."""
        while not self._stopped.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            if not self._writes_settled():
                continue  # writers are dispatching; come back when woken again
            with self._round_lock:
                failed = not self._guarded_rounds()
            if failed:
                self._stopped.wait(0.5)  # do not spin on a persistent failure

    def _writes_settled(self) -> bool:
        """Stay out of writers' way while they keep writing: True once writes have paused
        for BATCH_WAIT_S (RocketMQ's reput polls every 1 ms) or the first of them has waited
        MAX_WAIT_S; False when a writer ran the rounds meanwhile or the store stops."""
        woken = time.monotonic()
        before = self.reput_from_offset
        while True:
            top = self.commitlog.max_offset()
            self._stopped.wait(BATCH_WAIT_S)
            if self.reput_from_offset != before or self._stopped.is_set():
                return False
            if self.commitlog.max_offset() == top or time.monotonic() - woken >= MAX_WAIT_S:
                return True

    def _guarded_rounds(self) -> bool:
        """Run rounds until caught up; False if one failed: in `stuck_reason` until a later
        round succeeds, logged once per distinct failure (writers retry the rounds), with
        the traceback as text: a renderer that walks the frames' locals could itself fail
        on state other threads are changing, and take this thread with it."""
        failing = self.stuck_reason is not None and self.stuck_reason.startswith(FAILED)
        try:
            self._rounds()
        except Exception as exc:  # keep the store serving; surfaced through stuck_reason
            reason = f"{FAILED}{exc!r}"
            if reason != self.stuck_reason:
                log.error(
                    "dispatch failed",
                    reput_from=self.reput_from_offset,
                    error=repr(exc),
                    traceback=traceback.format_exc(),
                )
            self.stuck_reason = reason
            return False
        if failing and (self.stuck_reason is None or self.stuck_reason.startswith(FAILED)):
            self.stuck_reason = None  # (a parsed round may have cleared it already)
            log.info("dispatch resumed", reput_from=self.reput_from_offset)
        return True

    def behind_bytes(self) -> int:
        commitlog = self.commitlog
        return max(commitlog.queue.max_offset() - commitlog.dispatched_offset, 0)

    def wait_dispatched(self, offset: int | None = None, timeout: float = 10.0) -> bool:
        """Block until everything below `offset` (default: all written) is dispatched;
        give up early when dispatch is stuck and made no progress for a second. The dispatch
        thread is woken first: rounds a writer's thread scheduled may not run while it waits
        here."""
        target = self.commitlog.max_offset() if offset is None else offset
        self._wake.set()
        deadline = time.monotonic() + timeout
        with self._progress:
            self._waiting += 1  # before the test: an `_advance` after it sees the waiter
            try:
                while self.reput_from_offset < target:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    before = self.reput_from_offset
                    self._progress.wait(min(left, 1.0))
                    if self.stuck_reason is not None and self.reput_from_offset == before:
                        return False
                return True
            finally:
                self._waiting -= 1

    @contextmanager
    def caught_up(self) -> Iterator[None]:
        """Dispatch everything written so far on this thread, then keep every other round
        out until the block ends. The caller holds the commitlog's put lock, so nothing is
        written meanwhile: the block sees the consume queues exactly as the commitlog says,
        and may change them (delete a topic's) without a round writing to files it removes."""
        with self._round_lock:
            self._guarded_rounds()
            yield

    # --- work ------------------------------------------------------------------------------------
    def do_reput(self) -> int:
        """Dispatch everything written so far; returns how many records were dispatched."""
        with self._round_lock:
            return self._rounds()

    def _rounds(self) -> int:
        if run_rounds is not None:  # the compiled core's, the usual rounds without a call
            return run_rounds(self, CHUNK_BYTES)
        return self._rounds_one_by_one()

    def _rounds_one_by_one(self) -> int:
        """Rounds until caught up (`_rounds`, the compiled core's reference)."""
        total = 0
        while True:
            n = self._reput_once()
            if n < 0:
                return total
            total += n

    def _reput_once(self) -> int:
        """One round from `reput_from_offset`: records dispatched, or -1 when there is nothing
        (more) to do for now."""
        commitlog = self.commitlog
        start = commitlog.dispatched_offset
        written = commitlog.written
        if written and written[0].start == start:  # the usual round: in a file, handed over
            return self._dispatch_written()
        queue = commitlog.queue
        # A writer hands its segment over before its bytes: every byte below `end` is either
        # covered by a segment seen after it, or by none (not kept), and is then parsed.
        end = queue.max_offset()
        if start >= end and not written:
            return -1  # caught up (the round after the usual one)
        if start < queue.min_offset():
            start = self.reput_from_offset = queue.min_offset()
        while written and written[0].start < start:
            written.popleft()  # parsed from the file already
        if written and written[0].start == start:
            return self._dispatch_written()
        if start >= end:
            return -1
        return self._dispatch_parsed(start, written[0].start if written else end)

    def _dispatch_written(self) -> int:
        """Dispatch the segments the commitlog handed over whose bytes are written, without
        parsing them; -1 when the first one's are still being written."""
        written = self.commitlog.written
        segments: list[WrittenSegment] = []
        cursor = self.reput_from_offset
        budget = CHUNK_BYTES
        while written and written[0].start == cursor and written[0].done and budget > 0:
            seg = written.popleft()
            segments.append(seg)
            budget -= seg.end - seg.start
            cursor = seg.end
        if not segments:
            return -1
        return self._dispatch_segments(segments, cursor)

    def _dispatch_segments(self, segments: list[WrittenSegment], cursor: int) -> int:
        """Dispatch `segments`, taken from those handed over, up to `cursor`, their end."""
        staged = True  # (a loop, not `all`: every round asks)
        for seg in segments:
            if seg.staged is None:
                staged = False
                break
        if staged:  # the broker's usual round
            records = dispatch_staged(self, segments)
        else:
            work = DispatchColumns(last_store_timestamp=self.last_store_timestamp)
            for seg in segments:
                if seg.staged is not None:
                    add_staged(work, seg.staged)
                else:
                    work.add_written(seg.groups, seg.results, seg.store_timestamp,
                                     seg.store_v6, self.delay_levels_ms)  # fmt: skip
            self.finish_round(work, cursor)
            records = work.records
        self.records_handed_over += records
        return records

    def _dispatch_parsed(self, start: int, stop: int) -> int:
        """Parse records from `start` up to `stop` (the end of the commitlog, or where
        handed-over segments begin)."""
        mapped = self.commitlog.queue.find_mapped_file_by_offset(start)
        if mapped is None:
            return -1
        pos = start - mapped.file_from_offset
        end = mapped.wrote_position
        if mapped.file_from_offset <= stop < mapped.end_offset:
            end = min(end, stop - mapped.file_from_offset)
        if pos >= end:
            if mapped.is_full() and stop >= mapped.end_offset:
                self._advance(mapped.end_offset)
                return 0
            return -1
        work = DispatchColumns(last_store_timestamp=self.last_store_timestamp)
        next_offset, stuck = self._parse_chunk(mapped, pos, end, work)
        self.finish_round(work, next_offset)
        self.records_parsed += work.records
        if stuck is not None and stuck != self.stuck_reason:
            log.error("dispatch stopped", reason=stuck)
        self.stuck_reason = stuck
        return -1 if next_offset == start else work.records

    def _parse_chunk(
        self, mapped: MappedFile, pos: int, end: int, work: DispatchColumns
    ) -> tuple[int, str | None]:
        """Parse whole records of `mapped` from `pos` into `work`; (where to go on, why stuck)."""
        start = mapped.file_from_offset + pos
        data = mapped.read(pos, min(end - pos, CHUNK_BYTES))
        tags_cache = self._tags_cache
        want_index = self.index is not None
        deleted = self.deleted_topics
        p = 0
        size_left = len(data)
        while p + 8 <= size_left:
            total_size, magic = BLANK.unpack_from(data, p)
            if magic == BLANK_MAGIC:
                return mapped.end_offset, None
            if magic not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2) or total_size <= 48:
                return start + p, (
                    f"unparseable record at commitlog offset {start + p}: "
                    f"size {total_size}, magic {magic & 0xFFFFFFFF:#x}"
                )
            if p + total_size > size_left:
                if p == 0 and total_size <= end - pos:  # one record larger than a chunk
                    data = mapped.read(pos, total_size)
                    size_left = len(data)
                    continue
                break  # the rest of this record comes with the next chunk
            phy = start + p
            try:
                topic, queue_id, queue_offset, sys_flag, stamp, props = _parse(
                    data, p, magic, total_size
                )
            except (ValueError, IndexError, struct.error) as exc:
                # Length and magic hold, so the next record is found; the body CRC does not
                # cover topic or properties, so a flipped byte there passes recovery. No
                # reader can decode this record: step over it (RocketMQ's reput does too)
                # rather than stop dispatch, or the store's start, for every topic.
                log.error("record skipped by dispatch: its fields do not parse",
                          commitlog_offset=phy, size=total_size, error=str(exc))  # fmt: skip
                self.records_skipped += 1
                p += total_size
                continue
            kept = not deleted.hides(topic, phy)  # not queued before a delete
            if kept and is_queued(sys_flag):
                if topic == SCHEDULE_TOPIC:
                    tags = due_time(stamp, queue_id, self.delay_levels_ms)
                else:
                    tag = property_value(props, MessageConst.TAGS)
                    cached = tags_cache.get(tag)
                    if cached is None:
                        if len(tags_cache) >= TAGS_CACHE_MAX:
                            tags_cache.clear()
                        cached = tags_cache[tag] = tags_code(tag)
                    tags = cached
                work.queue(queue_key(topic, queue_id), topic, queue_id).add(
                    queue_offset, phy, total_size, tags
                )
            if want_index and is_indexed(sys_flag):  # (a deleted topic's keys too, as live)
                work.add_keys(
                    topic,
                    phy,
                    stamp,
                    uniq_key_in(props),
                    property_value(props, MessageConst.KEYS) or "",
                )
            work.last_store_timestamp = stamp
            work.records += 1
            p += total_size
        return start + p, None

    def finish_round(self, work: DispatchColumns, next_offset: int) -> None:
        """Write a round's entries and keys, move `reput_from_offset`, tell the listeners."""
        arrivals: list[Arrival] = []
        for cols in work.queues.values():
            topic, queue_id = cols.topic, cols.queue_id
            if not cols.phys:
                continue
            cq = self.consume_queues.find_or_create(topic, queue_id)
            self.dispatched_entries += cq.put_columns(
                cols.queue_offsets, cols.phys, cols.sizes, cols.tags
            )
            if self.listeners:
                arrivals.append(
                    Arrival(
                        topic,
                        queue_id,
                        cq.max_offset_in_queue(),
                        frozenset(cols.tags),
                        work.last_store_timestamp,
                    )
                )
        keys = (work.key_topics, work.key_names, work.key_phys, work.key_stamps)
        self.end_round(keys, work.last_store_timestamp, next_offset, arrivals)

    def end_round(
        self,
        keys: tuple[list[str], list[str], list[int], list[int]],
        store_timestamp: int,
        next_offset: int,
        arrivals: list[Arrival],
    ) -> None:
        """A round's last steps, once its consume-queue entries are written: its index keys
        (topics, names, offsets, store times), the newest store time, `reput_from_offset`
        moved on, the listeners told."""
        if self.index is not None:
            self.index.build_index(*keys)
        self.last_store_timestamp = store_timestamp
        if next_offset != self.commitlog.dispatched_offset:
            self._advance(next_offset)
        if arrivals:
            for listener in self.listeners:
                listener(arrivals)

    def _advance(self, offset: int) -> None:
        """Move dispatch on, waking whoever waits for it (`wait_dispatched`): the condition
        is taken only when someone does, which is seldom, while this runs every round."""
        self.commitlog.dispatched_offset = offset  # (`reput_from_offset`: every round)
        if self._waiting:
            with self._progress:
                self._progress.notify_all()


def _parse(data: bytes, p: int, magic: int, total_size: int) -> tuple[str, int, int, int, int, str]:
    """(topic, queueId, queueOffset, sysFlag, storeTimestamp, properties text) of the record
    at `p`; ValueError (UnicodeDecodeError among them), IndexError or struct.error when its
    fields do not decode or do not add up to `total_size`."""
    fixed = fixed_part(data, p)
    head = fixed.unpack_from(data, p)
    queue_id, queue_offset, sys_flag, store_ts, body_len = (
        head[3], head[5], head[7], head[11], head[-1]
    )  # fmt: skip
    q = p + fixed.size + body_len
    if magic == MESSAGE_MAGIC_V1:
        topic_len = data[q]
        q += 1
    else:
        topic_len = int.from_bytes(data[q : q + 2], "big")
        q += 2
    topic = data[q : q + topic_len].decode("utf-8")
    q += topic_len
    props_len = int.from_bytes(data[q : q + 2], "big")
    if q + 2 + props_len - p != total_size:
        raise ValueError(f"fields take {q + 2 + props_len - p} bytes, TOTALSIZE says {total_size}")
    props = data[q + 2 : q + 2 + props_len].decode("utf-8")
    return topic, queue_id, queue_offset, sys_flag, store_ts, props
