"""With `warmCommitLogFiles` (the default), commitlog files are brought into the page
cache ahead of the writer, in the background: a store's first file before its first put,
each next file as it is prepared, and the rest of the file a restarted store goes on
writing; never more than `warm_ahead` bytes ahead of the writer, and only while the writer
keeps up `warmCommitLogMinMBPerSecond` (0 in the tests of the mechanics). Checked on real files with
mincore(2) (`page_cache`: a read with RWF_NOWAIT cannot tell here, since a preallocated
range reads as zeros without the disk whether cached or not)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rmqpy.store.allocate import AllocateMappedFileService, WritePace
from rmqpy.store.fileio import create_preallocated, read_through, warm_page_cache
from rmqpy.store.mapped_file import file_name
from rmqpy.store.message import Message
from rmqpy.store.message_store import MessageStore
from tests.store import page_cache

Open = Callable[..., MessageStore]
FILE = 1024 * 1024
PAGE = page_cache.PAGE


def msg(i: int) -> Message:
    return Message("TopicA", b"x" * 1000, 0, {"KEYS": f"k{i}"})


def cached_pages(fd: int, start: int = 0) -> list[bool]:
    """For each page from `start` to the end of a file of FILE bytes: is it cached?"""
    return page_cache.cached_pages(fd, start, FILE)


def wait_warmed(allocator: AllocateMappedFileService, total: int) -> None:
    deadline = time.monotonic() + 10
    while allocator.warmed_bytes < total:
        assert time.monotonic() < deadline, f"warmed {allocator.warmed_bytes} of {total}"
        time.sleep(0.01)


def uncached_file(path: Path) -> int:
    """A fresh preallocated file, or a skip where its pages are cached anyway (tmpfs)."""
    fd = create_preallocated(str(path), FILE)
    if any(cached_pages(fd)):
        os.close(fd)
        pytest.skip("this filesystem keeps every page cached (tmpfs)")
    return fd


def test_warming_caches_the_range_and_leaves_the_file_zero(tmp_path: Path) -> None:
    fd = uncached_file(tmp_path / "00000000000000000000")
    try:
        warm_page_cache(fd, 3 * PAGE + 100, FILE - 3 * PAGE - 100)
        assert all(cached_pages(fd, 3 * PAGE))
        assert os.pread(fd, FILE, 0) == bytes(FILE)
    finally:
        os.close(fd)


def test_reading_through_caches_the_range_too(tmp_path: Path) -> None:
    """The way kernels without MADV_POPULATE_READ (before 5.14) get warmed."""
    fd = uncached_file(tmp_path / "00000000000000000000")
    try:
        read_through(fd, PAGE, FILE - PAGE)
        assert all(cached_pages(fd, PAGE))
    finally:
        os.close(fd)


def test_a_new_store_has_its_first_file_warm_and_the_next_one_ready(open_store: Open) -> None:
    store = open_store(mapped_file_size_commitlog=FILE, warm_commitlog_min_mb_per_s=0)
    allocator = store.commitlog.allocator
    wait_warmed(allocator, FILE)  # before any put
    store.put_message(msg(0))
    first = store.commitlog.queue.files[0]
    assert all(cached_pages(first.fd))
    wait_warmed(allocator, 2 * FILE)  # the next file, prepared when the first was taken
    ahead = Path(first.path).with_name(file_name(FILE))
    fd = os.open(ahead, os.O_RDONLY)
    try:  # looked at once: clean pages left alone can be reclaimed soon after (on this VM)
        assert all(cached_pages(fd))
    finally:
        os.close(fd)
    while store.commitlog.queue.files[-1] is first:
        store.put_message(msg(1))
    assert store.commitlog.queue.files[-1].path == str(ahead)


def test_without_warming_the_pages_ahead_stay_out_of_the_cache(open_store: Open) -> None:
    """The control: the pages found cached above are there because they were warmed."""
    store = open_store(mapped_file_size_commitlog=FILE, warm_commitlog_files=False)
    store.put_message(msg(0))
    first = store.commitlog.queue.files[0]
    if all(cached_pages(first.fd)):
        pytest.skip("this filesystem keeps every page cached (tmpfs)")
    assert store.commitlog.allocator.warmed_bytes == 0
    assert cached_pages(first.fd)[0] and not any(cached_pages(first.fd, 64 * 1024))


def test_a_restarted_store_warms_the_rest_of_the_file_it_goes_on_writing(
    open_store: Open,
) -> None:
    """(Which pages end up cached is not checked here: the kernel's readahead during
    recovery may cache the rest of a small file anyway, 8 MiB of it on our machines.)"""
    store = open_store(mapped_file_size_commitlog=FILE, warm_commitlog_min_mb_per_s=0)
    for i in range(100):
        store.put_message(msg(i))
    store.shutdown()
    store = open_store(mapped_file_size_commitlog=FILE, warm_commitlog_min_mb_per_s=0)
    last = store.commitlog.queue.files[-1]
    assert last.wrote_position > 100 * 1000
    wait_warmed(store.commitlog.allocator, FILE - last.wrote_position)
    time.sleep(0.1)  # nothing more comes: the next file is prepared only when one is taken
    assert store.commitlog.allocator.warmed_bytes == FILE - last.wrote_position
    assert store.get_message("TopicA", 0, 0, 32).count == 32  # the data is untouched


def test_warming_follows_the_writer_no_further_than_warm_ahead(tmp_path: Path) -> None:
    """(The pages past the warmed range are not checked: the kernel's readahead caches
    some of them anyway. Those warmed are checked at once: clean pages left alone can be
    reclaimed soon after, as this VM's proactive reclaim now and then does.)"""
    big, ahead, step = 8 * FILE, FILE, FILE // 4
    allocator = AllocateMappedFileService(big, warm_ahead=ahead, warm_step=step)
    first, second = str(tmp_path / "00000000000000000000"), str(tmp_path / "00000000000008388608")
    try:
        allocator.prepare(first)
        mapped = allocator.take(first, second)
        wait_warmed(allocator, ahead)
        assert all(page_cache.cached_pages(mapped.fd, 0, ahead))
        time.sleep(0.3)  # nothing is written: the warmer waits for the writer
        assert allocator.warmed_bytes == ahead
        mapped.append(b"m" * (3 * FILE))  # the writer moves 3 MiB on
        wait_warmed(allocator, 4 * FILE)
        assert all(page_cache.cached_pages(mapped.fd, 3 * FILE, 4 * FILE))
        time.sleep(0.3)
        assert allocator.warmed_bytes == 4 * FILE
    finally:
        allocator.shutdown()


def test_a_warmer_ahead_looks_again_when_the_writer_will_have_used_a_step() -> None:
    """Each look takes the GIL from the event loop: a slow writer is looked at rarely."""
    mib = 1024 * 1024
    allocator = AllocateMappedFileService(64 * mib, warm_ahead=16 * mib, warm_step=4 * mib)
    try:
        at = 20 * mib  # 16 MiB ahead of a writer now at 4 MiB
        # 1 MiB in the last 10 ms: 4 MiB of lead to spare take 40 ms
        assert allocator._next_wait(0.01, at, 3 * mib, 4 * mib, 0.01) == pytest.approx(0.04)
        # 1 MiB a second: the longest wait; 10 GB a second: the shortest
        assert allocator._next_wait(0.01, at, 3 * mib, 4 * mib, 1.0) == 0.1
        assert allocator._next_wait(0.01, at, 3 * mib, 4 * mib, 1e-7) == 0.005
        # a writer standing still: twice as long each time, up to the longest
        assert allocator._next_wait(0.01, at, 4 * mib, 4 * mib, 0.01) == 0.02
        assert allocator._next_wait(0.08, at, 4 * mib, 4 * mib, 0.08) == 0.1
    finally:
        allocator.shutdown()


def test_the_writers_pace_is_measured_over_whole_windows() -> None:
    now = [0.0]
    pace = WritePace(window_s=0.5, clock=lambda: now[0])
    assert pace.sample(1000) == 0  # the first window begins
    now[0] = 0.2
    assert pace.sample(5000) == 0  # not a whole window yet
    now[0] = 0.5
    assert pace.sample(11_000) == 20_000  # 10,000 bytes in half a second
    now[0] = 1.5
    assert pace.sample(11_000) == 0  # a writer that stopped
    now[0] = 1.7
    assert pace.sample(100) == 0  # the position went back (a store started over): anew
    now[0] = 2.2
    assert pace.sample(50_100) == pytest.approx(100_000)


def test_a_writer_slower_than_the_least_rate_is_not_warmed_for(tmp_path: Path) -> None:
    """A writer standing still gets nothing warmed; once it goes faster than the least
    rate, warming follows it as before."""
    big, ahead, step = 8 * FILE, FILE, FILE // 4
    position = [0]
    allocator = AllocateMappedFileService(
        big,
        warm_ahead=ahead,
        warm_step=step,
        min_warm_rate=4 * FILE,  # 4 MiB a second
        writer_position=lambda: position[0],
    )
    first, second = str(tmp_path / "00000000000000000000"), str(tmp_path / "00000000000008388608")
    try:
        allocator.prepare(first)
        allocator.take(first, second)
        time.sleep(1.2)  # two whole windows of a writer standing still
        assert allocator.warmed_bytes == 0
        deadline = time.monotonic() + 10
        while allocator.warmed_bytes < ahead:  # a writer at about 20 MiB a second
            assert time.monotonic() < deadline, f"warmed {allocator.warmed_bytes} of {ahead}"
            position[0] += FILE
            time.sleep(0.05)
        assert allocator.pace.bytes_per_s >= 4 * FILE
    finally:
        allocator.shutdown()
