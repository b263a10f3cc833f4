"""Parked pulls (RocketMQ `PullRequestHoldService`).

A pull that finds nothing new and carries the SUSPEND flag is parked under `topic@queueId`
until a message its tag filter matches is dispatched (the store's arrival listener calls
`on_arrivals` from its dispatch thread) or its suspend time runs out (`check_timeouts`, run
on the loop every `CHECK_INTERVAL_S`). Either way the pull is run again, now without
suspension, and answered with the original opaque. Right after parking, the queue's max
offset is read again, so a message dispatched between the pull's read and its parking still
wakes it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rmqpy.broker.clients import Subscription
from rmqpy.broker.context import RequestContext
from rmqpy.config.compiled import twin
from rmqpy.remoting.headers.pull import PullMessageRequestHeader
from rmqpy.remoting.protocol import Connection
from rmqpy.store.dispatch import Arrival

CHECK_INTERVAL_S = 0.2


@dataclass(slots=True)
class ParkedPull:
    """A pull waiting in the hold. The compiled pull lane parks a pull it took straight from
    its frame as that frame (`frame`, read from `conn` at `received_s` on `loop`), without
    its request, context or header: it serves the second run from the frame again, and
    makes `ctx` and `header` only for a pull it hands on (to a pull thread or the
    reference), before it does."""

    ctx: RequestContext
    topic: str
    queue_id: int
    offset: int
    subscription: Subscription
    deadline_s: float
    header: PullMessageRequestHeader  # as parsed on the first run, for the second
    frame: bytes | None = None
    conn: Connection | None = None
    received_s: float = 0.0
    loop: asyncio.AbstractEventLoop | None = None


class PullRequestHoldService:
    def __init__(
        self,
        max_offset: Callable[[str, int], int],
        wake: Callable[[Sequence[ParkedPull]], None],
    ) -> None:
        self.max_offset = max_offset
        self.wake = wake
        self._lock = threading.Lock()
        self._parked: dict[tuple[str, int], list[ParkedPull]] = {}

    def park(self, pull: ParkedPull) -> None:
        key = (pull.topic, pull.queue_id)
        with self._lock:
            self._parked.setdefault(key, []).append(pull)
        if self.max_offset(pull.topic, pull.queue_id) > pull.offset:
            self._wake(self._take_where(key, lambda p: p is pull))

    def parked_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._parked.values())

    def on_arrivals(self, arrivals: Sequence[Arrival]) -> None:
        """New messages were dispatched: wake the pulls they satisfy (a pull whose tag filter
        matches none of the new messages stays parked), all of a round's together: a
        consumer's pulls of several queues are answered with one write."""
        woken: list[ParkedPull] = []
        table = self._parked
        for arrival in arrivals:
            key = (arrival.topic, arrival.queue_id)
            if key not in table:
                continue
            # The pulls the arrival satisfies taken (`_take_where`, inline: every round with
            # news): a new message its filter matches, or a queue that started over (its
            # topic deleted), whose pull is told where to go on.
            codes, next_offset = arrival.tags_codes, arrival.next_offset
            with self._lock:
                parked = table.get(key)
                if not parked:
                    continue
                rest: list[ParkedPull] = []
                for pull in parked:
                    wanted = pull.subscription.codes
                    if next_offset < pull.offset or (
                        next_offset > pull.offset
                        and (wanted is None or not codes or not codes.isdisjoint(wanted))
                    ):
                        woken.append(pull)
                    else:
                        rest.append(pull)
                if len(rest) < len(parked):
                    self._keep_locked(key, rest)
        if woken:
            self.wake(woken)

    def check_timeouts(self) -> None:
        """Wake pulls whose suspend time is up (they answer PULL_NOT_FOUND)."""
        now = time.monotonic()
        self._wake_all_where(lambda p: now >= p.deadline_s)

    def wake_all(self) -> None:
        self._wake_all_where(lambda _p: True)

    def _wake_all_where(self, ready: Callable[[ParkedPull], bool]) -> None:
        with self._lock:
            keys = list(self._parked)
        woken: list[ParkedPull] = []
        for key in keys:
            woken += self._take_where(key, ready)
        self._wake(woken)

    def _wake(self, woken: list[ParkedPull]) -> None:
        if woken:
            self.wake(woken)

    def _take_where(
        self, key: tuple[str, int], ready: Callable[[ParkedPull], bool]
    ) -> list[ParkedPull]:
        """The pulls parked under `key` that are `ready`, no longer parked."""
        with self._lock:
            parked = self._parked.get(key)
            if not parked:
                return []
            woken: list[ParkedPull] = []
            rest: list[ParkedPull] = []
            for pull in parked:
                (woken if ready(pull) else rest).append(pull)
            if woken:
                self._keep_locked(key, rest)
            return woken

    def _keep_locked(self, key: tuple[str, int], rest: list[ParkedPull]) -> None:
        """The pulls still parked under `key` once some were taken: `rest`."""
        if rest:
            self._parked[key] = rest
        else:
            del self._parked[key]


# The pure-Python reference, kept for the compiled twin's differential test; the compiled
# `park` and `on_arrivals` take the methods' places (no Python frame for each parked pull),
# and the compiled `ParkedPull` is what the compiled pull lane parks.
reference_park, reference_on_arrivals = (
    PullRequestHoldService.park,
    PullRequestHoldService.on_arrivals,
)
_compiled = twin("rmqpy.broker._long_polling")
if _compiled is not None:
    PullRequestHoldService.park = _compiled.park  # type: ignore[method-assign]
    PullRequestHoldService.on_arrivals = _compiled.on_arrivals  # type: ignore[method-assign]


def parked_pull_class() -> Callable[..., ParkedPull]:
    """What the pull lane makes its parked pulls with: the compiled `ParkedPull` where the
    compiled core is in use, else the dataclass (the same fields)."""
    return ParkedPull if _compiled is None else _compiled.ParkedPull
