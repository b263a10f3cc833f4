"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) (RocketMQ `PullMessageProcessor`).

The body of a found pull is the stored records back to back. Every answer carries
`nextBeginOffset`, `minOffset`, `maxOffset` and `suggestWhichBrokerId` (clients crash without
them). A pull that would answer PULL_NOT_FOUND and carries SUSPEND is parked in the hold
service; its second run (`ctx` flagged `resumed`) never parks and never commits an offset.

A pull whose records are in the page cache - the usual pull of a consumer keeping up - is
run on the event loop the moment its read arrives (`pull_read`) or its parked wait ends
(`resume`), and answered at once: no executor hand-over, and a woken pull keeps the header
parsed on its first run. A pull that would read the disk goes to the pull threads. Where the
compiled core is built, its pull lane (`broker.processors._pull`) answers or parks the common
pull on the loop first, writing its answer frame whole; what it declines runs here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from rmqpy.broker.clients import ClientManager, Subscription
from rmqpy.broker.context import RequestContext, deliver
from rmqpy.broker.executors import run_processor
from rmqpy.broker.groups import SubscriptionGroupManager
from rmqpy.broker.long_polling import ParkedPull, PullRequestHoldService, parked_pull_class
from rmqpy.broker.metrics import BrokerMetrics
from rmqpy.broker.offsets import ConsumerOffsetManager
from rmqpy.broker.topics import TopicConfigManager
from rmqpy.config.compiled import twin
from rmqpy.remoting.codes import PERM_READ, ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.headers.pull import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from rmqpy.remoting.protocol import Connection
from rmqpy.remoting.wire import MAX_FRAME_LENGTH
from rmqpy.store.layout import GetMessageStatus
from rmqpy.store.message_store import GetMessageResult, MessageStore

if TYPE_CHECKING:
    from rmqpy.broker.processors._pull import PullLane

STATUS_CODES = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
}
EMPTY_QUEUE = (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)
RAISED = object()  # the lane's answer where it raised


class PullProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        clients: ClientManager,
        offsets: ConsumerOffsetManager,
        hold: PullRequestHoldService,
        broker_permission: int,
        long_polling_enable: bool,
        short_polling_ms: int,
        is_master: bool,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.clients = clients
        self.offsets = offsets
        self.hold = hold
        self.broker_permission = broker_permission
        self.long_polling_enable = long_polling_enable
        self.short_polling_ms = short_polling_ms
        self.is_master = is_master
        self.metrics = metrics
        # Where a pull that would read the disk goes (the pull threads; set by the broker).
        self.hand_over: Callable[[RequestContext], None] | None = None
        compiled = twin("rmqpy.broker.processors._pull")
        self.lane: PullLane | None = None
        if compiled is not None:
            self.lane = compiled.PullLane(self, parked_pull_class())

    def reads_memory(self, ctx: RequestContext) -> bool:
        """Whether this pull reads only what the page cache holds, and so may run on the
        event loop (see `MessageStore.pull_reads_memory`); taken from the raw fields, before
        the header is parsed - a malformed one raises, and goes to a pull thread."""
        ext = ctx.request.ext_fields
        return self.store.pull_reads_memory(
            ext["topic"], int(ext["queueId"]), int(ext["queueOffset"])
        )

    def pull_read(
        self,
        conn: Connection,
        requests: list[RemotingCommand],
        received_s: float,
        loop: asyncio.AbstractEventLoop,
    ) -> bool:
        """The pulls of one read run and answered at once, on the loop, but those that would
        read the disk: each of those goes to the pull threads (`hand_over`). The lane serves
        what it can straight from the header fields; the rest have their headers parsed here.
        False, having changed nothing, when the lane is not built and a header does not
        parse (the executor's way answers it)."""
        if self.lane is None:
            try:
                headers = [PullMessageRequestHeader.from_ext(r.ext_fields) for r in requests]
            except Exception:
                return False
            pulls = [
                (RequestContext(conn, request, loop, received_s), h)
                for request, h in zip(requests, headers, strict=True)
            ]
            self._hand_over(self._answer_now(pulls))
            return True
        cold, declined = self.lane.answer_read(conn, requests, received_s, loop)
        self._hand_over(cold)
        if declined:
            parsed: list[tuple[RequestContext, PullMessageRequestHeader]] = []
            for ctx in declined:
                try:
                    parsed.append((ctx, PullMessageRequestHeader.from_ext(ctx.request.ext_fields)))
                except Exception:
                    self._hand_over([ctx])  # the pull threads answer what does not parse
            self._hand_over(self._answer_now(parsed, with_lane=False))
        return True

    def pull_frames(
        self,
        conn: Connection,
        data: memoryview,
        received_s: float,
        loop: asyncio.AbstractEventLoop,
    ) -> int:
        """The pulls at the start of a read's bytes served straight from their frames
        (`PullLane.answer_frames`: no command, header or context per pull but for one that
        parks or would read the disk), as `pull_read` serves them once decoded, those that
        would read the disk handed to the pull threads: how many bytes of `data` they took,
        0 for none (the bytes are then decoded and taken the usual way). At most as many as
        may be in flight on `conn` before its reading pauses, which the decoder's way
        arranges."""
        lane = self.lane
        room = conn.max_in_flight - conn.in_flight - 1
        if lane is None or room <= 0:
            return 0
        used, cold = lane.answer_frames(conn, data, MAX_FRAME_LENGTH, received_s, loop, room)
        if cold:  # (rare: records that left the page cache)
            self._hand_over(cold)
        return used

    def _hand_over(self, pulls: list[RequestContext]) -> None:
        for ctx in pulls:
            assert self.hand_over is not None
            self.hand_over(ctx)

    def resume(self, pulls: list[ParkedPull], now: float) -> list[ParkedPull]:
        """On the loop: woken pulls, their hold ending `now`, that read only the page cache
        answered at once, with the header parsed when they were parked; the others
        returned, for the pull threads."""
        lane = self.lane
        if lane is not None:
            cold, declined = lane.answer_parked(pulls, now)
            if declined:
                not_run = {id(ctx) for ctx in self._answer_now(declined, with_lane=False)}
                cold += [pull for pull in pulls if id(pull.ctx) in not_run]
            return cold
        for pull in pulls:
            pull.ctx.held_s = now - pull.ctx.received_s
            pull.ctx.received_s = now
        not_run = {id(ctx) for ctx in self._answer_now([(p.ctx, p.header) for p in pulls])}
        return [pull for pull in pulls if id(pull.ctx) in not_run]

    def _answer_now(
        self, pulls: list[tuple[RequestContext, PullMessageRequestHeader]], with_lane: bool = True
    ) -> list[RequestContext]:
        """Run pulls and write their answers (none for one that parks, or that was held and
        whose consumer has hung up since), their latencies counted, as the pull executor
        does for the pulls it runs; those that would read the disk are returned, not run.
        The lane answers what it can (without `with_lane`, for the pulls it declined),
        each connection's frames written together."""
        lane = self.lane if with_lane else None
        frames: dict[Connection, list[bytes]] = {}
        handled: dict[Connection, int] = {}
        answers: list[tuple[RequestContext, RemotingCommand]] = []
        cold: list[RequestContext] = []
        for ctx, h in pulls:
            if ctx.resumed and ctx.conn.closed.done():
                continue
            if lane is not None:
                out: object
                try:
                    out = lane.answer(ctx, h)
                except Exception:
                    out = RAISED  # declined: the reference answers it, or says what failed
                if out is None:
                    continue  # parked
                if out is False:  # it would read the disk: asked once (see `read_hot`)
                    cold.append(ctx)
                    continue
                if isinstance(out, tuple):  # answered, else declined
                    head, body = out
                    conn = ctx.conn
                    parts = frames.setdefault(conn, [])
                    parts.append(head)
                    if body:
                        parts.append(body)
                    handled[conn] = handled.get(conn, 0) + 1
                    continue
            try:
                hot = self.store.pull_reads_memory(h.topic, h.queue_id, h.queue_offset)
            except Exception:
                hot = False
            if not hot:
                cold.append(ctx)
                continue
            answer = run_processor(partial(self._answers, h), [ctx])[0]
            if answer is not None:
                answers.append((ctx, answer))
        for conn, parts in frames.items():
            conn.answer_frames(parts, handled[conn])
        if answers:
            deliver(answers)
            if self.metrics is not None:
                self.metrics.record_rpcs(answers)
        return cold

    def _answers(
        self, h: PullMessageRequestHeader, group: Sequence[RequestContext]
    ) -> list[RemotingCommand | None]:
        return [self.answer(group[0], h)]

    def __call__(self, ctx: RequestContext) -> RemotingCommand | None:
        return self.answer(ctx, PullMessageRequestHeader.from_ext(ctx.request.ext_fields))

    def answer(self, ctx: RequestContext, h: PullMessageRequestHeader) -> RemotingCommand | None:
        """The pull's answer, or None when it parks (or was held and its consumer has hung
        up since: nothing is read for nobody)."""
        if ctx.resumed and ctx.conn.closed.done():
            return None
        refusal = self._refusal(ctx, h)
        if refusal is not None:
            return refusal
        if h.expression_type not in (None, "", "TAG"):
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR,
                "The broker does not support consumer to filter message by SQL92",
            )
        if h.sys_flag & FLAG_SUBSCRIPTION:
            sub = Subscription.parse(h.topic, h.subscription, h.sub_version)
        else:
            sub = self.clients.subscription(h.consumer_group, h.topic) or Subscription.parse(
                h.topic, "*"
            )
        result = self.store.get_message(
            h.topic,
            h.queue_id,
            h.queue_offset,
            h.max_msg_nums,
            sub.codes,
            h.max_msg_bytes,
        )
        code, next_begin = _code_and_next(result, h.queue_offset)
        first_pass = not ctx.resumed
        if (
            first_pass
            and h.sys_flag & FLAG_COMMIT_OFFSET
            and self.is_master
            and h.commit_offset >= 0
        ):
            self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        if code == ResponseCode.PULL_NOT_FOUND and first_pass and h.sys_flag & FLAG_SUSPEND:
            hold_ms = (
                h.suspend_timeout_millis if self.long_polling_enable else self.short_polling_ms
            )
            ctx.resumed = True
            self.hold.park(
                ParkedPull(
                    ctx,
                    h.topic,
                    h.queue_id,
                    h.queue_offset,
                    sub,
                    time.monotonic() + hold_ms / 1000,
                    h,
                )
            )
            return None
        ext = PullMessageResponseHeader(
            0, next_begin, result.min_offset, result.max_offset
        ).to_ext()
        body = result.body if code == ResponseCode.SUCCESS else b""
        if self.metrics is not None:
            self.metrics.record_pull(
                h.consumer_group,
                h.topic,
                h.queue_id,
                next_begin,
                result.count if body else 0,
                len(body),
            )
        return ctx.request.response(code, result.status.name, ext, body)

    def _refusal(self, ctx: RequestContext, h: PullMessageRequestHeader) -> RemotingCommand | None:
        if not self.broker_permission & PERM_READ:
            return ctx.request.response(
                ResponseCode.NO_PERMISSION, "the broker pulling message is forbidden"
            )
        group = self.groups.find(h.consumer_group)
        if group is None:
            return ctx.request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{h.consumer_group}] does not exist",
            )
        if not group.consumeEnable:
            return ctx.request.response(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}"
            )
        config = self.topics.get(h.topic)
        if config is None:
            return ctx.request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!"
            )
        if not config.readable:
            return ctx.request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden"
            )
        if not 0 <= h.queue_id < config.readQueueNums:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{config.readQueueNums}] consumer:[{ctx.client_addr}]",
            )
        return None


def _code_and_next(result: GetMessageResult, offset: int) -> tuple[int, int]:
    if result.status in EMPTY_QUEUE:
        code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
        return code, result.next_begin_offset
    return STATUS_CODES.get(result.status, ResponseCode.SYSTEM_ERROR), result.next_begin_offset
