"""The push consumer (RocketMQ `DefaultMQPushConsumer`): messages are pulled for you (long
polling) and handed to a listener.

    async def on_messages(msgs: list[ReceivedMessage]) -> ConsumeResult:
        ...
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("my-group", namesrv="127.0.0.1:9876", listener=on_messages)
    consumer.subscribe("T", "TagA || TagB")
    await consumer.start()

* **Clustering** (default): the group's members share the queues (average allocation) and
  re-share them when members come and go (the broker notifies us; we also look every 20 s).
  A queue changes hands through the broker's queue lock: the member leaving it finishes what it
  is consuming, commits and unlocks, and only then does the new owner start - so no message is
  consumed by two members at once. If the old owner died holding the lock, a concurrent consumer
  starts anyway after `handoff_timeout_s`; an orderly one waits for the lock (60 s at most).
  Offsets are committed to the broker every 5 s and on close. RECONSUME_LATER (or an exception)
  sends the messages back to `%RETRY%group`; after `max_reconsume_times` they go to
  `%DLQ%group`.
* **Broadcasting**: every member consumes every queue; offsets are kept in a local file.
* **Orderly** (`orderly=True`): one queue at a time, in queue order; RECONSUME_LATER retries the
  same messages locally after `suspend_s` (forever unless `max_reconsume_times` >= 0, then they
  go to the DLQ).

A listener may be a coroutine function or a plain function (run in a worker thread).

Each queue's next pull (`pull_batch_size` messages, 32 by default) goes out while what came
before is being consumed, until `pull_threshold_for_queue` messages of that queue (1000, as
RocketMQ's `pullThresholdForQueue`) wait for the listener; pulling resumes as they are
consumed.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Unpack

import structlog

from rmqpy.client.consumer import (
    ConsumerBase,
    ConsumerOptions,
    MessageModel,
    PullResult,
    QueueFeed,
    original_of,
    retry_topic,
)
from rmqpy.client.errors import ClientError
from rmqpy.client.instance import cancel_all, every
from rmqpy.client.message import MessageQueue, ReceivedMessage
from rmqpy.client.subscription import Subscription
from rmqpy.client.transport import check
from rmqpy.remoting.codes import RequestCode
from rmqpy.remoting.headers.admin import ConsumerSendMsgBackRequestHeader

log = structlog.get_logger(__name__)

PULL_THRESHOLD_FOR_QUEUE = 1000  # RocketMQ's pullThresholdForQueue
LOCK_RENEW_S = 20.0
DLQ_DELAY_LEVEL = -1


class ConsumeResult(enum.Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


# Java's CMResult for what a listener answered
DIRECT_RESULTS = {ConsumeResult.SUCCESS: "CR_SUCCESS", ConsumeResult.RECONSUME_LATER: "CR_LATER"}

Listener = Callable[
    [list[ReceivedMessage]], "ConsumeResult | Awaitable[ConsumeResult | None] | None"
]


@dataclass(eq=False)
class ProcessQueue:
    """One queue this member consumes: pulled messages not yet consumed, by queue offset."""

    mq: MessageQueue
    assigned_at: float = field(default_factory=time.monotonic)
    feed: QueueFeed | None = None
    msgs: dict[int, ReceivedMessage] = field(default_factory=dict)
    high: int = 0  # next offset after what has been pulled
    locked: bool = False
    dropped: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    room: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    local_retries: int = 0

    def consumed_offset(self) -> int:
        """Where the group resumes: the lowest unconsumed offset, else after the last pull."""
        return min(self.msgs) if self.msgs else self.high


class PushConsumer(ConsumerBase):
    consume_type = "CONSUME_PASSIVELY"

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        listener: Listener | None = None,
        orderly: bool = False,
        consume_batch_size: int = 1,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = PULL_THRESHOLD_FOR_QUEUE,
        concurrency: int = 20,
        max_reconsume_times: int | None = None,
        suspend_s: float = 1.0,
        long_poll_ms: int = 15_000,
        commit_interval_s: float = 5.0,
        rebalance_interval_s: float = 20.0,
        handoff_timeout_s: float = 30.0,
        **options: Unpack[ConsumerOptions],
    ) -> None:
        super().__init__(group, namesrv, **options)
        self.listener = listener
        self.orderly = orderly
        self.consume_batch_size = consume_batch_size
        self.pull_batch_size = pull_batch_size
        if pull_threshold_for_queue < 1:
            raise ClientError("pull_threshold_for_queue must be at least 1")
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.max_reconsume_times = (
            max_reconsume_times if max_reconsume_times is not None else (-1 if orderly else 16)
        )
        self.suspend_s = suspend_s
        self.long_poll_ms = long_poll_ms
        self.commit_interval_s = commit_interval_s
        self.rebalance_interval_s = rebalance_interval_s
        self.handoff_timeout_s = handoff_timeout_s
        self._slots = asyncio.Semaphore(concurrency)
        self._queues: dict[MessageQueue, ProcessQueue] = {}

    @property
    def clustering(self) -> bool:
        return self.model is MessageModel.CLUSTERING

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self.subscriptions[topic] = Subscription(topic, expression)

    def register_listener(self, listener: Listener) -> None:
        self.listener = listener

    def assignment(self) -> set[MessageQueue]:
        return set(self._queues)

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> PushConsumer:
        if self._started:
            return self
        if self.listener is None:
            raise ClientError("register a listener before start")
        if not self.subscriptions:
            raise ClientError("subscribe to a topic before start")
        if self.clustering:
            self.subscriptions.setdefault(
                retry_topic(self.group), Subscription(retry_topic(self.group))
            )
        self._started = True
        await self._register()
        await self._rebalance()
        self._tasks = [
            asyncio.ensure_future(self._rebalance_loop()),
            asyncio.ensure_future(every(self.commit_interval_s, self.commit)),
        ]
        return self

    async def close(self) -> None:
        """Stop pulling, let running listeners finish, commit, unlock, leave the group."""
        if not self._started:
            return
        self._started = False
        await cancel_all(self._tasks)
        for pq in list(self._queues.values()):
            await self._drop(pq)
        await self.instance.unregister(consumer_group=self.group)
        if self._owns_instance:
            await self.instance.close()

    async def __aenter__(self) -> PushConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- rebalance ----------------------------------------------------------------------------
    async def _rebalance(self) -> None:
        wanted: set[MessageQueue] = set()
        for topic in self.subscriptions:
            try:
                wanted.update(await self.allocate(topic))
            except ClientError as exc:
                log.warning("rebalance failed", topic=topic, error=str(exc))
                wanted.update(mq for mq in self._queues if mq.topic == topic)
        for mq in [mq for mq in self._queues if mq not in wanted]:
            await self._drop(self._queues[mq])
        for mq in sorted(wanted - set(self._queues)):
            self._queues[mq] = ProcessQueue(mq)
        await self._start_ready()

    async def _start_ready(self) -> None:
        """Start pulling the queues that may be consumed now: every queue when broadcasting,
        else those whose lock we hold (or, consuming concurrently, whose previous owner has
        not let go within the handoff timeout)."""
        waiting = [pq for pq in self._queues.values() if pq.feed is None]
        if not waiting:
            return
        if self.clustering:
            try:
                locked = await self.lock(pq.mq for pq in waiting)
            except ClientError as exc:
                log.warning("queue lock failed", group=self.group, error=str(exc))
                locked = set()
            for pq in waiting:
                pq.locked = pq.mq in locked
        now = time.monotonic()
        for pq in waiting:
            overdue = not self.orderly and now - pq.assigned_at >= self.handoff_timeout_s
            if not self.clustering or pq.locked or overdue:
                if overdue and not pq.locked:
                    log.warning(
                        "queue still locked by another member, consuming anyway",
                        queue=str(pq.mq),
                        group=self.group,
                    )
                await self._start_queue(pq)

    async def _start_queue(self, pq: ProcessQueue) -> None:
        try:
            offset = await self.start_offset(pq.mq)
        except ClientError as exc:
            log.warning("cannot find where to start", queue=str(pq.mq), error=str(exc))
            return
        pq.high = offset
        pq.room.set()
        pq.feed = QueueFeed(
            self,
            pq.mq,
            offset,
            lambda mq, result: self._deliver(pq, result),
            batch=self.pull_batch_size,
            suspend_ms=self.long_poll_ms,
        )
        if self.orderly:
            self._spawn(pq, self._consume_orderly(pq))
        log.info("queue assigned", queue=str(pq.mq), group=self.group, offset=offset)

    async def consume_directly(self, msg: ReceivedMessage) -> dict[str, Any]:
        """The listener run on one message a broker handed over (an operator's tool asked:
        RocketMQ `consumeMessageDirectly`); nothing is committed or sent back. Java's
        `ConsumeMessageDirectlyResult`."""
        started = time.monotonic()
        remark = None
        try:
            result = await self._listen([original_of(msg)])
            outcome = "CR_RETURN_NULL" if result is None else DIRECT_RESULTS[ConsumeResult(result)]
        except Exception as exc:  # the listener's failure is the answer, not ours
            outcome, remark = "CR_THROW_EXCEPTION", f"{type(exc).__name__}: {exc}"
        return {
            "order": self.orderly,
            "autoCommit": True,
            "consumeResult": outcome,
            "remark": remark,
            "spentTimeMills": int((time.monotonic() - started) * 1000),
        }

    async def reset_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        """Release the queues whose offsets were reset, without committing how far they got;
        the next rebalance takes them again, starting from the offsets the broker now holds."""
        for mq in offsets:
            pq = self._queues.get(mq)
            if pq is not None:
                await self._drop(pq, commit=False)
        self._rebalance_now.set()

    async def _drop(self, pq: ProcessQueue, commit: bool = True) -> None:
        pq.dropped = True
        self._queues.pop(pq.mq, None)
        pq.room.set()
        pq.arrived.set()
        if pq.feed is not None:
            await pq.feed.stop()
        if pq.tasks:
            await asyncio.wait(set(pq.tasks), timeout=10.0)
        if pq.feed is not None and commit:
            self.offsets.update(pq.mq, pq.consumed_offset())
            try:
                await self.offsets.persist([pq.mq])
            except ClientError as exc:
                log.warning("offset commit failed", queue=str(pq.mq), error=str(exc))
        self.offsets.remove(pq.mq)
        if pq.locked:
            await self.unlock([pq.mq])
        log.info("queue released", queue=str(pq.mq), group=self.group)

    async def _rebalance_loop(self) -> None:
        last_full = time.monotonic()
        last_lock = time.monotonic()
        while True:
            pending = any(pq.feed is None for pq in self._queues.values())
            timeout = 1.0 if pending else self.rebalance_interval_s
            notified = await self._rebalance_due(timeout)
            now = time.monotonic()
            try:
                if notified or now - last_full >= self.rebalance_interval_s:
                    last_full = now
                    await self._rebalance()
                else:
                    await self._start_ready()
                if self.clustering and now - last_lock >= LOCK_RENEW_S:
                    last_lock = now
                    await self._renew_locks()
            except ClientError as exc:
                log.warning("rebalance failed", group=self.group, error=str(exc))

    async def _renew_locks(self) -> None:
        held = [pq for pq in self._queues.values() if pq.locked]
        if not held:
            return
        locked = await self.lock(pq.mq for pq in held)
        for pq in held:
            if pq.mq not in locked:
                log.warning("queue lock lost", queue=str(pq.mq), group=self.group)
                pq.locked = False

    async def commit(self) -> None:
        queues = [pq for pq in self._queues.values() if pq.feed is not None]
        for pq in queues:
            self.offsets.update(pq.mq, pq.consumed_offset())
        try:
            await self.offsets.persist([pq.mq for pq in queues])
        except ClientError as exc:
            log.warning("offset commit failed", group=self.group, error=str(exc))

    # --- consuming ----------------------------------------------------------------------------
    def _spawn(self, pq: ProcessQueue, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        pq.tasks.add(task)
        task.add_done_callback(pq.tasks.discard)

    async def _deliver(self, pq: ProcessQueue, result: PullResult) -> None:
        if pq.dropped:
            return
        for msg in result.messages:
            pq.msgs[msg.queue_offset] = msg
        pq.high = max(pq.high, result.next_offset)
        if result.messages:
            if self.orderly:
                pq.arrived.set()
            else:
                size = self.consume_batch_size
                for i in range(0, len(result.messages), size):
                    self._spawn(pq, self._consume(pq, result.messages[i : i + size]))
        if len(pq.msgs) >= self.pull_threshold_for_queue:
            pq.room.clear()
            await pq.room.wait()

    async def _call_listener(self, msgs: list[ReceivedMessage]) -> ConsumeResult:
        try:
            result = await self._listen([original_of(m) for m in msgs])
        except Exception as exc:  # a failing listener means "consume later"
            log.warning("listener raised", group=self.group, error=repr(exc))
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS if result is None else ConsumeResult(result)

    async def _listen(self, view: list[ReceivedMessage]) -> object:
        """The listener's own answer (a coroutine's awaited, a function's run on a thread)."""
        assert self.listener is not None
        if inspect.iscoroutinefunction(self.listener):
            return await self.listener(view)
        result = await asyncio.to_thread(self.listener, view)
        return await result if inspect.isawaitable(result) else result

    def _consumed(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        for msg in msgs:
            pq.msgs.pop(msg.queue_offset, None)
        if len(pq.msgs) < self.pull_threshold_for_queue:
            pq.room.set()

    async def _consume(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        async with self._slots:
            if pq.dropped:
                return
            result = await self._call_listener(msgs)
        failed: list[ReceivedMessage] = []
        if result is ConsumeResult.RECONSUME_LATER:
            if self.clustering:
                for msg in msgs:
                    if not await self.send_back(pq.mq, msg, 0):
                        failed.append(msg)
            else:
                log.warning("broadcast message not consumed, dropped", count=len(msgs))
        retry = {m.queue_offset for m in failed}
        self._consumed(pq, [m for m in msgs if m.queue_offset not in retry])
        if failed and not pq.dropped:
            await asyncio.sleep(5.0)
            self._spawn(pq, self._consume(pq, failed))

    async def _consume_orderly(self, pq: ProcessQueue) -> None:
        while not pq.dropped:
            await pq.arrived.wait()
            pq.arrived.clear()
            while pq.msgs and not pq.dropped:
                if self.clustering and not pq.locked:
                    await asyncio.sleep(self.suspend_s)
                    continue
                offsets = sorted(pq.msgs)[: self.consume_batch_size]
                msgs = [pq.msgs[o] for o in offsets]
                result = await self._call_listener(msgs)
                if result is ConsumeResult.SUCCESS:
                    pq.local_retries = 0
                    self._consumed(pq, msgs)
                    continue
                pq.local_retries += 1
                limit = self.max_reconsume_times
                if 0 <= limit < pq.local_retries:
                    sent = [await self.send_back(pq.mq, m, DLQ_DELAY_LEVEL) for m in msgs]
                    if all(sent):
                        pq.local_retries = 0
                        self._consumed(pq, msgs)
                        continue
                await asyncio.sleep(self.suspend_s)

    async def send_back(self, mq: MessageQueue, msg: ReceivedMessage, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK: the broker stores a copy in `%RETRY%group` (or the DLQ)."""
        header = ConsumerSendMsgBackRequestHeader(
            offset=msg.commitlog_offset,
            group=self.group,
            delay_level=delay_level,
            origin_msg_id=msg.msg_id,
            origin_topic=original_of(msg).topic,
            max_reconsume_times=self.max_reconsume_times if self.max_reconsume_times >= 0 else None,
        )
        try:
            addr = await self._broker(mq)
            response = await self.instance.remoting.invoke(
                addr, RequestCode.CONSUMER_SEND_MSG_BACK, header, timeout_s=self.instance.timeout_s
            )
            check(response, addr)
        except ClientError as exc:
            log.warning(
                "send back failed, consuming again later", msg_id=msg.msg_id, error=str(exc)
            )
            return False
        return True
