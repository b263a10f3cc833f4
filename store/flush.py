"""Flush services (RocketMQ `CommitLog.GroupCommitService`/`FlushRealTimeService` and
`FlushConsumeQueueService`).

* SYNC_FLUSH - `GroupCommitService`: each put that wants durability registers the offset it
  needs flushed and waits. The service swaps the request list, runs one fdatasync for all of
  them (fsync releases the GIL, so puts keep arriving and form the next group meanwhile) and
  answers each PUT_OK, or FLUSH_DISK_TIMEOUT once `syncFlushTimeout` passes.
* ASYNC_FLUSH - `FlushRealTimeService`: every 500 ms flush if 4 pages are dirty, and
  everything every 10 s; in between, what is written is handed to the disk a MiB at a time
  (writeback started, not waited for), so a flush never holds a core for long.
* `FlushConsumeQueueService`: every 1 s flush consume queues with 2 pages; every 60 s flush
  everything, then write the checkpoint.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable

import structlog

from rmqpy.store.mapped_file_queue import MappedFileQueue

log = structlog.get_logger(__name__)


# How often an ASYNC_FLUSH flush service looks for writeback to start while writes come
# fast (about a MiB every 10 ms at 100,000 messages of 1 KiB a second).
WRITEBACK_WAIT_S = 0.01


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ServiceThread:
    """A named daemon loop with wakeup and stop (RocketMQ `ServiceThread`)."""

    name = "service"

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._final = True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self._wake.set()

    def wait_for_running(self, interval_s: float) -> None:
        self._wake.wait(interval_s)
        self._wake.clear()

    def shutdown(self, final: bool = True) -> None:
        """Stop the loop; `final=False` skips the last flush (a simulated crash)."""
        self._final = final
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                self.run_once()
            except OSError as exc:
                log.error("store service I/O error", service=self.name, error=str(exc))
                self._stopped.wait(1.0)
            except Exception as exc:  # a bug must not end flushing for good: log, go on
                log.error(
                    "store service failed",
                    service=self.name,
                    error=repr(exc),
                    traceback=traceback.format_exc(),
                )
                self._stopped.wait(1.0)
        if self._final:
            self.on_stop()

    def run_once(self) -> None:
        raise NotImplementedError

    def on_stop(self) -> None:
        """Final work after the loop ends (a last flush)."""


class _FlushRequest:
    """One put waiting for its bytes to be durable. `done` is a plain lock taken at creation
    and released once by the group commit: waiting on it is one C call, where an Event's
    wait runs a Python Condition (a lock allocated per wait, two more taken), which on
    SYNC_FLUSH's many producer threads cost more CPU than the put itself."""

    __slots__ = ("done", "next_offset", "ok", "then")

    def __init__(self, next_offset: int, then: Callable[[bool], None] | None = None) -> None:
        self.next_offset = next_offset
        self.ok = False
        self.then = then  # called instead, on the group-commit thread, when given
        self.done = threading.Lock()
        self.done.acquire()

    def finish(self, ok: bool) -> None:
        self.ok = ok
        if self.then is None:
            self.done.release()
            return
        try:
            self.then(ok)
        except Exception:
            log.exception("a flush callback failed")


class GroupCommitService(ServiceThread):
    name = "group-commit"

    def __init__(
        self, queue: MappedFileQueue, timeout_ms: int, on_flushed: Callable[[], None]
    ) -> None:
        super().__init__()
        self.queue = queue
        self.timeout_s = timeout_ms / 1000
        self.on_flushed = on_flushed
        self._lock = threading.Lock()
        self._requests: list[_FlushRequest] = []
        self.fsyncs = 0

    def wait_flushed(self, next_offset: int) -> bool:
        """Block until bytes below `next_offset` are durable; False on timeout."""
        if self.queue.flushed_where >= next_offset:
            return True
        req = _FlushRequest(next_offset)
        self._add(req)
        return req.done.acquire(timeout=self.timeout_s) and req.ok

    def when_flushed(self, next_offset: int, then: Callable[[bool], None]) -> None:
        """Call `then(ok)` once bytes below `next_offset` are durable (or the flush failed),
        on the group-commit thread, without a thread waiting: puts go on while a flush runs,
        and the next flush covers all of them. No timeout here: the caller keeps its own."""
        if self.queue.flushed_where >= next_offset:
            then(True)
            return
        self._add(_FlushRequest(next_offset, then))

    def _add(self, req: _FlushRequest) -> None:
        with self._lock:
            first = not self._requests
            self._requests.append(req)
        if first:  # the service takes the whole list: later ones need not wake it again
            self._wake.set()

    def run_once(self) -> None:
        self.wait_for_running(1.0)
        self._commit()

    def _commit(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
        if not requests:
            return
        try:
            for _ in range(2):
                if self.queue.flush(0):
                    self.fsyncs += 1
                if all(self.queue.flushed_where >= r.next_offset for r in requests):
                    break
            self.on_flushed()
        finally:
            for r in requests:
                r.finish(self.queue.flushed_where >= r.next_offset)

    def on_stop(self) -> None:
        self._commit()


class FlushRealTimeService(ServiceThread):
    """Flushes every `interval_ms`; meanwhile, with `writeback_bytes`, starts writing what
    is written to the disk each time that much more is (`MappedFileQueue.start_writeback`),
    looking every WRITEBACK_WAIT_S while writes come that fast and ever less often, up to
    the interval, while they do not."""

    name = "flush-commitlog"

    def __init__(
        self,
        queue: MappedFileQueue,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        on_flushed: Callable[[], None],
        writeback_bytes: int = 0,
    ) -> None:
        super().__init__()
        self.queue = queue
        self.interval_s = interval_ms / 1000
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self.on_flushed = on_flushed
        self.writeback_bytes = writeback_bytes
        self._last_thorough = monotonic_ms()
        self._look_s = WRITEBACK_WAIT_S  # how long until writeback is looked at again

    def run_once(self) -> None:
        self._wait_writing_back()
        pages = self.least_pages
        now = monotonic_ms()
        if now - self._last_thorough >= self.thorough_interval_ms:
            self._last_thorough = now
            pages = 0
        if self.queue.flush(pages):
            self.on_flushed()

    def _wait_writing_back(self) -> None:
        """The interval's wait, starting writeback meanwhile (see the class)."""
        if not self.writeback_bytes:
            self._stopped.wait(self.interval_s)
            return
        deadline = time.monotonic() + self.interval_s
        while (left := deadline - time.monotonic()) > 0:
            if self._stopped.wait(min(left, self._look_s)):
                return
            if self.queue.start_writeback(self.writeback_bytes):
                self._look_s = WRITEBACK_WAIT_S
            else:
                self._look_s = min(2 * self._look_s, self.interval_s)

    def on_stop(self) -> None:
        for _ in range(10):
            if not self.queue.flush(0):
                break
        self.on_flushed()


class FlushConsumeQueueService(ServiceThread):
    name = "flush-consume-queue"

    def __init__(
        self,
        flush: Callable[[int], None],
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        write_checkpoint: Callable[[], None],
    ) -> None:
        super().__init__()
        self.flush = flush
        self.interval_s = interval_ms / 1000
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self.write_checkpoint = write_checkpoint
        self._last_thorough = monotonic_ms()

    def run_once(self) -> None:
        self._stopped.wait(self.interval_s)
        now = monotonic_ms()
        if now - self._last_thorough >= self.thorough_interval_ms:
            self._last_thorough = now
            self.flush(0)
            self.write_checkpoint()
        else:
            self.flush(self.least_pages)

    def on_stop(self) -> None:
        self.flush(0)
        self.write_checkpoint()
