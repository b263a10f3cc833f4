"""The pull consumer, lite-pull style (RocketMQ `DefaultLitePullConsumer`).

    consumer = PullConsumer("my-group", namesrv="127.0.0.1:9876")
    consumer.subscribe("T", "TagA || TagB")      # or consumer.assign([...queues])
    await consumer.start()
    while True:
        for msg in await consumer.poll(timeout_s=1.0):
            ...
    await consumer.close()                        # commits what poll returned

Each assigned queue is pulled in the background (long polling) into a bounded buffer; `poll`
takes from it. What `poll` returned counts as consumed: with `auto_commit` the offsets go to the
broker every 5 s and on close, else on `commit()`. `seek` moves a queue to an offset, a time,
its beginning or its end. With `subscribe`, queues are shared out among the group's members
and re-shared when members come and go.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Iterable
from typing import Unpack

import structlog

from rmqpy.client.consumer import (
    ConsumerBase,
    ConsumerOptions,
    PullResult,
    QueueFeed,
)
from rmqpy.client.errors import ClientError
from rmqpy.client.instance import cancel_all, every
from rmqpy.client.message import MessageQueue, ReceivedMessage
from rmqpy.client.subscription import Subscription
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.deadlines import Deadlines

log = structlog.get_logger(__name__)


class PullConsumer(ConsumerBase):
    consume_type = "CONSUME_ACTIVELY"

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        auto_commit: bool = True,
        commit_interval_s: float = 5.0,
        pull_batch_size: int = 32,
        buffered_batches: int = 4,
        long_poll_ms: int = 5_000,
        rebalance_interval_s: float = 5.0,
        **options: Unpack[ConsumerOptions],
    ) -> None:
        super().__init__(group, namesrv, **options)
        self.auto_commit = auto_commit
        self.commit_interval_s = commit_interval_s
        self.pull_batch_size = pull_batch_size
        self.long_poll_ms = long_poll_ms
        self.rebalance_interval_s = rebalance_interval_s
        self._assigned: list[MessageQueue] | None = None
        self._feeds: dict[MessageQueue, QueueFeed] = {}
        # Held while queues change hands (seek, rebalance): a seek pops its queue's feed and
        # waits for it to stop, and a rebalance meanwhile took the queue for unassigned and
        # started it again at the group's start offset, skipping what the seek asked for.
        self._queues_lock = asyncio.Lock()
        self._positions: dict[MessageQueue, int] = {}
        # Pulled batches `poll` has not returned yet, `buffered_batches` at most: a feed
        # whose batch finds them full waits for room (`_room`), so a slow application slows
        # the pulls.
        self.buffered_batches = buffered_batches
        self._batches: deque[tuple[QueueFeed, PullResult]] = deque()
        self._room: list[asyncio.Future[None]] = []
        self._waiters: set[asyncio.Future[None]] = set()  # polls waiting for a batch
        self._poll_timeouts: Deadlines[asyncio.Future[None], None] | None = None  # (their ends)

    # --- setup --------------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*") -> None:
        if self._assigned is not None:
            raise ClientError("subscribe and assign cannot be mixed")
        self.subscriptions[topic] = Subscription(topic, expression)

    def assign(self, queues: Iterable[MessageQueue], expression: str = "*") -> None:
        if self.subscriptions and self._assigned is None:
            raise ClientError("subscribe and assign cannot be mixed")
        self._assigned = list(queues)
        for mq in self._assigned:
            self.subscriptions.setdefault(mq.topic, Subscription(mq.topic, expression))

    async def start(self) -> PullConsumer:
        if self._started:
            return self
        if not self.subscriptions:
            raise ClientError("subscribe to a topic or assign queues before start")
        self._started = True
        await self._register()
        if self._assigned is None:
            await self._rebalance()
            self._tasks.append(asyncio.ensure_future(self._rebalance_loop()))
        else:
            await self._set_queues(self._assigned)
        if self.auto_commit:
            self._tasks.append(asyncio.ensure_future(every(self.commit_interval_s, self.commit)))
        return self

    async def close(self) -> None:
        if not self._started:
            return
        self._started = False
        await cancel_all(self._tasks)
        for feed in list(self._feeds.values()):
            await feed.stop()
        if self.auto_commit:
            with contextlib.suppress(ClientError):
                await self.commit()
        await self.instance.unregister(consumer_group=self.group)
        if self._owns_instance:
            await self.instance.close()

    async def __aenter__(self) -> PullConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- consuming ----------------------------------------------------------------------------
    def assignment(self) -> set[MessageQueue]:
        return set(self._feeds)

    async def poll(self, timeout_s: float = 1.0) -> list[ReceivedMessage]:
        """The messages of the next pulled batches, waiting up to `timeout_s` for one."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not self._batches:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                await self._batch_or_timeout(left)
                continue
            batches, self._batches = self._batches, deque()
            # Every feed waiting for room looks again (one woken and then cancelled
            # before it ran must not leave the others waiting).
            room, self._room = self._room, []
            for waiter in room:
                _wake(waiter)
            out: list[ReceivedMessage] = []
            for feed, result in batches:
                out += self._take(feed, result)
            if out:
                return out

    async def _batch_or_timeout(self, timeout_s: float) -> None:
        """Until `_deliver` buffers a batch or `timeout_s` passes: a future with a deadline,
        as `poll` runs once per batch (no task per call as `wait_for` makes, no timer per
        call, and a cancel of the caller is never swallowed)."""
        loop = asyncio.get_running_loop()
        if self._poll_timeouts is None:
            self._poll_timeouts = Deadlines(loop, _wake_at_deadline)
        waiter = loop.create_future()
        self._waiters.add(waiter)
        self._poll_timeouts.add(waiter, timeout_s, None)
        try:
            await waiter
        finally:
            self._poll_timeouts.discard(waiter)
            self._waiters.discard(waiter)

    def _take(self, feed: QueueFeed, result: PullResult) -> list[ReceivedMessage]:
        if self._feeds.get(feed.mq) is not feed:
            return []  # the queue was sought or reassigned since this was pulled
        self.offsets.update(feed.mq, result.next_offset)
        self._positions[feed.mq] = result.next_offset
        return result.messages

    async def _deliver(self, mq: MessageQueue, result: PullResult) -> None:
        feed = self._feeds.get(mq)
        if feed is None or not (result.messages or result.next_offset != feed.next_offset):
            return
        while len(self._batches) >= self.buffered_batches:
            room = asyncio.get_running_loop().create_future()
            self._room.append(room)
            await room
        self._batches.append((feed, result))
        for waiter in self._waiters:
            _wake(waiter)

    # --- offsets ------------------------------------------------------------------------------
    async def commit(self) -> None:
        """Send the offsets of what `poll` returned to the broker (or the local file)."""
        await self.offsets.persist(list(self._feeds))

    def position(self, mq: MessageQueue) -> int:
        """The offset of the next message `poll` will return from `mq`."""
        try:
            return self._positions[mq]
        except KeyError:
            raise ClientError(f"queue {mq} is not assigned to this consumer") from None

    async def committed(self, mq: MessageQueue) -> int | None:
        return await self.offsets.read(mq)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        async with self._queues_lock:
            if mq not in self._feeds:
                raise ClientError(f"queue {mq} is not assigned to this consumer")
            await self._start_feed(mq, offset)
            self.offsets.update(mq, offset)

    async def reset_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        for mq, offset in offsets.items():
            if mq in self._feeds:
                await self.seek(mq, offset)

    async def seek_to_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> None:
        await self.seek(mq, await self.search_offset(mq, timestamp_ms))

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        await self.seek(mq, await self.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        await self.seek(mq, await self.max_offset(mq))

    # --- queues -------------------------------------------------------------------------------
    async def _start_feed(self, mq: MessageQueue, offset: int) -> None:
        old = self._feeds.pop(mq, None)
        if old is not None:
            await old.stop()
        self._positions[mq] = offset
        self._feeds[mq] = QueueFeed(
            self,
            mq,
            offset,
            self._deliver,
            batch=self.pull_batch_size,
            suspend_ms=self.long_poll_ms,
        )

    async def _set_queues(self, queues: Iterable[MessageQueue]) -> None:
        async with self._queues_lock:
            await self._set_queues_locked(set(queues))

    async def _set_queues_locked(self, wanted: set[MessageQueue]) -> None:
        for mq in [mq for mq in self._feeds if mq not in wanted]:
            feed = self._feeds.pop(mq)
            self._positions.pop(mq, None)
            await feed.stop()
            with contextlib.suppress(ClientError):
                await self.offsets.persist([mq])
            self.offsets.remove(mq)
            log.info("queue released", queue=str(mq), group=self.group)
        for mq in sorted(wanted - set(self._feeds)):
            await self._start_feed(mq, await self.start_offset(mq))
            log.info("queue assigned", queue=str(mq), group=self.group)

    async def _rebalance(self) -> None:
        queues: list[MessageQueue] = []
        for topic in self.subscriptions:
            try:
                queues += await self.allocate(topic)
            except ClientError as exc:
                # Keep what this member holds: a name server that does not answer (or not
                # yet knows the topic) is no reason to give queues up.
                held = [mq for mq in self._feeds if mq.topic == topic]
                queues += held
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    log.warning("rebalance failed", topic=topic, group=self.group, error=str(exc))
                elif not held:
                    log.warning("subscribed topic does not exist yet", topic=topic,
                                group=self.group)  # fmt: skip
        await self._set_queues(queues)

    async def _rebalance_loop(self) -> None:
        while True:
            await self._rebalance_due(self.rebalance_interval_s)
            try:
                await self._rebalance()
            except ClientError as exc:
                log.warning("rebalance failed", group=self.group, error=str(exc))


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _wake_at_deadline(waiter: asyncio.Future[None], _value: None) -> None:
    _wake(waiter)
