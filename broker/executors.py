"""A thread pool per processor family with a bounded queue and fast failure (RocketMQ's
`BrokerFixedThreadPoolExecutor` + `BrokerFastFailure`).

Requests that arrive in one event-loop iteration are handed to the pool as one batch (a hop
between the loop and a thread costs tens of microseconds; one per batch, not one per
request), and their responses come back in one `call_soon_threadsafe`. A request is refused
with SYSTEM_BUSY at once when `capacity` requests are already queued, and when it waited in
the queue longer than `max_wait_ms` (the client would have given up on it anyway).

With no threads a family runs on the event loop itself, still one batch per loop iteration:
for work that never blocks (ASYNC_FLUSH sends) that saves the two thread hops and the GIL
hand-offs between the loop and the pool, which cost more than the work. A family with
threads may still run some requests on the loop: those its `inline` test says will not block
(pulls whose records are in the page cache); the rest of the batch goes to the pool.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import structlog

from rmqpy.broker.context import (
    BadRequest,
    Processor,
    RequestContext,
    ResourceRefusal,
    SingleProcessor,
    deliver,
)
from rmqpy.broker.metrics import BrokerMetrics
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.headers import HeaderError
from rmqpy.remoting.server import Refusals

log = structlog.get_logger(__name__)

Run = tuple[Processor, list[RequestContext]]  # consecutive requests for one processor


def _count(runs: list[Run]) -> int:
    return sum(len(ctxs) for _, ctxs in runs)


class FamilyExecutor:
    def __init__(
        self,
        name: str,
        loop: asyncio.AbstractEventLoop,
        threads: int,
        capacity: int,
        max_wait_ms: int,
        metrics: BrokerMetrics | None = None,
        inline: Callable[[RequestContext], bool] | None = None,
    ) -> None:
        self.name = name
        self.inline = inline
        self.metrics = metrics
        self.loop = loop
        self.capacity = capacity
        self.max_wait_s = max_wait_ms / 1000
        self._pool = (
            ThreadPoolExecutor(threads, thread_name_prefix=f"rmqpy-{name}") if threads > 0 else None
        )
        self._batch: list[Run] = []
        self._waiting = 0  # requests in `_batch`
        self._lock = threading.Lock()
        self._started_later = 0  # flushed to run, not yet started
        self.rejected = 0

    def submit(self, processor: Processor, ctx: RequestContext) -> None:
        """On the loop: queue one request, or answer SYSTEM_BUSY when the queue is full
        (the batch not yet flushed counts as queued)."""
        self.submit_all(processor, [ctx])

    def submit_all(self, processor: Processor, ctxs: list[RequestContext]) -> None:
        """On the loop: queue requests for one processor, in order; those beyond the queue's
        room are answered SYSTEM_BUSY at once."""
        room = self.capacity - self._started_later - self._waiting
        if room < len(ctxs):
            refused = ctxs[max(room, 0) :]
            ctxs = ctxs[: max(room, 0)]
            self.rejected += len(refused)
            remark = f"[REJECTREQUEST]system busy, {self.name} queue full"
            self.answer([(ctx, busy(ctx.request, remark)) for ctx in refused])
            if not ctxs:
                return
        batch = self._batch
        if not batch:
            self.loop.call_soon(self._flush)
        if batch and batch[-1][0] is processor:
            batch[-1][1].extend(ctxs)
        else:
            batch.append((processor, ctxs))
        self._waiting += len(ctxs)

    @property
    def queued(self) -> int:
        """Requests accepted and not yet started."""
        return self._started_later + self._waiting

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        count, self._waiting = self._waiting, 0
        if not batch:
            return
        with self._lock:  # counted once a batch, not once a request
            self._started_later += count
        if self._pool is None:
            self._run(batch, count, on_loop=True)
            return
        here: list[Run] = []
        there = batch
        if self.inline is not None:
            there = []
            for processor, ctxs in batch:
                for ctx in ctxs:
                    runs = here if self._runs_inline(self.inline, ctx) else there
                    if runs and runs[-1][0] is processor:
                        runs[-1][1].append(ctx)
                    else:
                        runs.append((processor, [ctx]))
        inline_count = _count(here)
        if there:
            self._pool.submit(self._run, there, count - inline_count, False)
        if here:
            self._run(here, inline_count, on_loop=True)

    @staticmethod
    def _runs_inline(inline: Callable[[RequestContext], bool], ctx: RequestContext) -> bool:
        try:
            return inline(ctx)
        except Exception:  # a request the test cannot read: the pool answers it properly
            return False

    def _run(self, batch: list[Run], count: int, on_loop: bool) -> None:
        """On a pool thread or on the loop: run a batch, answer it."""
        with self._lock:
            self._started_later -= count
        now = time.monotonic()
        answers: list[tuple[RequestContext, RemotingCommand]] = []
        for processor, ctxs in batch:
            # A run is in arrival order: when its last waited too long, so did all before it.
            group = ctxs
            if now - ctxs[-1].received_s > self.max_wait_s:
                group = [ctx for ctx in ctxs if not self._too_late(ctx, now, answers)]
            if group:
                for ctx, answer in zip(group, run_processor(processor, group), strict=True):
                    if answer is not None:  # None: parked, run and answered again later
                        answers.append((ctx, answer))
        if not answers:
            return
        if on_loop:
            deliver(answers)
        else:
            self.loop.call_soon_threadsafe(deliver, answers)
        self._record(answers)  # after: metrics need not delay the answers

    def _too_late(
        self,
        ctx: RequestContext,
        now: float,
        answers: list[tuple[RequestContext, RemotingCommand]],
    ) -> bool:
        """A request that waited in the queue longer than the client waits: answered busy."""
        waited = now - ctx.received_s
        if waited <= self.max_wait_s:
            return False
        self.rejected += 1
        remark = (
            "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, "
            f"period in queue: {int(waited * 1000)}ms, size of queue: {self.queued}"
        )
        answers.append((ctx, busy(ctx.request, remark)))
        return True

    def answer(self, answers: list[tuple[RequestContext, RemotingCommand]]) -> None:
        """On the loop: answer at once (then count them: metrics need not delay answers)."""
        deliver(answers)
        self._record(answers)

    def _record(self, answers: list[tuple[RequestContext, RemotingCommand]]) -> None:
        if self.metrics is not None:
            self.metrics.record_rpcs(answers)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=False)


OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.ENOMEM)
_REFUSED = Refusals("request refused")
_OUT_OF_RESOURCES = Refusals("request failed: the system is out of a resource")


def run_processor(
    processor: Processor, group: Sequence[RequestContext]
) -> list[RemotingCommand | None]:
    """The processor's answers; a failure answers every request of the group with code 1."""
    try:
        return processor(group)
    except (HeaderError, BadRequest) as exc:
        log.warning(
            "bad request", code=group[0].request.code, peer=group[0].conn.peer, error=str(exc)
        )
        return [ctx.request.response(ResponseCode.SYSTEM_ERROR, str(exc)) for ctx in group]
    except ResourceRefusal as exc:
        _REFUSED.note(group[0].conn.peer, str(exc))
        return [ctx.request.response(ResponseCode.SYSTEM_ERROR, str(exc)) for ctx in group]
    except OSError as exc:
        if exc.errno not in OUT_OF_RESOURCES:
            log.exception("processor failed", code=group[0].request.code)
        else:  # one line, not a traceback per request, while it lasts
            _OUT_OF_RESOURCES.note(group[0].conn.peer, str(exc))
        return [ctx.request.response(ResponseCode.SYSTEM_ERROR, str(exc)) for ctx in group]
    except Exception as exc:
        log.exception("processor failed", code=group[0].request.code)
        return [
            ctx.request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
            for ctx in group
        ]


