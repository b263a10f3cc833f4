"""Prepares the next commitlog file before it is needed (RocketMQ `AllocateMappedFileService`).

`take(path)` returns a file for `path` - the one prepared in the background if there is one,
else it creates it on the spot - and then starts preparing the file after it. Preparation
means create + posix_fallocate + mmap, so the put path never waits for block allocation. A
preparation that failed (disk full) is retried once synchronously when the file is taken, so
space freed in the meantime is used; a second failure propagates to the caller.

With `warm`, each file is then brought into the page cache ahead of the writer (`warm`,
`fileio.warm_page_cache`), on a thread of its own, so taking a file never waits for its
warming: a write into a fresh page of a preallocated file allocates that page first, which
made the commitlog's pwrites twice as slow. RocketMQ's `warmMappedFileEnable` writes zeros
into every page instead, dirtying the whole file; these pages stay clean.

Warming keeps `warm_ahead` bytes ahead of the writer, no further, a few MiB at a time: it
follows the writer at its pace instead of warming a whole file in one go. A whole 1 GiB file
at once kept a core busy in the kernel for seconds (new pages come at about 0.4 GB/s on some
machines), and on two cores the broker, its producers and its consumers waited for it:
messages took up to 400 ms from send to receipt around each new file.

With `min_warm_rate`, only a writer that keeps up that many bytes a second (`WritePace`, over
half-second windows) is warmed for. Below it, making its own pages costs the writer little (a
fraction of a core at most), while warming still cost the other threads and processes on a
small machine their latency: in steady flows of 5,000 and 45,000 messages a second, each
warming step came with a cluster of messages late by up to 20 ms, and the flows' p99 from
send to receipt fell from 2.6-3.2 to 1.1-2.0 ms and from 13-20 to 5.5-7 ms without it.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from rmqpy.store.fileio import warm_page_cache
from rmqpy.store.mapped_file import MappedFile

log = structlog.get_logger(__name__)

_WarmJob = tuple[int | None, "MappedFile | Future[MappedFile]", int]

WARM_STEP = 4 * 1024 * 1024  # warmed at a time (about 10 ms of a core)
WARM_AHEAD = 64 * 1024 * 1024  # how far ahead of the writer a file is kept warm
# How often a warmer that is far enough ahead looks at the writer again: when the writer, at
# the pace it kept during the last wait, will have used up a step of the lead, within these
# bounds (backing off to the longest while it does not move). Each look takes the GIL from
# the event loop: polling every 5 ms whatever the pace cost the loop 200 hand-overs a second.
WAIT_MIN_S = 0.005
WAIT_MAX_S = 0.1
PACE_WINDOW_S = 0.5  # the writer's pace is measured over windows at least this long


class WritePace:
    """A writer's pace in bytes a second, from its position sampled now and then: over the
    last window of at least `window_s` (0 until one has passed; a position that went back,
    a store started over, begins a new window)."""

    def __init__(
        self, window_s: float = PACE_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self.clock = clock
        self.bytes_per_s = 0.0
        self._since: tuple[float, int] | None = None  # (when, position) the window began

    def sample(self, position: int) -> float:
        now = self.clock()
        if self._since is None or position < self._since[1]:
            self._since = (now, position)
        elif now - self._since[0] >= self.window_s:
            began, was = self._since
            self.bytes_per_s = (position - was) / (now - began)
            self._since = (now, position)
        return self.bytes_per_s


class AllocateMappedFileService:
    def __init__(
        self,
        file_size: int,
        *,
        enabled: bool = True,
        warm: bool = True,
        sparse: bool = False,
        headroom: int = 0,
        warm_ahead: int = WARM_AHEAD,
        warm_step: int = WARM_STEP,
        min_warm_rate: int = 0,
        writer_position: Callable[[], int] | None = None,
    ) -> None:
        self.file_size = file_size
        self.sparse = sparse
        self.headroom = headroom  # what sparse files leave free on the disk (`MappedFile`)
        self.enabled = enabled
        self.warm_files = warm
        self.warm_ahead = warm_ahead
        self.warm_step = warm_step
        # Warm only for a writer this fast (bytes a second; 0 or no `writer_position`, its
        # position across files: always).
        self.min_warm_rate = min_warm_rate
        self.writer_position = writer_position
        self.pace = WritePace()
        self.warmed_bytes = 0  # brought into the page cache so far (tests and metrics)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="allocate-mapped-file")
        self._pending: dict[str, Future[MappedFile]] = {}
        self._stopping = threading.Event()
        # Warming waits for the writer: on a thread of its own, so files are created at once;
        # a daemon, since a file nobody writes would keep it waiting at the interpreter's exit.
        # A job is a file to warm from a position, with a descriptor of its own (None: the
        # file is still being prepared, and is warmed from its start).
        self._warm_jobs: queue.SimpleQueue[_WarmJob | None] = queue.SimpleQueue()
        self._warmer: threading.Thread | None = None

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
            self._submit_warming((None, prepared, 0))

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
        if not self.warm_files or mapped.is_full() or self._stopping.is_set():
            return
        # Its own descriptor, taken now: the file may be closed before the job runs.
        self._submit_warming((os.dup(mapped.fd), mapped, mapped.wrote_position))

    def _submit_warming(self, job: _WarmJob) -> None:
        if self._warmer is None:
            self._warmer = threading.Thread(
                target=self._warm_jobs_run, name="warm-mapped-file", daemon=True
            )
            self._warmer.start()
        self._warm_jobs.put(job)

    def _warm_jobs_run(self) -> None:
        while (job := self._warm_jobs.get()) is not None:
            fd, target, position = job
            try:
                if isinstance(target, Future):  # a file being prepared: warmed once it is
                    if target.exception() is not None:
                        continue  # `take` creates it again, and warms that one
                    target = target.result()
                    fd = os.dup(target.fd)
                if fd is not None:
                    self._warm_range(fd, target, position)  # (at once when stopping)
            except OSError as exc:  # (descriptors run out): that file goes unwarmed
                log.warning("cannot warm a commitlog file", error=str(exc))
        while not self._warm_jobs.empty():  # submitted as the service stopped
            late = self._warm_jobs.get_nowait()
            if late is not None and late[0] is not None:
                os.close(late[0])

    def _warm_range(self, fd: int, mapped: MappedFile, position: int) -> None:
        """Warm `mapped` from `position` to its end, at most `warm_ahead` bytes ahead of
        its writer; done early when the writer has left the file. Never raises: a file that
        cannot be warmed is only written more slowly."""
        at, wait_s = position, WAIT_MIN_S
        try:
            while at < self.file_size and not self._stopping.is_set() and not mapped.is_full():
                wrote = mapped.wrote_position
                if self._too_slow():
                    self._stopping.wait(WAIT_MAX_S)
                    continue
                if at - wrote >= self.warm_ahead:
                    started = time.monotonic()
                    self._stopping.wait(wait_s)
                    wait_s = self._next_wait(
                        wait_s, at, wrote, mapped.wrote_position, time.monotonic() - started
                    )
                    continue
                size = min(self.warm_step, self.file_size - at)
                warm_page_cache(fd, at, size)
                self.warmed_bytes += size
                at += size
        except OSError as exc:
            log.warning("cannot warm a commitlog file", error=str(exc))
        finally:
            os.close(fd)

    def _too_slow(self) -> bool:
        """Whether the writer goes too slowly to be warmed for (see the module's notes)."""
        if not self.min_warm_rate or self.writer_position is None:
            return False
        return self.pace.sample(self.writer_position()) < self.min_warm_rate

    def _next_wait(self, waited_s: float, at: int, was: int, now: int, elapsed_s: float) -> float:
        """How long to wait before looking again, the writer having moved from `was` to
        `now` in `elapsed_s` while warming stood at `at`: until, at that pace, it comes
        within `warm_ahead - warm_step` of `at`; twice as long as before when it stood still."""
        if now <= was or elapsed_s <= 0:
            return min(2 * waited_s, WAIT_MAX_S)
        spare = at - now - (self.warm_ahead - self.warm_step)
        return min(max(spare * elapsed_s / (now - was), WAIT_MIN_S), WAIT_MAX_S)

    def shutdown(self) -> None:
        """Stop, and delete files prepared but never used (they hold no data)."""
        self._stopping.set()
        if self._warmer is not None:
            self._warm_jobs.put(None)
            self._warmer.join()
        self._pool.shutdown(wait=True)
        for future in self._pending.values():
            if future.exception() is None:
                future.result().destroy()
        self._pending.clear()
