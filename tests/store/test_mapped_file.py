"""A store file read without a mapping (a consume queue's) keeps its newest appended bytes
for hot readers: what they read from there must always be what the file holds, through
overwrites and truncation."""

from __future__ import annotations

import os
from pathlib import Path

from rmqpy.store.mapped_file import RECENT_BYTES, MappedFile


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
