"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36) (RocketMQ `SendMessageProcessor`).

Every send that arrived in one event-loop iteration reaches `SendProcessor` as one group and
is stored with one `put_messages` call (one put-lock acquisition, one group commit). Under
ASYNC_FLUSH, with sends stored on the loop, a read of plain sends is first offered to
`send_read`, which stages, stores and answers it straight from the read (the compiled lane's
frames, written whole), without a context, executor hand-over or answer object per send.
Checks come first and answer with Java's codes and remarks: broker or topic not writable
(16), unknown topic with auto-create off (17), queue id out of range (1), body or properties
too large (13, from the store).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TYPE_CHECKING

import structlog

from rmqpy.broker.context import BadRequest, RequestContext, deliver
from rmqpy.broker.groups import SubscriptionGroupManager
from rmqpy.broker.metrics import BrokerMetrics, tally_answered
from rmqpy.broker.topics import (
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfig,
    TopicConfigManager,
    dlq_topic,
    retry_topic,
)
from rmqpy.config.compiled import twin
from rmqpy.remoting.batch_body import decode_batch_body
from rmqpy.remoting.codes import DEFAULT_TOPIC, PERM_WRITE, RequestCode, ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import RemoteProtocolError
from rmqpy.remoting.frame import decode_frames
from rmqpy.remoting.headers import HeaderError
from rmqpy.remoting.headers.admin import ConsumerSendMsgBackRequestHeader
from rmqpy.remoting.headers.send import SendMessageRequestHeader, SendMessageResponseHeader
from rmqpy.remoting.protocol import Connection
from rmqpy.remoting.wire import MAX_FRAME_LENGTH
from rmqpy.store.commitlog import PutMessageResult
from rmqpy.store.layout import SCHEDULE_TOPIC, MessageConst, PutMessageStatus, SysFlag
from rmqpy.store.message import (
    FieldRangeError,
    Host,
    Message,
    decode_properties,
    decode_record,
    encode_properties,
    illegal_message_remark,
    message_from_record,
    property_value,
    send_template,
    with_property,
)
from rmqpy.store.message_id import create_offset_msg_id
from rmqpy.store.message_store import MessageStore
from rmqpy.store.staged import StagedSends

if TYPE_CHECKING:
    from rmqpy.broker.processors._send import SendLane

log = structlog.get_logger(__name__)

PUT_STATUS_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
}
# Codes a producer takes as a stored message.
STORED_CODES = (
    ResponseCode.SUCCESS,
    ResponseCode.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE,
)
_MSG_ID, _QUEUE_ID, _QUEUE_OFFSET = list(SendMessageResponseHeader.wire_fields())[:3]


def is_transaction_half(sys_flag: int, props_text: str) -> bool:
    """A transaction's half message: TRAN_MSG "true" (as Java's Boolean.parseBoolean reads
    it), or a PREPARED sysFlag."""
    tran = property_value(props_text, MessageConst.TRANSACTION_PREPARED)
    prepared = sys_flag & SysFlag.TRANSACTION_MASK == SysFlag.TRANSACTION_PREPARED_TYPE
    return prepared or (tran is not None and tran.lower() == "true")


