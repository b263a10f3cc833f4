"""What the broker counts as it serves, for Prometheus (`broker.metrics_export` turns it into
RocketMQ 5's metric families at scrape time).

The hot path pays for plain integers under one lock, once per batch of requests: a send
executor's batch of puts, a pull's response, an executor's batch of answers. Nothing here
touches prometheus-client; the exporter reads these tables when Prometheus scrapes.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from rmqpy.broker.context import RequestContext
from rmqpy.config.compiled import twin
from rmqpy.remoting.codes import RequestCode, ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.store.commitlog import PutMessageResult
from rmqpy.store.layout import MARK_DELAY, MARK_SHARDING_KEY, PutMessageStatus, SysFlag
from rmqpy.store.message import Message
from rmqpy.store.staged import StagedSends

# RocketMQ 5's buckets for rocketmq_message_size (bytes).
MESSAGE_SIZE_BUCKETS: tuple[float, ...] = (
    1024,
    4 * 1024,
    512 * 1024,
    1024 * 1024,
    2 * 1024 * 1024,
    4 * 1024 * 1024,
)
# rocketmq_rpc_latency (seconds): from 100 µs to a held long poll's 30 s and past it.
RPC_LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

# RocketMQ 5's message_type label values (TopicMessageType.getMetricsValue).
NORMAL, FIFO, DELAY, TRANSACTION = "normal", "fifo", "delay", "transaction"


@dataclass(slots=True)
class Histogram:
    """Counts per bucket (the last one is +Inf) and the sum of what was observed; the
    recorders below update `counts` and `total` in place, inline."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus buckets: (le, observations ≤ le), ending with +Inf."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)

    def copy(self) -> Histogram:
        return Histogram(self.bounds, list(self.counts), self.total)


_TRANSACTION_MASK, _PREPARED = int(SysFlag.TRANSACTION_MASK), int(SysFlag.TRANSACTION_PREPARED_TYPE)


def message_type(msg: Message) -> str:
    """RocketMQ 5's message_type label for a message as stored."""
    if msg.sys_flag & _TRANSACTION_MASK == _PREPARED:
        return TRANSACTION
    marks = msg.marks
    if marks & MARK_DELAY:
        return DELAY
    if marks & MARK_SHARDING_KEY:
        return FIFO
    return NORMAL


def _code_names(enum: type[RequestCode] | type[ResponseCode]) -> dict[int, str]:
    return {int(member): member.name.lower() for member in enum}


REQUEST_NAMES = _code_names(RequestCode)
RESPONSE_NAMES = _code_names(ResponseCode)


def code_name(names: dict[int, str], code: int) -> str:
    return names.get(code) or str(code)


InKey = tuple[str, str]  # (topic, message_type)
OutKey = tuple[str, str]  # (topic, consumer_group)
RpcKey = tuple[int, int, bool]  # (request code, response code, answered after being held)
QueueKey = tuple[str, str, int]  # (consumer_group, topic, queue id)


@dataclass(slots=True)
class Snapshot:
    """A consistent copy of the tables, taken at scrape time."""

    sizes: dict[InKey, Histogram]  # also messages in (count) and body bytes in (sum)
    messages_out: dict[OutKey, int]
    bytes_out: dict[OutKey, int]
    rpc: dict[RpcKey, Histogram]
    pulled: dict[QueueKey, int]