class LoopRounds:
    """For the store's dispatch (`MessageStore.dispatch_with`), made on the loop's thread:
    work asked for from that thread (`schedule`) runs on the loop soon after, once however
    often it is asked for before it runs (a loop iteration's sends share one dispatch
    round, run after their answers are written); from any other thread it declines.

    Work a scheduled round asks for with `after_round` (answering the pulls its new
    messages woke) runs as soon as that round is over, in the same callback, not one loop
    iteration later behind whatever else is ready: a message reaches a waiting consumer
    sooner. Asked for outside a round, it runs soon after, as `loop.call_soon` does."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.owner = threading.get_ident()
        self._pending: set[Callable[[], None]] = set()
        self._after: list[Callable[[], None]] | None = None  # while a round runs

    def schedule(self, fn: Callable[[], None]) -> bool:
        if threading.get_ident() != self.owner:
            return False
        if fn not in self._pending:
            self._pending.add(fn)
            self.loop.call_soon(self._run, fn)
        return True

    def after_round(self, fn: Callable[[], None]) -> None:
        """On the loop's thread: `fn` right after the round running now, else soon."""
        if self._after is None:
            self.loop.call_soon(fn)
        else:
            self._after.append(fn)

    def _run(self, fn: Callable[[], None]) -> None:
        self._pending.discard(fn)
        self._after = []
        try:
            fn()
        finally:
            after, self._after = self._after, None
        for later in after:  # each on its own, as separate callbacks would be
            try:
                later()
            except Exception as exc:
                self.loop.call_exception_handler(
                    {"message": "work after a dispatch round failed", "exception": exc}
                )


def busy(request: RemotingCommand, remark: str) -> RemotingCommand:
    return request.response(ResponseCode.SYSTEM_BUSY, remark)


def per_request(fn: SingleProcessor) -> Processor:
    """A processor from a function that answers one request; a failing request answers code 1
    without failing the rest of its batch."""

    def one(group: Sequence[RequestContext]) -> list[RemotingCommand | None]:
        return [fn(group[0])]

    def processor(group: Sequence[RequestContext]) -> list[RemotingCommand | None]:
        return [run_processor(one, [ctx])[0] for ctx in group]

    return processor


# A processor table: request code -> (processor, the executor it runs on).
Table = dict[int, tuple[Processor, FamilyExecutor]]
