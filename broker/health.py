"""Is the broker fit to take traffic? `/healthz` asks `HealthCheck`: the store must be able to
write (running, no write error, disk under the warning level, its directories writable on a
read-write filesystem) and dispatch must not be stuck (a failed round, or bytes behind that
have not moved for `healthDispatchStallSeconds`), and the process must not be nearly out of
open files.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from rmqpy.broker.open_files import OpenFiles
from rmqpy.store.message_store import MessageStore

log = structlog.get_logger(__name__)


class HealthCheck:
    def __init__(
        self,
        store: MessageStore,
        stall_s: float,
        open_files: OpenFiles | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.open_files = open_files
        self.stall_s = stall_s
        self.clock = clock
        self._lock = threading.Lock()
        self._seen_offset = -1
        self._since = 0.0
        self._healthy = True

    def __call__(self) -> tuple[bool, dict[str, Any]]:
        """(healthy, a JSON-able report with the reasons when not)."""
        store = self.store
        problems = store.write_problems()
        reput = store.reput
        if reput.stuck_reason is not None:
            problems.append(reput.stuck_reason)
        if self.open_files is not None and (short := self.open_files.problem()) is not None:
            problems.append(short)
        behind = reput.behind_bytes()
        offset = reput.reput_from_offset
        now = self.clock()
        with self._lock:
            if behind == 0 or offset != self._seen_offset:
                self._seen_offset, self._since = offset, now
            stalled_s = now - self._since
        if behind and stalled_s >= self.stall_s:
            problems.append(
                f"dispatch is {behind} bytes behind and has not moved for {stalled_s:.0f} s"
            )
        healthy = not problems
        with self._lock:  # scrapes run on several HTTP threads: log each change once
            changed, self._healthy = healthy != self._healthy, healthy
        if changed:
            if healthy:
                log.info("health restored")
            else:
                log.warning("health check failing", problems=problems)
        report: dict[str, Any] = {
            "status": "ok" if not problems else "unhealthy",
            "problems": problems,
            "dispatchBehindBytes": behind,
            "flushBehindBytes": store.flush_behind_bytes(),
        }
        return healthy, report
