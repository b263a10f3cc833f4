"""A store file read without a mapping (a consume queue's) keeps its newest appended bytes
for hot readers: what they read from there must always be what the file holds, through
overwrites and truncation. What it no longer keeps, the kernel is asked about."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmqpy.store import fileio
from rmqpy.store.fileio import in_page_cache
from rmqpy.store.mapped_file import RECENT_BYTES, RECENT_SLACK, MappedFile
from tests.store.page_cache import PAGE, cached_pages, drop_pages, store_tells_pages_apart


def on_disk(mapped: MappedFile, position: int, size: int) -> bytes:
    return os.pread(mapped.fd, size, position)


def test_reads_of_the_newest_bytes_match_the_file_through_overwrites_and_truncation(
    tmp_path: Path,
) -> None:
    mapped = MappedFile(
        str(tmp_path / "00000000000000000000"), 64 * 1024, create=True, mapped=False
    )
    try:
        for n in range(600):  # more than RECENT_BYTES in all: the oldest drop out of memory
            mapped.append(n.to_bytes(4, "big") * 5)
        end = mapped.wrote_position
        for position in (0, end - RECENT_BYTES - 20, end - RECENT_BYTES, end - 40, end - 20):
            assert mapped.read(position, 20) == on_disk(mapped, position, 20)
        assert mapped.in_memory(end - 20)  # not flushed yet: a dirty page
        mapped.flush()
        assert mapped.in_memory(end - 20)  # flushed, and still kept from the last appends
        mapped.write_at(end - 20, b"\xff" * 20)  # recovery zeroing a torn tail, say
        assert mapped.read(end - 20, 20) == b"\xff" * 20
        mapped.append(b"A" * 20)
        mapped.set_positions(end - 40)  # cut back, then written again from there
        mapped.append(b"B" * 40)
        assert mapped.read(end - 40, 60) == on_disk(mapped, end - 40, 60)
        assert mapped.read(end - 40, 40) == b"B" * 40
    finally:
        mapped.close()


def test_newest_bytes_handed_to_a_reader_stay_as_they_were_while_appends_go_on(
    tmp_path: Path,
) -> None:
    """The kept bytes grow in place between fresh starts: a reader holding them may find
    bytes added past its range, never a byte it read changed; and they always hold at
    least the newest RECENT_BYTES, at most RECENT_SLACK more."""
    mapped = MappedFile(
        str(tmp_path / "00000000000000000000"), 256 * 1024, create=True, mapped=False
    )
    try:
        held: list[tuple[int, bytearray, bytes]] = []
        for n in range(3000):
            mapped.append(bytes([n % 251]) * (20 * (1 + n % 7)))
            start, kept = mapped._recent
            assert min(RECENT_BYTES, mapped.wrote_position) <= len(kept)
            assert len(kept) <= RECENT_BYTES + RECENT_SLACK
            assert start + len(kept) == mapped.wrote_position
            assert bytes(kept) == on_disk(mapped, start, len(kept))
            if n % 97 == 0:
                held.append((start, kept, bytes(kept)))
        for start, kept, then in held:
            assert bytes(kept[: len(then)]) == then == on_disk(mapped, start, len(then))
    finally:
        mapped.close()


def test_a_page_dropped_from_the_page_cache_is_told_apart_without_reading_it_in(
    tmp_path: Path,
) -> None:
    """`in_memory` asks the kernel about a flushed page the file no longer keeps; asking
    must not read the page in (a read on the event loop would wait for the disk)."""
    store_tells_pages_apart()
    mapped = MappedFile(str(tmp_path / "00000000000000000000"), 64 * 1024, create=True)
    try:
        for n in range(3000):  # past RECENT_BYTES: the first page is only the kernel's
            mapped.append(n.to_bytes(4, "big") * 5)
        mapped.flush()
        assert mapped.read(0, 20) == on_disk(mapped, 0, 20)
        assert mapped.in_memory(0)  # just read
        if not drop_pages([mapped.fd], mapped.fd, PAGE, mappings=[mapped.mapping]):
            pytest.skip("this filesystem keeps the pages (tmpfs)")
        assert not mapped.in_memory(0)
        assert cached_pages(mapped.fd, 0, PAGE) == [False]  # still on the disk only
        fd = mapped.fd
    finally:
        mapped.close()
    assert not in_page_cache(fd, 0)  # closed (by expiry, say): nothing to read on the loop


def test_without_cachestat_a_read_with_rwf_nowait_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a kernel before Linux 6.5 the store asks with a one-byte read that may not wait."""
    if not hasattr(os, "RWF_NOWAIT"):
        pytest.skip("no RWF_NOWAIT here")
    monkeypatch.setattr(fileio, "PAGE_CACHE_PROBE", "nowait")
    path = tmp_path / "file"
    path.write_bytes(b"x" * PAGE)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, 1, 0) == b"x"
        assert in_page_cache(fd, 0)  # a page just read is cached
    finally:
        os.close(fd)
    assert not in_page_cache(fd, 0)


def test_appends_stored_through_a_mapping_read_back_as_written_ones(tmp_path: Path) -> None:
    """A consume queue's file takes its appends through a shared mapping: the file, the
    newest bytes it keeps for readers and its positions end as those of a file appended
    with pwrite; the mapping goes once the file is full, and the bytes stay."""
    size = 64 * 1024
    (tmp_path / "w").mkdir()
    path, twin = tmp_path / "00000000000000000000", tmp_path / "w" / "00000000000000000000"
    mapped = MappedFile(str(path), size, create=True, mapped=False, append_mapped=True)
    written = MappedFile(str(twin), size, create=True, mapped=False)
    try:
        n = 0
        while mapped.wrote_position < size:
            data = bytes([n % 251]) * min(20 * (1 + n % 300), size - mapped.wrote_position)
            mapped.append(data)
            written.append(data)
            if n == 0:
                assert mapped._append_at  # mapped at the first append
            assert (mapped.wrote_position, mapped._recent) == (
                written.wrote_position,
                written._recent,
            )
            n += 1
        assert not mapped._append_at  # full: no more appends, no mapping
        assert on_disk(mapped, 0, size) == on_disk(written, 0, size)
        assert mapped.flush() and mapped.flushed_position == size
    finally:
        mapped.close()
        written.close()
    again = MappedFile(str(path), size, create=False, mapped=False)
    try:
        assert on_disk(again, 0, size) == twin.read_bytes()
    finally:
        again.close()
