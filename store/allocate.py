"""Prepares the next commitlog file before it is needed (RocketMQ `AllocateMappedFileService`).

`take(path)` returns a file for `path` - the one prepared in the background if there is one,
else it creates it on the spot - and then starts preparing the file after it. Preparation
means create + posix_fallocate + mmap, so the put path never waits for block allocation. A
preparation that failed (disk full) is retried once synchronously when the file is taken, so
space freed in the meantime is used; a second failure propagates to the caller.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from store.mapped_file import MappedFile

log = structlog.get_logger(__name__)


class AllocateMappedFileService:
    def __init__(self, file_size: int, *, enabled: bool = True) -> None:
        self.file_size = file_size
        self.enabled = enabled
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="allocate-mapped-file")
        self._pending: dict[str, Future[MappedFile]] = {}

    def _create(self, path: str) -> MappedFile:
        return MappedFile(path, self.file_size, create=True)

    def take(self, path: str, next_path: str) -> MappedFile:
        future = self._pending.pop(path, None)
        mapped: MappedFile | None = None
        if future is not None:
            try:
                mapped = future.result()
            except OSError as exc:
                log.warning("preallocation failed, retrying in place", path=path, error=str(exc))
        if mapped is None:
            mapped = self._create(path)
        if self.enabled and next_path not in self._pending and not os.path.exists(next_path):
            self._pending[next_path] = self._pool.submit(self._create, next_path)
        return mapped

    def shutdown(self) -> None:
        """Stop, and delete files prepared but never used (they hold no data)."""
        self._pool.shutdown(wait=True)
        for future in self._pending.values():
            if future.exception() is None:
                future.result().destroy()
        self._pending.clear()