class BrokerMetrics:
    """The tables the processors and executors add to, each call under one lock.

    Messages and bytes in are the count and sum of the message-size histogram: one update
    per message serves all three families."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sizes: dict[InKey, Histogram] = {}
        self.messages_out: dict[OutKey, int] = {}
        self.bytes_out: dict[OutKey, int] = {}
        self.rpc: dict[RpcKey, Histogram] = {}
        self.pulled: dict[QueueKey, int] = {}  # the next offset each group will pull

    def record_puts(
        self, groups: Sequence[Sequence[Message]], results: Sequence[PutMessageResult]
    ) -> None:
        """Stored sends: each group is one request (a message or a batch) and its result."""
        with self._lock:
            tally_sizes(self.sizes, groups, results)

    def record_staged(self, staged: StagedSends) -> None:
        """Staged sends (`store.staged`), each its own request."""
        with self._lock:
            tally_staged(self.sizes, staged)

    def record_pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        next_offset: int,
        messages: int,
        size: int,
    ) -> None:
        """One pull's answer: messages and record bytes handed out, and where it goes next."""
        with self._lock:
            self._count_pull(group, topic, queue_id, next_offset, messages, size)

    def _count_pull(
        self, group: str, topic: str, queue_id: int, next_offset: int, messages: int, size: int
    ) -> None:
        """`record_pull`'s counting, under the lock."""
        self.pulled[(group, topic, queue_id)] = next_offset
        if messages:
            key = (topic, group)
            self.messages_out[key] = self.messages_out.get(key, 0) + messages
            self.bytes_out[key] = self.bytes_out.get(key, 0) + size

    def record_pull_answer(
        self,
        ctx: RequestContext,
        code: int,
        group: str,
        topic: str,
        queue_id: int,
        next_offset: int,
        messages: int,
        size: int,
    ) -> None:
        """`record_pull` and `record_rpcs` at once, for a pull answered `code` now."""
        latency = time.monotonic() - ctx.received_s + ctx.held_s
        key = (ctx.request.code, code, ctx.resumed)
        tally_pull(self, key, latency, group, topic, queue_id, next_offset, messages, size)

    def record_first_pull(
        self,
        request_code: int,
        received_s: float,
        code: int,
        group: str,
        topic: str,
        queue_id: int,
        next_offset: int,
        messages: int,
        size: int,
    ) -> None:
        """`record_pull_answer` for a pull answered on its first run, received at
        `received_s`, whose request has no context made for it (taken straight from its
        frame)."""
        latency = time.monotonic() - received_s
        key = (request_code, code, False)
        tally_pull(self, key, latency, group, topic, queue_id, next_offset, messages, size)

    def record_rpcs(self, answers: Sequence[tuple[RequestContext, RemotingCommand]]) -> None:
        """The latency of each answer, from its request's arrival (a held pull's hold too)."""
        now = time.monotonic()
        with self._lock:
            tally_latencies(self.rpc, answers, now)

    def record_answered(
        self,
        request_codes: Sequence[int],
        response_code: int,
        received_s: float,
        staged: StagedSends | None = None,
    ) -> None:
        """The latency of requests received together and answered together now, each with
        `response_code` (the sends of one read, stored and answered at once), and with
        `staged`, their messages (`record_staged`), under one hold of the lock."""
        latency = time.monotonic() - received_s
        bucket = bisect_left(RPC_LATENCY_BUCKETS, latency)
        with self._lock:
            if staged is not None:
                tally_staged(self.sizes, staged)
            for code in set(request_codes):  # a read's sends are mostly of one code: once
                key = (code, response_code, False)
                self._count_latency(key, bucket, latency, request_codes.count(code))

    def _count_latency(self, key: RpcKey, bucket: int, latency: float, count: int = 1) -> None:
        """`count` requests' latency (in its `bucket`) added to their histogram, under the
        lock."""
        hist = self.rpc.get(key) or self.rpc.setdefault(key, Histogram(RPC_LATENCY_BUCKETS))
        hist.counts[bucket] += count
        hist.total += latency * count

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series end (as Kafka drops a deleted topic's metrics): left in,
        its counters and the queues its groups pulled would be exported until a restart, and
        a topic created again under the name would carry on from them."""
        with self._lock:
            self.sizes = {k: h for k, h in self.sizes.items() if k[0] != topic}
            self.messages_out = {k: n for k, n in self.messages_out.items() if k[0] != topic}
            self.bytes_out = {k: n for k, n in self.bytes_out.items() if k[0] != topic}
            self.pulled = {k: n for k, n in self.pulled.items() if k[1] != topic}

    def messages_out_now(self) -> dict[OutKey, int]:
        """Messages handed out so far, per (topic, group)."""
        with self._lock:
            return dict(self.messages_out)

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                {k: h.copy() for k, h in self.sizes.items()},
                dict(self.messages_out),
                dict(self.bytes_out),
                {k: h.copy() for k, h in self.rpc.items()},
                dict(self.pulled),
            )


class OutRates:
    """Messages a second each (topic, group) was handed over the last minute, from samples of
    `BrokerMetrics.messages_out` (Java's `tpsGroupGetNums`, GET_CONSUME_STATS' consumeTps)."""

    def __init__(self, metrics: BrokerMetrics, window_s: float = 60.0) -> None:
        self.metrics = metrics
        self.window_s = window_s
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, dict[OutKey, int]]] = deque()

    def sample(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self._samples and now - self._samples[-1][0] < 1.0:
                return  # (no copy of the table for a sample not taken)
            self._samples.append((now, self.metrics.messages_out_now()))
            while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
                self._samples.popleft()

    def per_second(self, topic: str, group: str) -> float:
        self.sample()
        with self._lock:
            if len(self._samples) < 2:
                return 0.0
            (t0, first), (t1, last) = self._samples[0], self._samples[-1]
        key = (topic, group)
        return max(0, last.get(key, 0) - first.get(key, 0)) / (t1 - t0)


def tally_sizes(
    sizes: dict[InKey, Histogram],
    groups: Sequence[Sequence[Message]],
    results: Sequence[PutMessageResult],
) -> None:
    """Add each stored message's body size to its (topic, message type) histogram."""
    ok = PutMessageStatus.PUT_OK
    bounds = MESSAGE_SIZE_BUCKETS
    for msgs, result in zip(groups, results, strict=True):
        if result.status is not ok:
            continue
        first = msgs[0]
        key = (first.topic, message_type(first))
        hist = sizes.get(key) or sizes.setdefault(key, Histogram(bounds))
        counts = hist.counts
        for msg in msgs:
            n = len(msg.body)
            counts[bisect_left(bounds, n)] += 1
            hist.total += n


def tally_staged(sizes: dict[InKey, Histogram], staged: StagedSends) -> None:
    """`tally_sizes` for staged sends, once stored (none is delayed or transactional)."""
    if staged.status is not PutMessageStatus.PUT_OK:
        return
    bounds = MESSAGE_SIZE_BUCKETS
    templates = staged.templates
    for slot, marks, n in zip(staged.slots, staged.marks, staged.body_sizes, strict=True):
        key = (templates[slot].topic, FIFO if marks & MARK_SHARDING_KEY else NORMAL)
        hist = sizes.get(key) or sizes.setdefault(key, Histogram(bounds))
        hist.counts[bisect_left(bounds, n)] += 1
        hist.total += n


def tally_latencies(
    rpc: dict[RpcKey, Histogram],
    answers: Sequence[tuple[RequestContext, RemotingCommand]],
    now: float,
) -> None:
    """Add each answer's latency at `now` to its (request code, response code, held)
    histogram."""
    bounds = RPC_LATENCY_BUCKETS
    for ctx, response in answers:
        key = (ctx.request.code, response.code, ctx.resumed)
        hist = rpc.get(key) or rpc.setdefault(key, Histogram(bounds))
        latency = now - ctx.received_s + ctx.held_s
        hist.counts[bisect_left(bounds, latency)] += 1
        hist.total += latency


def tally_pull(
    metrics: BrokerMetrics,
    key: RpcKey,
    latency: float,
    group: str,
    topic: str,
    queue_id: int,
    next_offset: int,
    messages: int,
    size: int,
) -> None:
    """One pull's answer, under `metrics`' lock: its latency added to its (request code,
    response code, held) histogram, and `BrokerMetrics.record_pull`'s counting (the pull
    lane calls this straight, without a method call per pull)."""
    bucket = bisect_left(RPC_LATENCY_BUCKETS, latency)
    with metrics._lock:
        metrics._count_latency(key, bucket, latency)
        metrics._count_pull(group, topic, queue_id, next_offset, messages, size)


def tally_answered(
    metrics: BrokerMetrics,
    request_code: int,
    count: int,
    response_code: int,
    latency: float,
    staged: StagedSends,
) -> None:
    """`BrokerMetrics.record_answered` for `count` requests of one code (the sends of one
    read, stored as `staged` and answered together `latency` after they arrived), without a
    method call (the send path calls this straight)."""
    bucket = bisect_left(RPC_LATENCY_BUCKETS, latency)
    with metrics._lock:
        tally_staged(metrics.sizes, staged)
        metrics._count_latency((request_code, response_code, False), bucket, latency, count)


# The pure-Python functions, kept as the reference the compiled twin is tested against.
reference_tally_sizes, reference_tally_latencies = tally_sizes, tally_latencies
reference_tally_staged, reference_tally_pull = tally_staged, tally_pull
reference_tally_answered = tally_answered
_compiled = twin("rmqpy.broker._metrics")
if _compiled is not None:
    tally_sizes = _compiled.tally_sizes
    tally_staged = _compiled.tally_staged
    tally_latencies = _compiled.tally_latencies
    tally_pull = _compiled.tally_pull
    tally_answered = _compiled.tally_answered
