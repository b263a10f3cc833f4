"""One fixed-size store file named by its start offset (RocketMQ `DefaultMappedFile`).

Writes go through `os.pwrite` at the write position and reads come from a read-only shared
mmap of the same file, which Linux keeps coherent through the page cache. pwrite rather than
stores into a writable mapping because:

* a full disk surfaces as an `OSError` instead of SIGBUS on a page fault. A file is either
  preallocated whole with `posix_fallocate` (`warmMapedFileEnable`), so a full disk surfaces
  when it is created, or sparse, as RocketMQ's are, with its blocks reserved `reserve_step`
  ahead of the writer: a full disk then refuses the write that needed more room
  (NoSpaceError) before any byte of it is written;
* after each fsync a writable mapping takes a write-protect fault per page rewritten, which
  made SYNC_FLUSH 1.3-3x slower on our machines (measured when the store was designed).

A file reserved whole whose appends are small and many (a consume queue's: one append a
queue a dispatch round) may store them through a shared writable mapping instead
(`append_mapped`), as RocketMQ does, once all its blocks are reserved, so no append can meet a
full disk: a write-protect fault a page after each fsync costs far less than a `pwrite` an
append. The mapping is made through libc and holds no descriptor.

Positions: `wrote_position` (bytes appended and visible to readers) and `flushed_position`
(bytes known durable). Cold reads use `os.pread`, which releases the GIL, hot reads slice the
mmap. No memoryview of the mmap ever leaves this class. A file read without a mapping keeps
the last RECENT_BYTES it appended: hot pulls read a consume queue's newest entries from
there, without a syscall.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from collections.abc import Callable

from rmqpy.store.fileio import (
    BlockReserve,
    create_preallocated,
    in_page_cache,
    map_for_writes,
    pwrite_all,
    reserve_step,
    unmap,
)
from rmqpy.store.layout import PAGE_SIZE

FILE_NAME_WIDTH = 20
RECENT_BYTES = 4096  # 204 consume-queue entries
# The kept bytes grow in place by this much before they start again from the newest
# RECENT_BYTES: an append copies its own bytes, not all that is kept.
RECENT_SLACK = 1024


class StoreFileError(OSError):
    """A store file that cannot be used: wrong size, bad name, or an I/O failure."""


def file_name(offset: int) -> str:
    """The 20-digit zero-padded start offset RocketMQ names its files with."""
    return str(offset).zfill(FILE_NAME_WIDTH)


class MappedFile:
    """A store file of exactly `file_size` bytes starting at logical offset `file_from_offset`."""

    def __init__(
        self,
        path: str,
        file_size: int,
        *,
        create: bool,
        mapped: bool = True,
        sparse: bool = False,
        headroom: int = 0,
        sync_dir: bool = True,
        append_mapped: bool = False,
    ) -> None:
        self.path = path
        self.file_size = file_size
        name = os.path.basename(path)
        if not name.isdigit():
            raise StoreFileError(f"{path}: a store file is named by its 20-digit start offset")
        self.file_from_offset = int(name)
        step = reserve_step(file_size) if sparse else 0
        if create:
            self.fd = create_preallocated(path, file_size, step if sparse else None, sync_dir)
        else:
            self.fd = os.open(path, os.O_RDWR)
        reserved = (step if create else 0) if sparse else file_size
        self.blocks = BlockReserve(self.fd, file_size, step, reserved, headroom)
        try:
            if not create:
                actual = os.fstat(self.fd).st_size
                if actual != file_size:
                    raise StoreFileError(
                        f"{path} is {actual} bytes but the configured file size is {file_size}"
                    )
            # Python's mmap keeps a descriptor of its own: a file read with `pread` only
            # (consume queues: small reads, and thousands of files) holds one, not two.
            self._mm = (
                mmap.mmap(self.fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ) if mapped else None
            )
        except BaseException:
            os.close(self.fd)
            if create:
                os.unlink(path)
            raise
        self.wrote_position = 0
        self.flushed_position = 0
        # With `append_mapped`, appends are stored through a shared writable mapping of the
        # file (`map_for_writes`, made at the first append, undone once the file is full):
        # no syscall each, where a consume queue took one a queue a dispatch round. Only
        # the writer appends, so only the writer maps (and unmaps, or `close` once no
        # writer is left). 0: appends `pwrite`.
        self._append_at = 0
        self._append_mapped = append_mapped
        self._mapping_lock = threading.Lock()  # (not the flush's: held through an fsync)
        # (file position, bytes): the newest appended bytes, for a file without a mapping;
        # grown in place or replaced whole (`_keep_recent`), so a reader on another thread
        # takes the pair in one read and what it holds never changes under it.
        self._recent: tuple[int, bytearray] = (0, bytearray())
        # Store time of the newest record written / flushed (checkpoint's physicMsgTimestamp).
        self.store_timestamp = 0
        self.flushed_store_timestamp = 0
        self._flush_lock = threading.Lock()
        self.closed = False
        self.deleted = False

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, wrote={self.wrote_position})"

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def free_space(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Write `data` at the write position; the caller checked it fits."""
        position = self.wrote_position
        end = position + len(data)
        if end > self.file_size:
            raise StoreFileError(f"{self.path}: append of {len(data)} bytes past the end")
        if end > self.blocks.reserved:  # (`reserve_for`'s own first test, without a call)
            self.reserve_for(len(data))  # NoSpaceError: nothing written
        if self._append_mapped and not self._append_at:
            self._map_appends()
        if self._append_at:
            ctypes.memmove(self._append_at + position, bytes(data), len(data))
        elif os.pwrite(self.fd, data, position) != len(data):
            pwrite_all(self.fd, data, position)  # a short write: again, whole
        if self._mm is None:
            self._keep_recent(position, data)
        self.wrote_position = end
        if end == self.file_size and self._append_at:
            self._unmap_appends()  # full: no more appends

    def _map_appends(self) -> None:
        """Map the file for the appends to come, or leave them to `pwrite` for good where
        it cannot be (see `map_for_writes`)."""
        with self._mapping_lock:
            if not self.closed:
                self._append_at = map_for_writes(self.fd, self.file_size) or 0
            self._append_mapped = bool(self._append_at)

    def _unmap_appends(self) -> None:
        """Undo `_map_appends` once (the writer, the file full, or `close`)."""
        with self._mapping_lock:
            addr, self._append_at, self._append_mapped = self._append_at, 0, False
            if addr:
                unmap(addr, self.file_size)

    def reserve_for(self, size: int) -> None:
        """Reserve the blocks the next `size` bytes of appends need (`BlockReserve.cover`),
        so none of them meets a full disk; NoSpaceError, with nothing changed, when the disk
        has no room. A file reserved whole has nothing to do."""
        self.blocks.cover(self.wrote_position, self.wrote_position + size)

    def _keep_recent(self, position: int, data: bytes | bytearray | memoryview) -> None:
        """Keep the newest bytes appended: `_recent` is (the position of the first, the last
        RECENT_BYTES or more appended in a row). They grow in place, by up to RECENT_SLACK
        bytes (a reader holding them only finds bytes added past what it asked for), then
        start again, in a new object, from the newest RECENT_BYTES."""
        start, kept = self._recent
        follows = start + len(kept) == position
        if follows and len(kept) + len(data) <= RECENT_BYTES + RECENT_SLACK:
            kept += data  # (in place)
            return
        kept = bytearray(((kept if follows else b"") + data)[-RECENT_BYTES:])
        self._recent = (position + len(data) - len(kept), kept)

    def write_at(self, position: int, data: bytes | bytearray) -> None:
        """Overwrite bytes below the write position (recovery zeroes torn tails with it)."""
        self._recent = (0, bytearray())
        pwrite_all(self.fd, data, position)

    def read(self, position: int, size: int) -> bytes:
        """Bytes [position, position+size) from the mapping (hot path: no syscall), or with
        `pread` for a file that has none."""
        if self._mm is None:
            start, kept = self._recent
            at = position - start
            if at >= 0 and at + size <= len(kept):
                return bytes(kept[at : at + size])
            return os.pread(self.fd, max(min(size, self.file_size - position), 0), position)
        return self._mm[position : position + size]

    @property
    def mapping(self) -> mmap.mmap:
        """The read-only mapping itself, for readers that slice many records in a row."""
        if self._mm is None:
            raise StoreFileError(f"{self.path} is read without a mapping")
        return self._mm

    def pread(self, position: int, size: int) -> bytes:
        """The same bytes with `os.pread` (cold data: releases the GIL while the disk works)."""
        return os.pread(self.fd, size, position)

    def in_memory(self, position: int) -> bool:
        """Whether reading the byte at `position` would not wait for the disk: it is not
        flushed yet (a dirty page stays in the page cache until written back), kept from the
        last appends, or the kernel says its page is cached (a syscall)."""
        if position >= self.flushed_position:
            return True
        start, kept = self._recent
        return start <= position < start + len(kept) or in_page_cache(self.fd, position)

    def flush(self, least_pages: int = 0, sync: Callable[[int], None] = os.fdatasync) -> bool:
        """fdatasync when enough is dirty (RocketMQ `isAbleToFlush`); True if it flushed.
        A caller that makes the whole file system durable right after passes `sync=no_sync`."""
        with self._flush_lock:
            wrote, flushed = self.wrote_position, self.flushed_position
            if wrote <= flushed or self.closed:  # closed: deleted while a flush service looked
                return False
            full = wrote >= self.file_size
            if (
                not full
                and least_pages > 0
                and wrote // PAGE_SIZE - flushed // PAGE_SIZE < least_pages
            ):
                return False
            stamp = self.store_timestamp
            sync(self.fd)
            self.flushed_position = wrote
            self.flushed_store_timestamp = stamp
            return True

    def set_positions(self, position: int) -> None:
        self._recent = (0, bytearray())
        self.wrote_position = position
        self.flushed_position = position

    def mtime(self) -> float:
        return os.fstat(self.fd).st_mtime

    def close(self) -> None:
        """Idempotent; waits for a flush in progress, so none syncs a descriptor closed
        under it (or, once its number is reused, another file)."""
        with self._flush_lock:
            if self.closed:
                return
            self.closed = True
            if self._mm is not None:
                self._mm.close()
            self._unmap_appends()
            os.close(self.fd)

    def destroy(self) -> None:
        """Close and delete the file (expiry, truncation, a topic's deletion), once: when two
        deleters picked the same file, the second does nothing, so it cannot remove a newer
        file made at the same path meanwhile (a deleted topic's queue, sent to again)."""
        with self._flush_lock:
            if self.deleted:
                return
            self.deleted = True
        self.close()
        os.unlink(self.path)
