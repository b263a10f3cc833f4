"""All consume queues of a store, `consumequeue/<topic>/<queueId>/` (`ConsumeQueueStore`)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import structlog

from rmqpy.store.consume_queue import ConsumeQueue
from rmqpy.store.fileio import no_sync, sync_file_system
from rmqpy.store.layout import queue_key

log = structlog.get_logger(__name__)

SYNC_FILE_SYSTEM_AT = 64  # queues from which a thorough flush is one syncfs


class ConsumeQueueStore:
    def __init__(self, root_dir: str, file_size: int) -> None:
        self.root_dir = root_dir
        self.file_size = file_size
        self.table: dict[str, dict[int, ConsumeQueue]] = {}
        self._lock = threading.Lock()

    def load(self) -> list[ConsumeQueue]:
        """Open every queue; returns those that dropped damaged files (to be refilled)."""
        damaged: list[ConsumeQueue] = []
        if not os.path.isdir(self.root_dir):
            return damaged
        for topic in sorted(os.listdir(self.root_dir)):
            topic_dir = os.path.join(self.root_dir, topic)
            if not os.path.isdir(topic_dir):
                continue
            for qid in sorted(os.listdir(topic_dir)):
                if qid.isdigit():
                    cq = ConsumeQueue(self.root_dir, topic, int(qid), self.file_size)
                    if cq.load():
                        damaged.append(cq)
                    self.table.setdefault(topic, {})[int(qid)] = cq
        return damaged

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self.table.get(topic)
        return queues.get(queue_id) if queues is not None else None

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.find(topic, queue_id)
        if cq is None:
            with self._lock:
                queues = self.table.setdefault(topic, {})
                cq = queues.get(queue_id)
                if cq is None:
                    cq = ConsumeQueue(self.root_dir, topic, queue_id, self.file_size)
                    queues[queue_id] = cq
        return cq

    def __iter__(self) -> Iterator[ConsumeQueue]:
        for queues in list(self.table.values()):
            yield from list(queues.values())

    def recover(self) -> dict[str, int]:
        """Each queue cut back to its last valid entry; the queues that lost written
        entries that way (`topic-queueId` -> how many)."""
        cut = {queue_key(cq.topic, cq.queue_id): cq.recover() for cq in self}
        return {key: n for key, n in cut.items() if n}

    def max_physic_offset(self) -> int:
        """The end of the furthest record any queue points at (-1 when none)."""
        return max((cq.max_physic_offset for cq in self), default=-1)

    def truncate_dirty(self, phy_offset: int) -> int:
        return sum(cq.truncate_dirty_logic_files(phy_offset) for cq in self)

    def queue_offset_table(self) -> dict[str, int]:
        """`topic-queueId` -> next queue offset, rebuilt from each queue's max."""
        return {queue_key(cq.topic, cq.queue_id): cq.max_offset_in_queue() for cq in self}

    def correct_min_offsets(self, commitlog_min: int) -> None:
        for cq in self:
            cq.correct_min_offset(commitlog_min)

    def delete_expired_files(self, commitlog_min: int) -> int:
        return sum(cq.delete_expired_files(commitlog_min) for cq in self)

    def delete_topic(self, topic: str, older_than: int | None = None) -> int:
        """Delete the topic's queues, files and directories; with `older_than`, only the
        queues that hold nothing at or past that commitlog offset. Returns how many went."""
        with self._lock:
            queues = self.table.get(topic, {})
            doomed = {
                qid: cq
                for qid, cq in queues.items()
                if older_than is None or cq.max_physic_offset <= older_than
            }
            for qid in doomed:
                del queues[qid]
            if not queues:
                self.table.pop(topic, None)
        for cq in doomed.values():
            cq.queue.delete_files(list(cq.queue.files))
            # and the directories, or the next start would load the topic again, empty
            for path in (cq.store_path, os.path.dirname(cq.store_path)):
                with contextlib.suppress(OSError):  # not empty (a stray file): left as it is
                    os.rmdir(path)
        return len(doomed)

    def flush(self, least_pages: int) -> bool:
        """Flush each queue with `least_pages` dirty (0: any). With many queues and 0, each
        file's written position is taken as flushed and then one syncfs makes it so: 5,000
        queues with a little written took 0.6-3.6 s of per-file fdatasyncs, and cost a
        28% slower put loop beside it when done every 5 s; one syncfs takes about 75 ms."""
        queues = list(self)
        whole_fs = least_pages == 0 and len(queues) >= SYNC_FILE_SYSTEM_AT
        flushed = False
        for cq in queues:
            flushed = cq.flush(least_pages, no_sync if whole_fs else os.fdatasync) or flushed
        if whole_fs and flushed:
            sync_file_system(self.root_dir)
        return flushed

    def close(self) -> None:
        for cq in self:
            cq.close()
