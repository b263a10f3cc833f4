"""An ordered run of equal-size store files in one directory (RocketMQ `MappedFileQueue`).

File N starts at logical offset `first.file_from_offset + N * file_size`; every name is its
start offset. The list is replaced, never mutated in place, so readers take a snapshot
(`self.files`) without a lock while the writer appends and the expiry service deletes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from rmqpy.store.fileio import (
    drop_derived_files,
    fsync_dir,
    remove_stray_tmp_files,
    start_writeback,
)
from rmqpy.store.layout import PAGE_SIZE
from rmqpy.store.mapped_file import MappedFile, StoreFileError, file_name

Allocator = Callable[[str, str], MappedFile]


class MappedFileQueue:
    def __init__(
        self,
        store_path: str,
        mapped_file_size: int,
        allocator: Allocator | None = None,
        *,
        mapped: bool = True,
        sparse: bool = False,
        headroom: int = 0,
        defer_dir_sync: bool = False,
        append_mapped: bool = False,
    ) -> None:
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.mapped = mapped  # False: files read with pread, one descriptor each
        self.sparse = sparse  # files reserve their blocks ahead of the writer (`MappedFile`)
        self.headroom = headroom  # and leave this much of the disk free when they do
        self.append_mapped = append_mapped  # appends stored through a mapping (`MappedFile`)
        self._allocator = allocator
        # With `defer_dir_sync`, a file created here has its name made durable by the next
        # `flush` (the flush thread's), before any of its bytes are, instead of by the
        # writer's thread as it creates the file: the directory's fsync waits on the file
        # system's journal, and took over 25 ms on the event loop at times under load.
        self.defer_dir_sync = defer_dir_sync
        self._dir_unsynced = False
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.writeback_where = 0  # writeback started below here (`start_writeback`)
        self._lock = threading.Lock()

    # --- loading ------------------------------------------------------------------------------
    def load(self, derived: bool = False) -> int:
        """Open every file of the directory, each taken as full until recovery says otherwise.

        A file of the wrong size, or one that does not follow its predecessor, raises
        StoreFileError; with `derived` (consume queues: rebuilt from the commitlog) it is
        deleted instead, with every file after it, and the count of them returned."""
        if not os.path.isdir(self.store_path):
            return 0
        remove_stray_tmp_files(self.store_path)
        names = sorted(n for n in os.listdir(self.store_path) if n.isdigit())
        files: list[MappedFile] = []
        for at, name in enumerate(names):
            path = os.path.join(self.store_path, name)
            try:
                mapped = MappedFile(
                    path, self.mapped_file_size, create=False, mapped=self.mapped,
                    sparse=self.sparse, headroom=self.headroom, append_mapped=self.append_mapped,
                )  # fmt: skip
                if files and mapped.file_from_offset != files[-1].end_offset:
                    mapped.close()
                    raise StoreFileError(
                        f"{self.store_path}: files {files[-1].path} and {path} are not contiguous"
                    )
            except StoreFileError as exc:
                if not derived:
                    for f in files:
                        f.close()
                    raise
                self.files = files
                return drop_derived_files(self.store_path, names[at:], str(exc))
            mapped.set_positions(self.mapped_file_size)
            files.append(mapped)
        self.files = files
        return 0

    # --- lookup ---------------------------------------------------------------------------------
    def first(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    def last(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def get_last_mapped_file(self, start_offset: int = 0, create: bool = True) -> MappedFile | None:
        """The file to write into: the last one, or a new one when there is none or it is full."""
        last = self.last()
        if last is not None and not last.is_full():
            return last
        if not create:
            return last
        create_offset = (
            last.end_offset
            if last is not None
            else start_offset - start_offset % self.mapped_file_size
        )
        return self.create_file(create_offset)

    def create_file(self, offset: int) -> MappedFile:
        os.makedirs(self.store_path, exist_ok=True)
        path = os.path.join(self.store_path, file_name(offset))
        if self._allocator is not None:
            next_path = os.path.join(self.store_path, file_name(offset + self.mapped_file_size))
            mapped = self._allocator(path, next_path)
        else:
            mapped = MappedFile(
                path, self.mapped_file_size, create=True, mapped=self.mapped,
                sparse=self.sparse, headroom=self.headroom, sync_dir=not self.defer_dir_sync,
                append_mapped=self.append_mapped,
            )  # fmt: skip
            if self.defer_dir_sync:
                self._dir_unsynced = True
        with self._lock:
            self.files = [*self.files, mapped]
        return mapped

    def find_mapped_file_by_offset(self, offset: int) -> MappedFile | None:
        files = self.files
        if not files or offset < files[0].file_from_offset:
            return None
        index = (offset - files[0].file_from_offset) // self.mapped_file_size
        if index >= len(files):
            return None
        return files[index]

    def min_offset(self) -> int:
        files = self.files  # (`first`, inline: every dispatch round asks)
        return files[0].file_from_offset if files else 0

    def max_offset(self) -> int:
        """One past the last byte written (RocketMQ `getMaxOffset`)."""
        files = self.files  # (`last`, inline: every put, round and parked pull asks)
        if not files:
            return 0
        last = files[-1]
        return last.file_from_offset + last.wrote_position

    # --- flush ---------------------------------------------------------------------------------
    def flush(self, least_pages: int = 0, sync: Callable[[int], None] = os.fdatasync) -> bool:
        """Flush from `flushed_where` onward; with 0 pages, everything written. True if any.
        Files created since the last flush have their names made durable first."""
        if self._dir_unsynced:
            self._dir_unsynced = False  # before: a file created meanwhile sets it again
            try:
                fsync_dir(self.store_path)
            except OSError:
                self._dir_unsynced = True
                raise
        flushed_any = False
        while True:
            mapped = self.find_mapped_file_by_offset(self.flushed_where)
            if mapped is None:
                first = self.first()
                if first is None or self.flushed_where >= first.file_from_offset:
                    return flushed_any
                mapped = first
            if mapped.flush(least_pages, sync):
                flushed_any = True
            where = mapped.file_from_offset + mapped.flushed_position
            moved = where > self.flushed_where
            self.flushed_where = max(self.flushed_where, where)
            if not (mapped.is_full() and mapped.flushed_position >= mapped.file_size and moved):
                return flushed_any

    def start_writeback(self, least_bytes: int) -> int:
        """Start writing what was written since the last flush or writeback to the disk, in
        whole pages (the page being appended to is left alone), once there are at least
        `least_bytes` of them, without waiting (`fileio.start_writeback`): the next flush
        then finds that much less to do at once. How many bytes it started."""
        files = self.files
        if not files:
            return 0
        first, last = files[0], files[-1]
        start = max(self.writeback_where, self.flushed_where, first.file_from_offset)
        end = last.file_from_offset + last.wrote_position
        end -= end % PAGE_SIZE
        if end - start < least_bytes:
            return 0
        at = start
        while at < end:
            mapped = self.find_mapped_file_by_offset(at)
            if mapped is None:
                break
            upto = min(end, mapped.end_offset)
            start_writeback(mapped.fd, at - mapped.file_from_offset, upto - at)
            at = upto
        self.writeback_where = at
        return at - start

    def flushed_store_timestamp(self) -> int:
        mapped = self.find_mapped_file_by_offset(max(self.flushed_where - 1, 0))
        return mapped.flushed_store_timestamp if mapped is not None else 0

    # --- truncation and deletion -------------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> int:
        """Drop everything at and after `offset`; returns how many bytes were cut."""
        cut = 0
        keep: list[MappedFile] = []
        doomed: list[MappedFile] = []
        for mapped in self.files:
            if mapped.end_offset <= offset:
                keep.append(mapped)
            elif mapped.file_from_offset < offset:
                pos = offset - mapped.file_from_offset
                cut += max(mapped.wrote_position - pos, 0)
                mapped.set_positions(pos)
                keep.append(mapped)
            else:
                cut += mapped.wrote_position
                doomed.append(mapped)
        with self._lock:
            self.files = keep
        for mapped in doomed:
            mapped.destroy()
        self.flushed_where = min(self.flushed_where, offset)
        self.writeback_where = min(self.writeback_where, offset)
        return cut

    def delete_files(self, doomed: list[MappedFile]) -> None:
        ids = {id(f) for f in doomed}
        with self._lock:
            self.files = [f for f in self.files if id(f) not in ids]
        for mapped in doomed:
            mapped.destroy()

    def close(self) -> None:
        for mapped in self.files:
            mapped.close()

    def total_bytes(self) -> int:
        return len(self.files) * self.mapped_file_size
