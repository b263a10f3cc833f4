"""Reput: turns committed commitlog records into consume-queue and index entries.

Mirrors RocketMQ's `ReputMessageService`, but woken by each append instead of polling every
millisecond. From `reput_from_offset` it parses whole records (length and magic checked, no
CRC, as Java does), writes one consume-queue entry per NOT/COMMIT record (batched: one write
per queue per round), adds index keys, then tells the arrival listeners (long polling) what
arrived, once per round. A record it cannot parse stops dispatch there and is logged:
`stuck_reason` says why, for health checks, until recovery cuts it at the next start.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from store.commitlog import CommitLog
from store.consume_queue import DispatchEntry
from store.consume_queue_store import ConsumeQueueStore
from store.index_file import IndexRequest, IndexService
from store.layout import (
    BLANK,
    BLANK_MAGIC,
    HOST_V4,
    HOST_V6,
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    RECORD_HEAD,
    MessageConst,
    SysFlag,
    transaction_type,
)
from store.message import decode_properties, property_value, tags_code

log = structlog.get_logger(__name__)

CHUNK_BYTES = 4 * 1024 * 1024
BATCH_BYTES = 256 * 1024
BATCH_WAIT_S = 0.001
_QUEUED = (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE)


@dataclass(frozen=True, slots=True)
class Arrival:
    """A message that reached its consume queue (what long polling is woken with)."""

    topic: str
    queue_id: int
    queue_offset: int
    tags_code: int
    store_timestamp: int
    properties: dict[str, str]


ArrivalListener = Callable[[Sequence[Arrival]], None]


class ReputService:
    def __init__(
        self,
        commitlog: CommitLog,
        consume_queues: ConsumeQueueStore,
        index: IndexService | None,
    ) -> None:
        self.commitlog = commitlog
        self.consume_queues = consume_queues
        self.index = index
        self.reput_from_offset = 0
        self.last_store_timestamp = 0
        self.stuck_reason: str | None = None
        self.listeners: list[ArrivalListener] = []
        self.dispatched_entries = 0
        self._tags_cache: dict[str | None, int] = {}
        self._wake = threading.Event()
        self._progress = threading.Condition()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="reput", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self._wake.set()

    def shutdown(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(1.0)
            if self.behind_bytes() < BATCH_BYTES:
                # Let a burst of appends gather for up to 1 ms (RocketMQ's reput polls every
                # 1 ms): one round per batch instead of one per message, with the GIL left
                # to the writers meanwhile.
                self._stopped.wait(BATCH_WAIT_S)
            self._wake.clear()
            try:
                self.do_reput()
            except Exception as exc:  # keep the store serving; surfaced through stuck_reason
                self.stuck_reason = f"dispatch failed: {exc!r}"
                log.exception("dispatch failed", reput_from=self.reput_from_offset)
                self._stopped.wait(0.5)

    def behind_bytes(self) -> int:
        return max(self.commitlog.max_offset() - self.reput_from_offset, 0)

    def wait_dispatched(self, offset: int | None = None, timeout: float = 10.0) -> bool:
        """Block until everything below `offset` (default: all written) is dispatched;
        give up early when dispatch is stuck and made no progress for a second."""
        target = self.commitlog.max_offset() if offset is None else offset
        deadline = time.monotonic() + timeout
        with self._progress:
            while self.reput_from_offset < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                before = self.reput_from_offset
                self._progress.wait(min(left, 1.0))
                if self.stuck_reason is not None and self.reput_from_offset == before:
                    return False
            return True

    # --- work ------------------------------------------------------------------------------------
    def do_reput(self) -> int:
        """Dispatch everything written so far; returns how many records were dispatched."""
        total = 0
        while True:
            n = self._reput_chunk()
            if n < 0:
                return total
            total += n

    def _reput_chunk(self) -> int:
        commitlog = self.commitlog
        start = self.reput_from_offset
        if start < commitlog.min_offset():
            start = self.reput_from_offset = commitlog.min_offset()
        if start >= commitlog.max_offset():
            return -1
        mapped = commitlog.queue.find_mapped_file_by_offset(start)
        if mapped is None:
            return -1
        pos = start - mapped.file_from_offset
        end = mapped.wrote_position
        if pos >= end:
            if mapped.is_full():
                self._advance(mapped.end_offset)
                return 0
            return -1
        data = mapped.read(pos, min(end - pos, CHUNK_BYTES))
        per_queue: dict[tuple[str, int], list[DispatchEntry]] = {}
        index_requests: list[IndexRequest] = []
        arrivals: list[Arrival] | None = [] if self.listeners else None
        want_index = self.index is not None
        tags_cache = self._tags_cache
        p = 0
        count = 0
        last_ts = self.last_store_timestamp
        next_offset = start
        size_left = len(data)
        stuck: str | None = None
        while p + 8 <= size_left:
            total_size, magic = BLANK.unpack_from(data, p)
            if magic == BLANK_MAGIC:
                next_offset = mapped.end_offset
                break
            if magic not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2) or total_size <= 48:
                stuck = (
                    f"unparseable record at commitlog offset {start + p}: "
                    f"size {total_size}, magic {magic & 0xFFFFFFFF:#x}"
                )
                break
            if p + total_size > size_left:
                if p == 0 and total_size <= end - pos:  # one record larger than a chunk
                    data = mapped.read(pos, total_size)
                    size_left = len(data)
                    continue
                break  # the rest of this record comes with the next chunk
            topic, queue_id, queue_offset, sys_flag, store_ts, props = self._parse(data, p, magic)
            phy = start + p
            tag = property_value(props, MessageConst.TAGS)
            tags = tags_cache.get(tag)
            if tags is None:
                tags = tags_cache[tag] = tags_code(tag)
            if transaction_type(sys_flag) in _QUEUED:
                per_queue.setdefault((topic, queue_id), []).append(
                    (queue_offset, phy, total_size, tags)
                )
                if arrivals is not None:
                    arrivals.append(
                        Arrival(
                            topic, queue_id, queue_offset, tags, store_ts, decode_properties(props)
                        )
                    )
            if want_index:
                index_requests.append(
                    IndexRequest(
                        topic,
                        phy,
                        store_ts,
                        sys_flag,
                        property_value(props, MessageConst.UNIQ_KEY),
                        property_value(props, MessageConst.KEYS) or "",
                    )
                )
            last_ts = store_ts
            p += total_size
            count += 1
            next_offset = start + p
        for (topic, queue_id), entries in per_queue.items():
            cq = self.consume_queues.find_or_create(topic, queue_id)
            self.dispatched_entries += cq.put_entries(entries)
        if self.index is not None and index_requests:
            self.index.build_index(index_requests)
        self.last_store_timestamp = last_ts
        if next_offset != start:
            self._advance(next_offset)
        if stuck is not None and stuck != self.stuck_reason:
            log.error("dispatch stopped", reason=stuck)
        self.stuck_reason = stuck
        if next_offset == start:
            return -1
        if arrivals:
            for listener in self.listeners:
                listener(arrivals)
        return count

    @staticmethod
    def _parse(data: bytes, p: int, magic: int) -> tuple[str, int, int, int, int, str]:
        """(topic, queueId, queueOffset, sysFlag, storeTimestamp, properties text)."""
        head = RECORD_HEAD.unpack_from(data, p)
        queue_id, queue_offset, sys_flag = head[3], head[5], head[7]
        born_size = HOST_V6.size if sys_flag & SysFlag.BORNHOST_V6 else HOST_V4.size
        q = p + RECORD_HEAD.size + born_size
        store_ts = int.from_bytes(data[q : q + 8], "big", signed=True)
        q += 8 + (HOST_V6.size if sys_flag & SysFlag.STOREHOST_V6 else HOST_V4.size) + 12
        body_len = int.from_bytes(data[q : q + 4], "big", signed=True)
        q += 4 + body_len
        if magic == MESSAGE_MAGIC_V1:
            topic_len = data[q]
            q += 1
        else:
            topic_len = int.from_bytes(data[q : q + 2], "big")
            q += 2
        topic = data[q : q + topic_len].decode("utf-8")
        q += topic_len
        props_len = int.from_bytes(data[q : q + 2], "big")
        props = data[q + 2 : q + 2 + props_len].decode("utf-8")
        return topic, queue_id, queue_offset, sys_flag, store_ts, props

    def _advance(self, offset: int) -> None:
        with self._progress:
            self.reput_from_offset = offset
            self._progress.notify_all()
