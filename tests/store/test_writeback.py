"""Between ASYNC_FLUSH flushes the commitlog is handed to the disk as it is written, a piece
at a time, so that a flush finds little left to write and never holds a core for long."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from rmqpy.config.store_config import FlushDiskType
from rmqpy.store.mapped_file_queue import MappedFileQueue
from rmqpy.store.message import Message
from rmqpy.store.message_store import MessageStore
from tests.store.page_cache import PAGE, dirty_pages

Open = Callable[..., MessageStore]
KIB = 1024


def write_commitlog(store: MessageStore, size: int) -> int:
    """Put 1 KiB messages until `size` bytes of commitlog are written: where it ends."""
    while store.commitlog.max_offset() < size:
        assert store.put_message(Message("TopicA", b"x" * KIB, 0, {"TAGS": "t"})).ok
    return store.commitlog.max_offset()


def dirty_in(store: MessageStore, end: int) -> int:
    """Dirty (or still being written) pages of the commitlog's whole pages below `end`."""
    files = store.commitlog.queue.files
    return sum(
        dirty_pages(f.fd, 0, min(f.file_size, end - f.file_from_offset) // PAGE * PAGE)
        for f in files
        if end > f.file_from_offset
    )


def settles(check: Callable[[], bool], within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_commitlog_is_written_back_before_its_flush_comes(open_store: Open) -> None:
    store = open_store(
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
        mapped_file_size_commitlog=1024 * KIB,
        flush_interval_commitlog_ms=60_000,  # no flush while the test runs
        flush_commitlog_thorough_interval_ms=60_000,
        commitlog_writeback_kb=64,
    )
    end = write_commitlog(store, 1536 * KIB)  # across two files
    queue = store.commitlog.queue
    # All but the last whole pages short of the 64 KiB step are handed over (those wait
    # for more writes, or for the flush) ...
    assert settles(lambda: queue.writeback_where > end // PAGE * PAGE - 64 * KIB)
    # ... and reach the disk without a flush.
    assert settles(lambda: dirty_in(store, queue.writeback_where) == 0)
    assert dirty_in(store, end) <= 64 * KIB // PAGE
    assert queue.flushed_where == 0


def test_without_it_the_pages_wait_for_the_flush(open_store: Open) -> None:
    store = open_store(
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
        mapped_file_size_commitlog=1024 * KIB,
        flush_interval_commitlog_ms=60_000,
        flush_commitlog_thorough_interval_ms=60_000,
        commitlog_writeback_kb=0,
    )
    end = write_commitlog(store, 512 * KIB)
    time.sleep(0.5)
    assert dirty_in(store, end) > 0
    assert store.commitlog.queue.writeback_where == 0


def test_writeback_starts_at_whole_pages_once_enough_is_written(tmp_path: Path) -> None:
    queue = MappedFileQueue(str(tmp_path / "log"), 64 * KIB)
    os.makedirs(queue.store_path)
    try:
        first = queue.get_last_mapped_file()
        assert first is not None
        first.append(b"a" * (10 * KIB + 100))
        assert queue.start_writeback(16 * KIB) == 0  # not enough yet
        assert queue.start_writeback(4 * KIB) == 8 * KIB  # whole pages only
        assert queue.start_writeback(1) == 0  # the page being appended to is left alone
        first.append(b"b" * (first.file_size - first.wrote_position))
        second = queue.get_last_mapped_file()
        assert second is not None and second is not first
        second.append(b"c" * (5 * KIB))
        # from where it stopped, across the end of the first file into the second
        assert queue.start_writeback(1) == 64 * KIB - 8 * KIB + 4 * KIB
        assert queue.writeback_where == 68 * KIB
        queue.truncate_dirty_files(66 * KIB)
        assert queue.writeback_where == 66 * KIB
        assert settles(lambda: dirty_pages(first.fd, 0, first.file_size) == 0)
    finally:
        queue.close()
