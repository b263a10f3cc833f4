"""Prepares the next commitlog file before it is needed (RocketMQ `AllocateMappedFileService`).

`take(path)` returns a file for `path` - the one prepared in the background if there is one,
else it creates it on the spot - and then starts preparing the file after it. Preparation
means create + posix_fallocate + mmap, so the put path never waits for block allocation. A
preparation that failed (disk full) is retried once synchronously when the file is taken, so
space freed in the meantime is used; a second failure propagates to the caller.

With `warm`, each file is then brought into the page cache ahead of the writer (`warm`,
`fileio.warm_page_cache`), on the same background thread and after the file is ready, so
taking a file never waits for its warming: a write into a fresh page of a preallocated file
allocates that page first, which made the commitlog's pwrites twice as slow. RocketMQ's
`warmMappedFileEnable` writes zeros into every page instead, dirtying the whole file; these
pages stay clean.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from rmqpy.store.fileio import warm_page_cache
from rmqpy.store.mapped_file import MappedFile

log = structlog.get_logger(__name__)

WARM_STEP = 32 * 1024 * 1024  # warmed at a time, so shutdown never waits for a whole file


class AllocateMappedFileService:
    def __init__(
        self,
        file_size: int,
        *,
        enabled: bool = True,
        warm: bool = True,
        sparse: bool = False,
        headroom: int = 0,
    ) -> None:
        self.file_size = file_size
        self.sparse = sparse
        self.headroom = headroom  # what sparse files leave free on the disk (`MappedFile`)
        self.enabled = enabled
        self.warm_files = warm
        self.warmed_bytes = 0  # brought into the page cache so far (tests and metrics)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="allocate-mapped-file")
        self._pending: dict[str, Future[MappedFile]] = {}
        self._stopping = False

    def _create(self, path: str) -> MappedFile:
        return MappedFile(
            path, self.file_size, create=True, sparse=self.sparse, headroom=self.headroom
        )

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
            self.warm(mapped)
        if self.enabled:
            self.prepare(next_path)
        return mapped

    def prepare(self, path: str) -> None:
        """Create (and warm) the file for `path` in the background, unless it exists or is
        on its way; `take` picks it up."""
        if path in self._pending or os.path.exists(path):
            return
        prepared = self._pool.submit(self._create, path)
        self._pending[path] = prepared
        if self.warm_files:
            self._pool.submit(self._warm_prepared, prepared)  # runs after it: one worker

    def ready(self, path: str, timeout_s: float) -> bool:
        """Prepare the file for `path` and wait for it: True once it exists (`take` picks it
        up), False when it could not be created (forgotten, so `take` tries again)."""
        self.prepare(path)
        future = self._pending.get(path)
        if future is None:
            return os.path.exists(path)
        try:
            future.result(timeout_s)
        except OSError:
            self._pending.pop(path, None)
            return False
        except TimeoutError:
            return False
        return True

    def warm(self, mapped: MappedFile) -> None:
        """Warm `mapped` from its write position to its end in the background (a file just
        created on the spot, or the one a restarted store goes on writing)."""
        if not self.warm_files or mapped.is_full() or self._stopping:
            return
        fd = os.dup(mapped.fd)  # its own descriptor: the file may be closed meanwhile
        try:
            self._pool.submit(self._warm_range, fd, mapped.wrote_position)
        except RuntimeError:  # shut down meanwhile
            os.close(fd)

    def _warm_prepared(self, prepared: Future[MappedFile]) -> None:
        if prepared.exception() is None:
            self._warm_range(os.dup(prepared.result().fd), 0)

    def _warm_range(self, fd: int, position: int) -> None:
        """Never raises: a file that cannot be warmed is only written more slowly."""
        try:
            for at in range(position, self.file_size, WARM_STEP):
                if self._stopping:
                    return
                size = min(WARM_STEP, self.file_size - at)
                warm_page_cache(fd, at, size)
                self.warmed_bytes += size
        except OSError as exc:
            log.warning("cannot warm a commitlog file", error=str(exc))
        finally:
            os.close(fd)

    def shutdown(self) -> None:
        """Stop, and delete files prepared but never used (they hold no data)."""
        self._stopping = True
        self._pool.shutdown(wait=True)
        for future in self._pending.values():
            if future.exception() is None:
                future.result().destroy()
        self._pending.clear()