class SendRefused(Exception):
    """A send answered with an error before it reaches the store."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass(frozen=True, slots=True)
class SendIdentity:
    cluster_name: str
    broker_name: str
    broker_permission: int
    auto_create_topic: bool
    region_id: str = "DefaultRegion"


class SendProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        identity: SendIdentity,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.identity = identity
        self.metrics = metrics
        self.later: LaterAnswers | None = None  # SYNC_FLUSH: answers once the flush is done
        self.lane: SendLane | None
        # The compiled twin of the common send's work, where it is built.
        self._compiled = twin("rmqpy.broker.processors._send")
        self.lane = None if self._compiled is None else self.compiled_lane(self._compiled)

    def set_permission(self, broker_permission: int) -> None:
        """A new brokerPermission (UPDATE_BROKER_CONFIG): sends are judged by it from now."""
        self.identity = replace(self.identity, broker_permission=broker_permission)
        if self._compiled is not None:
            self.lane = self.compiled_lane(self._compiled)

    def compiled_lane(self, compiled: ModuleType) -> SendLane:
        """The lane of `broker.processors._send` for this processor."""
        lane: SendLane = compiled.SendLane(
            SendMessageRequestHeader.ext_keys(v2=False),
            SendMessageRequestHeader.ext_keys(v2=True),
            self._lane_route,
            bool(self.identity.broker_permission & PERM_WRITE),
            self.identity.cluster_name,
            self.identity.region_id,
            (_MSG_ID, _QUEUE_ID, _QUEUE_OFFSET),
            self.store.commitlog.store_host,
            self.store.config.max_message_size,
        )
        return lane

    # --- sends ------------------------------------------------------------------------------
    def send_read(
        self,
        conn: Connection,
        requests: list[RemotingCommand],
        received_s: float,
        loop: asyncio.AbstractEventLoop,
    ) -> bool:
        """The sends of one read of `conn` stored and answered at once, on the loop, when
        they can all be staged and stored (`SendLane.stage_read`): no request context,
        executor hand-over, result or answer object per send. Under SYNC_FLUSH they are
        answered once the group commit has flushed them (`later`). False, having changed
        nothing, when they take the executor's way (`__call__`)."""
        lane = self.lane
        if lane is None or (self.later is None and self.store.commitlog.flush_waiter):
            return False  # puts that would wait for their flush here: the executor's way
        try:
            staged = lane.stage_read(conn.peer, requests)
        except Exception:  # the executor's way runs them again, and answers what failed
            return False
        if staged is None:
            return False
        waiting = None if self.later is None else self.later.expect()
        try:
            if not self.store.put_staged(
                staged, None if waiting is None else lambda _: waiting.done([])
            ):
                if waiting is not None:
                    waiting.cancel()
                return False
        except Exception as exc:
            self._answer_now(self._failed_read(conn, requests, received_s, loop, exc))
            return True
        if waiting is not None:
            if staged.waits:  # answered once flushed, or FLUSH_DISK_TIMEOUT
                waiting.answer_with(
                    lambda timed_out: self._read_answers(
                        conn, requests, staged, received_s, loop, timed_out
                    )
                )
                return True
            waiting.cancel()  # WAIT false: answered now
        self._answer_now(self._read_answers(conn, requests, staged, received_s, loop))
        return True

    def send_frames(
        self,
        conn: Connection,
        data: memoryview,
        received_s: float,
        loop: asyncio.AbstractEventLoop,
    ) -> int:
        """The sends at the start of a read's bytes stored and answered straight from their
        frames (`SendLane.stage_frames`: no command, header object or request context per
        send), as `send_read` stores and answers them once decoded: how many bytes of
        `data` they took, 0 when none (having changed nothing; the bytes are decoded and
        taken the usual way). Under SYNC_FLUSH it takes none."""
        lane = self.lane
        if lane is None or self.later is not None or self.store.commitlog.flush_waiter:
            return 0
        try:
            staged_read = lane.stage_frames(conn.peer, data, MAX_FRAME_LENGTH)
        except Exception:  # decoded, the usual way answers what is wrong with them
            return 0
        if staged_read is None:
            return 0
        used, staged, opaques, kinds = staged_read
        try:
            if not self.store.put_staged(staged):
                return 0
            frames = lane.answer_opaques(opaques, kinds, staged, self.store.commitlog.store_host)
        except Exception as exc:
            requests = self._decoded(data[:used])
            conn.taken(len(requests))
            self._answer_now(self._failed_read(conn, requests, received_s, loop, exc))
            return used
        if frames is None:  # a refusal (a full disk): answered from the decoded requests
            requests = self._decoded(data[:used])
            conn.taken(len(requests))
            self._answer_now(self._read_answers(conn, requests, staged, received_s, loop))
            return used
        conn.answer_frames(frames, 0)  # first: metrics need not delay the answers
        metrics = self.metrics
        if metrics is not None:
            tally_answered(
                metrics,
                RequestCode.SEND_MESSAGE_V2,
                len(opaques),
                ResponseCode.SUCCESS,
                time.monotonic() - received_s,
                staged,
            )
        return used

    @staticmethod
    def _decoded(data: memoryview) -> list[RemotingCommand]:
        """The commands of whole frames the send lane took."""
        commands, _, error = decode_frames(data, 0, MAX_FRAME_LENGTH, False)
        if error is not None:
            raise error
        return commands

    def _read_answers(
        self,
        conn: Connection,
        requests: list[RemotingCommand],
        staged: StagedSends,
        received_s: float,
        loop: asyncio.AbstractEventLoop,
        timed_out: bool = False,
    ) -> Answers:
        """A stored read's answers: written whole by the lane where it can (all stored and
        in time, and frames it can write), else returned to be delivered; SYSTEM_ERROR for
        each where building them failed, as `run_processor` answers a processor that did."""
        lane = self.lane
        assert lane is not None
        try:
            frames = None
            if not timed_out:
                frames = lane.answer_frames(requests, staged, self.store.commitlog.store_host)
            if frames is None:  # a refusal, a timeout, or frames only the command writer writes
                group = [RequestContext(conn, r, loop, received_s) for r in requests]
                answers: list[RemotingCommand | None] = [None] * len(group)
                self._answer_staged(group, staged, answers, timed_out)
                return [(ctx, a) for ctx, a in zip(group, answers, strict=True) if a is not None]
        except Exception as exc:
            return self._failed_read(conn, requests, received_s, loop, exc)
        conn.answer_frames(frames, len(requests))  # first: metrics need not delay the answers
        metrics = self.metrics
        if metrics is not None:
            codes = [r.code for r in requests]
            metrics.record_answered(codes, ResponseCode.SUCCESS, received_s, staged)
        return []

    @staticmethod
    def _failed_read(
        conn: Connection,
        requests: list[RemotingCommand],
        received_s: float,
        loop: asyncio.AbstractEventLoop,
        exc: Exception,
    ) -> Answers:
        log.exception("storing a read of sends failed", peer=conn.peer, exc_info=exc)
        remark = f"{type(exc).__name__}: {exc}"
        return [
            (
                RequestContext(conn, r, loop, received_s),
                r.response(ResponseCode.SYSTEM_ERROR, remark),
            )
            for r in requests
        ]

    def _answer_now(self, pairs: list[tuple[RequestContext, RemotingCommand]]) -> None:
        """Write answers on the loop, their latencies counted (`FamilyExecutor.answer` for
        sends the executor never saw)."""
        if not pairs:
            return
        deliver(pairs)
        if self.metrics is not None:
            self.metrics.record_rpcs(pairs)

    def __call__(self, group: Sequence[RequestContext]) -> list[RemotingCommand | None]:
        answers: list[RemotingCommand | None] = [None] * len(group)
        lane = self.lane
        if lane is None:
            puts, owners = self._group_messages(group, answers)
        else:
            sends = list(group)
            staged = lane.stage(sends)
            if staged is not None and self._put_staged(sends, staged, answers):
                return answers
            puts, owners = lane.group_messages(sends, answers, self._messages_or_refusal)
        if not puts:
            return answers
        later = self.later
        if later is None:
            results = self.store.put_messages(puts)
            self._answer_all(group, owners, puts, results, answers)
            return answers
        # SYNC_FLUSH: answered by `later` once the group commit has flushed them; the
        # loop goes on with the next sends meanwhile, and the next flush covers those.
        waiting = later.expect()
        results, pending = self.store.put_messages_then(puts, waiting.done)
        if not pending:
            waiting.cancel()
            self._answer_all(group, owners, puts, results, answers)
            return answers

        self._answer_later(
            waiting,
            group,
            lambda out, timed_out: self._answer_all(group, owners, puts, results, out, timed_out),
        )
        return answers

    @staticmethod
    def _answer_later(
        waiting: PendingAnswers,
        group: Sequence[RequestContext],
        fill: Callable[[list[RemotingCommand | None], bool], None],
    ) -> None:
        """Answer `group` once its flush is done (or timed out): `fill(answers, timed_out)`
        writes the answers of the sends it stored."""

        def answer(timed_out: bool) -> list[tuple[RequestContext, RemotingCommand]]:
            out: list[RemotingCommand | None] = [None] * len(group)
            fill(out, timed_out)
            return [(ctx, a) for ctx, a in zip(group, out, strict=True) if a is not None]

        waiting.answer_with(answer)

    def _put_staged(
        self,
        group: list[RequestContext],
        staged: StagedSends,
        answers: list[RemotingCommand | None],
    ) -> bool:
        """Staged sends (`SendLane.stage`) into the store, answered in `answers` or, under
        SYNC_FLUSH, by `later` once flushed; False when the store declined them."""
        later = self.later
        if later is None:
            if not self.store.put_staged(staged):
                return False
            self._answer_staged(group, staged, answers)
            return True
        waiting = later.expect()
        if not self.store.put_staged(staged, lambda _: waiting.done([])):
            waiting.cancel()
            return False
        if not staged.waits:
            waiting.cancel()
            self._answer_staged(group, staged, answers)
            return True

        self._answer_later(
            waiting,
            group,
            lambda out, timed_out: self._answer_staged(group, staged, out, timed_out),
        )
        return True

    def _answer_staged(
        self,
        group: list[RequestContext],
        staged: StagedSends,
        answers: list[RemotingCommand | None],
        timed_out: bool = False,
    ) -> None:
        if self.metrics is not None:
            self.metrics.record_staged(staged)
        lane = self.lane
        if lane is not None and staged.status in (
            PutMessageStatus.PUT_OK,
            PutMessageStatus.FLUSH_DISK_TIMEOUT,
        ):
            lane.answer_staged(group, staged, answers, timed_out, self.store.commitlog.store_host)
            return
        failed = PutMessageResult(staged.status, remark=staged.remark)
        for i, ctx in enumerate(group):
            answers[i] = self._answer(ctx, [], failed, timed_out)

    def _group_messages(
        self, group: Sequence[RequestContext], answers: list[RemotingCommand | None]
    ) -> tuple[list[list[Message]], list[int]]:
        """Each send's messages (the puts, and the index in `group` of each), or its refusal
        in `answers`."""
        puts: list[list[Message]] = []
        owners: list[int] = []
        for i, ctx in enumerate(group):
            made = self._messages_or_refusal(ctx)
            if isinstance(made, RemotingCommand):
                answers[i] = made
            else:
                puts.append(made)
                owners.append(i)
        return puts, owners

    def _messages_or_refusal(self, ctx: RequestContext) -> list[Message] | RemotingCommand:
        try:
            return self._messages(ctx)
        except SendRefused as exc:
            return ctx.request.response(exc.code, exc.remark)
        except (HeaderError, RemoteProtocolError, FieldRangeError) as exc:
            return ctx.request.response(ResponseCode.MESSAGE_ILLEGAL, str(exc))

    def _answer_all(
        self,
        group: Sequence[RequestContext],
        owners: list[int],
        puts: list[list[Message]],
        results: list[PutMessageResult],
        answers: list[RemotingCommand | None],
        timed_out: bool = False,
    ) -> None:
        if self.metrics is not None:
            self.metrics.record_puts(puts, results)
        lane = self.lane
        if lane is not None:
            lane.answer_all(list(group), owners, puts, results, answers, timed_out, self._answer)
            return
        for i, msgs, result in zip(owners, puts, results, strict=True):
            answers[i] = self._answer(group[i], msgs, result, timed_out)

    def _lane_route(self, topic: str) -> int:
        """The write queues of a topic the compiled lane may send to as it is; 0 for one
        the reference must see (forbidden, retry or DLQ routing, missing, not writable)."""
        if topic in (DEFAULT_TOPIC, SCHEDULE_TOPIC) or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return 0
        config = self.topics.table.get(topic)  # (`get` and `writable`, without their calls)
        return config.writeQueueNums if config is not None and config.perm & PERM_WRITE else 0

    def _messages(self, ctx: RequestContext) -> list[Message]:
        request = ctx.request
        v2 = request.code != RequestCode.SEND_MESSAGE
        h = SendMessageRequestHeader.from_ext(request.ext_fields, v2=v2)
        if not self.identity.broker_permission & PERM_WRITE:
            raise SendRefused(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.identity.broker_name}] sending message is forbidden",
            )
        if h.topic in (DEFAULT_TOPIC, SCHEDULE_TOPIC):
            raise SendRefused(
                ResponseCode.NO_PERMISSION, f"Sending message to topic[{h.topic}] is forbidden."
            )
        topic = h.topic
        props_text = h.properties or ""
        if is_transaction_half(h.sys_flag, props_text):
            # As a Java broker with rejectTransactionMessage answers it: stored, a half
            # message would wait for an END_TRANSACTION (sent oneway) that is never served.
            raise SendRefused(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.identity.broker_name}] sending transaction message is "
                "forbidden: rmqpy has no transactions yet",
            )
        reconsume_times = h.reconsume_times or 0
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            props = decode_properties(props_text)
            topic = self._retry_or_dlq(topic, reconsume_times, h.max_reconsume_times, props)
            props_text = encode_properties(props)
        config = self._topic_for_send(topic, h)
        queue_id = h.queue_id
        if queue_id < 0 or topic != h.topic:
            queue_id = random.randrange(config.writeQueueNums)
        if queue_id >= config.writeQueueNums:
            raise SendRefused(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, {config} Producer: {ctx.client_addr}",
            )
        props_text = with_property(props_text, MessageConst.CLUSTER, self.identity.cluster_name)
        batch = request.code == RequestCode.SEND_BATCH_MESSAGE or h.batch
        if batch and (property_value(props_text, MessageConst.DELAY) or "0") != "0":
            # RocketMQ's CommitLog.putMessages refuses it the same way.
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, "a batch cannot take a delay level")
        template = send_template(
            topic,
            queue_id,
            props_text if batch else "",
            h.sys_flag,
            Host.parse(ctx.client_addr),
            reconsume_times,
        )
        born = h.born_timestamp
        if batch:
            # Each item's properties as sent, then the batch's.
            message = template.message
            return [
                message(body, flag, props, born)
                for flag, body, props in decode_batch_body(request.body)
            ]
        return [template.message(request.body, h.flag, props_text, born)]

    def _topic_for_send(self, topic: str, h: SendMessageRequestHeader) -> TopicConfig:
        config = self.topics.get(topic)
        if config is None and self.identity.auto_create_topic:
            try:
                config = self.topics.create_for_send(
                    topic, h.default_topic, h.default_topic_queue_nums
                )
            except ValueError as exc:
                raise SendRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        if config is None:
            raise SendRefused(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
            )
        if not config.writable:
            raise SendRefused(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
            )
        return config

    def _retry_or_dlq(
        self, topic: str, reconsume_times: int, header_max: int | None, props: dict[str, str]
    ) -> str:
        """A client's own send to %RETRY%group goes to %DLQ%group once it has been retried
        maxReconsumeTimes times (RocketMQ `handleRetryAndDLQ`)."""
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        config = self.groups.find(group)
        if config is None:
            raise SendRefused(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
            )
        max_times = (
            header_max if header_max is not None and header_max >= 0 else config.retryMaxTimes
        )
        if reconsume_times < max_times:
            self.topics.create_if_absent(topic, config.retryQueueNums)
            return topic
        props.pop(MessageConst.DELAY, None)
        dlq = dlq_topic(group)
        self.topics.create_if_absent(dlq, 1)
        log.info("message moved to the DLQ", group=group, reconsume_times=reconsume_times)
        return dlq

    def _answer(
        self,
        ctx: RequestContext,
        msgs: list[Message],
        result: PutMessageResult,
        timed_out: bool = False,
    ) -> RemotingCommand:
        """The answer to one put; `timed_out`: its flush did not finish in time, so a put
        stored and waiting for it is answered FLUSH_DISK_TIMEOUT."""
        code = PUT_STATUS_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
        if timed_out and code == ResponseCode.SUCCESS:
            code = ResponseCode.FLUSH_DISK_TIMEOUT
        if code not in STORED_CODES:
            return ctx.request.response(code, self._put_remark(result))
        # SendMessageResponseHeader's fields, written straight into the ext (its three
        # wire names are taken from the class once): a header object and its writer per
        # answer cost a microsecond.
        ext = {
            _MSG_ID: result.msg_id,
            _QUEUE_ID: str(msgs[0].queue_id),
            _QUEUE_OFFSET: str(result.queue_offset),
            MessageConst.MSG_REGION: self.identity.region_id,
            MessageConst.TRACE_SWITCH: "true",
        }
        return ctx.request.response(code, None, ext)

    # --- send back (36) ----------------------------------------------------------------------
    def send_back(self, ctx: RequestContext) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader.from_ext(ctx.request.ext_fields)
        group = self.groups.find(h.group)
        if group is None:
            return ctx.request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {h.group}",
            )
        data = self.store.look_message_by_offset(h.offset)
        if data is None:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}"
            )
        record = decode_record(data, 0, check_crc=False)
        props = dict(record.properties)
        props.setdefault(MessageConst.RETRY_TOPIC, record.topic)
        max_times = (
            h.max_reconsume_times
            if h.max_reconsume_times is not None and h.max_reconsume_times >= 0
            else group.retryMaxTimes
        )
        if record.reconsume_times >= max_times or h.delay_level < 0:
            topic, queues = dlq_topic(h.group), 1
            props.pop(MessageConst.DELAY, None)
        else:
            topic, queues = retry_topic(h.group), group.retryQueueNums
            # Back after a delay that grows with each retry (RocketMQ: level 3 + reconsume
            # times when the consumer leaves it to the broker; 10 s, 30 s, 1 m, ...).
            level = h.delay_level or 3 + record.reconsume_times
            props[MessageConst.DELAY] = str(level)
        try:
            config, _ = self.topics.create_if_absent(topic, queues)
        except ValueError as exc:  # the group makes no valid topic name ("*", too long)
            raise BadRequest(f"cannot send back for group {h.group!r}: {exc}") from None
        if not props.get(MessageConst.ORIGIN_MESSAGE_ID, "").strip():
            # As RocketMQ's broker: the first send-back names the original by its offsetMsgId.
            props[MessageConst.ORIGIN_MESSAGE_ID] = create_offset_msg_id(
                record.store_host, record.physical_offset
            )
        msg = message_from_record(
            record,
            topic,
            random.randrange(config.writeQueueNums),
            props,
            reconsume_times=record.reconsume_times + 1,
        )
        result = self.store.put_message(msg)
        if result.ok:
            return ctx.request.response()
        return ctx.request.response(ResponseCode.SYSTEM_ERROR, self._put_remark(result))

    def _put_remark(self, result: PutMessageResult) -> str:
        if result.status in (
            PutMessageStatus.MESSAGE_ILLEGAL,
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
        ):
            return illegal_message_remark(self.store.config.max_message_size, result.remark)
        return f"{result.status.name}: {result.remark}" if result.remark else result.status.name


Answers = list[tuple[RequestContext, RemotingCommand]]


class LaterAnswers:
    """Answers given after a processor returned: a SYNC_FLUSH send is answered once the
    group commit has made it durable (RocketMQ 4.9's `CompletableFuture` from
    `asyncPutMessage`), or FLUSH_DISK_TIMEOUT past `timeout_s` (syncFlushTimeout). Built
    and delivered on the loop, each request once."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, deliver: Callable[[Answers], None], timeout_s: float
    ) -> None:
        self.loop = loop
        self.deliver = deliver
        self.timeout_s = timeout_s
        self.loop_thread = threading.get_ident()  # made on the loop's thread

    def expect(self) -> PendingAnswers:
        return PendingAnswers(self)


class PendingAnswers:
    """One batch's answers to come: `done` from the group-commit thread, the timeout from
    the loop, whichever is first answers; `answer_with` gives how to build them."""

    def __init__(self, later: LaterAnswers) -> None:
        self.later = later
        self.build: Callable[[bool], Answers] | None = None
        self.flushed = False
        self.answered = False
        self.timer: asyncio.TimerHandle | None = None
        self.deadline = 0.0  # monotonic time the timeout is up, once armed

    def done(self, _results: list[PutMessageResult]) -> None:
        """From the group-commit thread."""
        self.later.loop.call_soon_threadsafe(self._finish, False)

    def answer_with(self, build: Callable[[bool], Answers]) -> None:
        """From the processor's thread, once the put returned: armed at once when that is
        the loop's (sends stored on the loop), else through the loop."""
        if threading.get_ident() == self.later.loop_thread:
            self._arm(build)
        else:
            self.later.loop.call_soon_threadsafe(self._arm, build)

    def cancel(self) -> None:
        self.answered = True

    def _arm(self, build: Callable[[bool], Answers]) -> None:
        self.build = build
        if self.flushed:  # the flush beat the arming
            self._finish(False)
        elif not self.answered:
            self.deadline = time.monotonic() + self.later.timeout_s
            self.timer = self.later.loop.call_later(self.later.timeout_s, self._time_up)

    def _time_up(self) -> None:
        """The loop's timer may fire up to a millisecond early (uvloop reads its clock once
        an iteration, in whole milliseconds): FLUSH_DISK_TIMEOUT only once the whole timeout
        has passed."""
        left = self.deadline - time.monotonic()
        if left > 0:
            self.timer = self.later.loop.call_later(left, self._time_up)
        else:
            self._finish(True)

    def _finish(self, timed_out: bool) -> None:
        if self.answered:
            return
        if self.build is None:  # flushed before `answer_with` reached the loop
            self.flushed = True
            return
        self.answered = True
        if self.timer is not None:
            self.timer.cancel()
        self.later.deliver(self.build(timed_out))
