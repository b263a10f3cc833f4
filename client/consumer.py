"""What pull and push consumers share: subscriptions, where to start, pulling one queue,
queue assignment within the group, queue locks, and the heartbeat data naming the group."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

import structlog

from rmqpy.client.errors import ClientError
from rmqpy.client.instance import ClientInstance, cancel_all
from rmqpy.client.message import MessageQueue, ReceivedMessage, decode_messages
from rmqpy.client.offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from rmqpy.client.rebalance import allocate_averagely
from rmqpy.client.subscription import Subscription
from rmqpy.client.transport import WireFields, check
from rmqpy.remoting.codes import RequestCode, ResponseCode
from rmqpy.remoting.headers.admin import ConsumerGroupRequestHeader
from rmqpy.remoting.headers.offsets import (
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    OffsetResponseHeader,
    SearchOffsetRequestHeader,
)
from rmqpy.remoting.headers.pull import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from rmqpy.remoting.signature import Credentials
from rmqpy.store.layout import MessageConst

log = structlog.get_logger(__name__)

RETRY_PREFIX = "%RETRY%"
DEFAULT_OFFSETS_DIR = "~/.rmqpy/offsets"


class ConsumeFrom(enum.Enum):
    """Where a group with no committed offset starts (RocketMQ `ConsumeFromWhere`)."""

    LAST = "CONSUME_FROM_LAST_OFFSET"
    FIRST = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


PULL_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
_PULL_CODES = tuple(PULL_STATUS)


@dataclass(frozen=True, slots=True)
class PullResult:
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[ReceivedMessage]


@dataclass(frozen=True, slots=True)
class RawPull:
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    records: bytes  # whole commitlog records, back to back (FOUND only)


# The ext keys of what changes from one pull of a queue to the next.
_PULL_KEYS = PullMessageRequestHeader.ext_keys()
_QUEUE_OFFSET, _SYS_FLAG = _PULL_KEYS["queue_offset"], _PULL_KEYS["sys_flag"]
_COMMIT_OFFSET, _SUSPEND = _PULL_KEYS["commit_offset"], _PULL_KEYS["suspend_timeout_millis"]


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def original_of(msg: ReceivedMessage) -> ReceivedMessage:
    """A message consumed from `%RETRY%group` as the listener sees it: under its original
    topic (RocketMQ `resetRetryAndNamespace`)."""
    origin = msg.properties.get(MessageConst.RETRY_TOPIC)
    if origin and msg.topic.startswith(RETRY_PREFIX):
        return replace(msg, topic=origin)
    return msg


class ConsumerOptions(TypedDict, total=False):
    """What every consumer accepts besides its group and name server.

    model: CLUSTERING (default) or BROADCASTING; consume_from: where a group with no committed
    offset starts (LAST by default); consume_timestamp_ms: for TIMESTAMP (default half an hour
    ago); offsets_dir: broadcasting's local offsets; serialize: header encoding ("auto");
    credentials: the ACL account requests are signed with (default: RMQPY_ACCESS_KEY and
    RMQPY_SECRET_KEY); tls: True or an SSLContext for TLS connections (default: RMQPY_TLS);
    instance: a ClientInstance to share."""

    model: MessageModel
    consume_from: ConsumeFrom
    consume_timestamp_ms: int | None
    offsets_dir: str | Path
    serialize: str
    credentials: Credentials | None
    tls: ssl.SSLContext | bool | None
    instance: ClientInstance | None


class ConsumerBase:
    consume_type = "CONSUME_ACTIVELY"

    def __init__(
        self,
        group: str,
        namesrv: str,
        *,
        model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFrom = ConsumeFrom.LAST,
        consume_timestamp_ms: int | None = None,
        offsets_dir: str | Path = DEFAULT_OFFSETS_DIR,
        serialize: str = "auto",
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | bool | None = None,
        instance: ClientInstance | None = None,
    ) -> None:
        self.group = group
        self.model = model
        self.consume_from = consume_from
        self.consume_timestamp_ms = consume_timestamp_ms or int(time.time() * 1000) - 1_800_000
        self.instance = instance or ClientInstance(
            namesrv, serialize=serialize, credentials=credentials, tls=tls
        )
        self._owns_instance = instance is None
        self.subscriptions: dict[str, Subscription] = {}
        # Per queue: (batch size, subscription) and the pull header fields they make.
        self._pull_fields: dict[MessageQueue, tuple[tuple[int, Subscription], WireFields]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_now = asyncio.Event()  # set when the broker says the group changed
        self._started = False
        self.offsets: OffsetStore = (
            LocalOffsetStore(offsets_dir, group)
            if model is MessageModel.BROADCASTING
            else RemoteOffsetStore(self.instance, group)
        )

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    def consumer_data(self) -> dict[str, Any]:
        return {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.model.value,
            "consumeFromWhere": self.consume_from.value,
            "unitMode": False,
            "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()],
        }

    async def _register(self) -> None:
        """Load the routes of the subscribed topics and heartbeat their brokers at once, so
        the group knows this member before the first rebalance (a broker a route names for
        the first time has had its heartbeat from `route` already)."""
        known = self.instance.broker_addrs()
        self.instance.consumers[self.group] = self
        self.instance.start()
        for topic in self.subscriptions:
            try:
                await self.instance.route(topic)
            except ClientError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
                # As a Java consumer: the member waits, rebalancing, for the topic to appear
                # (its first send creates it; a group's retry topic comes with the heartbeat).
                log.warning("subscribed topic does not exist yet", topic=topic, group=self.group)
        await self.instance.heartbeat_brokers(known & self.instance.broker_addrs())

    def group_changed(self) -> None:
        self._rebalance_now.set()

    async def consume_directly(self, msg: ReceivedMessage) -> dict[str, Any] | None:
        """None: a consumer without a listener takes no message from a broker (as Java's
        pull consumer)."""
        return None

    def offsets_reset(self, offsets: dict[MessageQueue, int]) -> None:
        """An operator moved the group's offsets (the broker already holds the new ones)."""
        task = asyncio.ensure_future(self.reset_offsets(offsets))
        self._tasks.append(task)
        task.add_done_callback(self._tasks_done)

    def _tasks_done(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("offset reset failed", group=self.group, error=str(task.exception()))

    async def reset_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        """Go on from `offsets` in the queues this member holds, dropping what was pulled
        from them and not yet consumed."""

    async def _rebalance_due(self, timeout_s: float) -> bool:
        """Wait until the broker says the group changed (True) or `timeout_s` passes.

        `asyncio.wait`, not `wait_for` or `timeout`: on Python 3.11 those can swallow a
        cancel that lands as the event fires, and `close` would then wait forever."""
        waiter = asyncio.ensure_future(self._rebalance_now.wait())
        try:
            await asyncio.wait({waiter}, timeout=timeout_s)
        finally:
            waiter.cancel()
        notified = self._rebalance_now.is_set()
        self._rebalance_now.clear()
        return notified

    # --- queues and offsets ---------------------------------------------------------------------
    async def queues_of(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.route(topic, refresh=True)
        queues = route.read_queues()
        if not queues:
            raise ClientError(f"topic {topic} has no readable queue")
        return queues

    async def _broker(self, mq: MessageQueue) -> str:
        return await self.instance.broker_addr_of(mq.topic, mq.broker_name)

    async def _offset_call(self, mq: MessageQueue, code: int, header: Any) -> int:
        addr = await self._broker(mq)
        response = await self.instance.remoting.invoke(
            addr, code, header, timeout_s=self.instance.timeout_s
        )
        check(response, addr)
        return OffsetResponseHeader.from_ext(response.ext_fields).offset

    async def max_offset(self, mq: MessageQueue) -> int:
        header = GetMaxOffsetRequestHeader(mq.topic, mq.queue_id)
        return await self._offset_call(mq, RequestCode.GET_MAX_OFFSET, header)

    async def min_offset(self, mq: MessageQueue) -> int:
        header = GetMinOffsetRequestHeader(mq.topic, mq.queue_id)
        return await self._offset_call(mq, RequestCode.GET_MIN_OFFSET, header)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        header = SearchOffsetRequestHeader(mq.topic, mq.queue_id, timestamp_ms)
        return await self._offset_call(mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header)

    async def start_offset(self, mq: MessageQueue) -> int:
        """The committed offset, else where `consume_from` says (RocketMQ
        `computePullFromWhere`; a retry queue always starts at 0)."""
        stored = await self.offsets.read(mq)
        if stored is not None and stored >= 0:
            return stored
        if mq.topic.startswith(RETRY_PREFIX) or self.consume_from is ConsumeFrom.FIRST:
            return 0
        if self.consume_from is ConsumeFrom.LAST:
            return await self.max_offset(mq)
        return await self.search_offset(mq, self.consume_timestamp_ms)

    # --- pulling ----------------------------------------------------------------------------------
    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        suspend_ms: int = 0,
        commit_offset: int | None = None,
    ) -> PullResult:
        status, next_offset, min_offset, max_offset, records = await self._pull(
            mq, offset, max_nums, suspend_ms, commit_offset
        )
        messages = []
        if status is PullStatus.FOUND:
            messages = decode_messages(records, mq.broker_name)
            sub = self.subscriptions.get(mq.topic)
            if sub is not None and sub.tags:
                # the broker filters by tags hash; a hash collision is dropped here
                messages = [m for m in messages if sub.matches(m.tags)]
        return PullResult(status, next_offset, min_offset, max_offset, messages)

    async def pull_records(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        suspend_ms: int = 0,
        commit_offset: int | None = None,
    ) -> RawPull:
        """One PULL_MESSAGE; the records come back as the broker sent them (whole commitlog
        records, back to back), for readers that decode them their own way."""
        return RawPull(*await self._pull(mq, offset, max_nums, suspend_ms, commit_offset))

    async def _pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int,
        suspend_ms: int,
        commit_offset: int | None,
    ) -> tuple[PullStatus, int, int, int, bytes]:
        """`pull_records`' fields, without the object (`pull` makes its own)."""
        sys_flag = FLAG_SUBSCRIPTION
        if suspend_ms:
            sys_flag |= FLAG_SUSPEND
        if commit_offset is not None and commit_offset >= 0:
            sys_flag |= FLAG_COMMIT_OFFSET
        header = WireFields(self._pull_header_fields(mq, max_nums))
        header[_QUEUE_OFFSET] = str(offset)
        header[_SYS_FLAG] = str(sys_flag)
        header[_COMMIT_OFFSET] = str(commit_offset if commit_offset is not None else 0)
        header[_SUSPEND] = str(suspend_ms)
        addr = self.instance.broker_addr(mq.broker_name) or await self._broker(mq)
        timeout = suspend_ms / 1000 + self.instance.timeout_s
        response = await self.instance.remoting.invoke(
            addr, RequestCode.PULL_MESSAGE, header, timeout_s=timeout
        )
        status = PULL_STATUS[check(response, addr, *_PULL_CODES).code]
        h = PullMessageResponseHeader.from_ext(response.ext_fields)
        records = response.body if status is PullStatus.FOUND else b""
        return status, h.next_begin_offset, h.min_offset, h.max_offset, records

    def _pull_header_fields(self, mq: MessageQueue, max_nums: int) -> WireFields:
        """The fields of a PULL_MESSAGE header for `mq` as `PullMessageRequestHeader` writes
        them, made once while the batch size and the topic's subscription stay (a consumer
        pulls each of its queues again and again); the caller sets the offsets, flags and
        suspend time of each pull."""
        sub = self.subscriptions.get(mq.topic) or Subscription(mq.topic)
        made = self._pull_fields.get(mq)
        if made is not None and made[0][0] == max_nums and made[0][1] is sub:
            return made[1]
        fields = WireFields(
            PullMessageRequestHeader(
                consumer_group=self.group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=0,
                max_msg_nums=max_nums,
                sys_flag=0,
                commit_offset=0,
                suspend_timeout_millis=0,
                sub_version=sub.version,
                subscription=sub.expression,
                expression_type="TAG",
            ).to_ext()
        )
        if mq.topic in self.subscriptions:  # an ad hoc subscription is not kept
            self._pull_fields[mq] = ((max_nums, sub), fields)
        return fields

    # --- group membership -------------------------------------------------------------------------
    async def group_members(self, topic: str) -> list[str]:
        route = await self.instance.route(topic)
        for addr in sorted(route.masters().values()):
            header = ConsumerGroupRequestHeader(self.group)
            try:
                response = await self.instance.remoting.invoke(
                    addr,
                    RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                    header,
                    timeout_s=self.instance.timeout_s,
                )
            except ClientError as exc:
                log.warning("consumer list failed", broker=addr, error=str(exc))
                continue
            if response.code == ResponseCode.SUCCESS and response.body:
                return [str(c) for c in json.loads(response.body).get("consumerIdList", [])]
        return []

    async def allocate(self, topic: str) -> list[MessageQueue]:
        """This member's queues of `topic`: all of them when broadcasting, an even share of
        them in clustering."""
        queues = await self.queues_of(topic)
        if self.model is MessageModel.BROADCASTING:
            return queues
        members = await self.group_members(topic)
        if self.client_id not in members:
            members.append(self.client_id)
        return allocate_averagely(self.client_id, members, queues)

    async def lock(self, mqs: Iterable[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ on each queue's broker; the queues now locked by us."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        locked: set[MessageQueue] = set()
        for broker_name, group in by_broker.items():
            addr = await self.instance.broker_addr_of(group[0].topic, broker_name)
            body = self._lock_body(group)
            response = await self.instance.remoting.invoke(
                addr, RequestCode.LOCK_BATCH_MQ, body=body, timeout_s=self.instance.timeout_s
            )
            check(response, addr)
            for item in json.loads(response.body or b"{}").get("lockOKMQSet", []):
                locked.add(MessageQueue(item["topic"], item["brokerName"], int(item["queueId"])))
        return locked

    async def unlock(self, mqs: Iterable[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker_name, group in by_broker.items():
            try:
                addr = await self.instance.broker_addr_of(group[0].topic, broker_name)
                await self.instance.remoting.invoke(
                    addr,
                    RequestCode.UNLOCK_BATCH_MQ,
                    body=self._lock_body(group),
                    timeout_s=self.instance.timeout_s,
                )
            except ClientError as exc:
                log.warning("unlock failed", broker=broker_name, error=str(exc))

    def _lock_body(self, mqs: list[MessageQueue]) -> bytes:
        return json.dumps(
            {
                "consumerGroup": self.group,
                "clientId": self.client_id,
                "onlyThisBroker": False,
                "mqSet": [mq.to_json() for mq in mqs],
            }
        ).encode()


Deliver = Callable[[MessageQueue, PullResult], Awaitable[None]]


class QueueFeed:
    """Pulls one queue in a background task with long polling and awaits `deliver` with each
    answer before the next pull (so a slow consumer slows its pulls). A broker that cannot be
    reached is retried every `retry_s`; an illegal offset moves to the broker's suggestion."""

    def __init__(
        self,
        consumer: ConsumerBase,
        mq: MessageQueue,
        offset: int,
        deliver: Deliver,
        *,
        batch: int = 32,
        suspend_ms: int = 15_000,
        retry_s: float = 1.0,
    ) -> None:
        self.consumer = consumer
        self.mq = mq
        self.next_offset = offset
        self.deliver = deliver
        self.batch = batch
        self.suspend_ms = suspend_ms
        self.retry_s = retry_s
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            try:
                result = await self.consumer.pull(
                    self.mq, self.next_offset, self.batch, self.suspend_ms
                )
            except ClientError as exc:
                log.warning("pull failed", queue=str(self.mq), error=str(exc))
                await asyncio.sleep(self.retry_s)
                continue
            except Exception as exc:  # a bug must not end this queue's feed unseen
                log.error("pull failed", queue=str(self.mq), error=repr(exc), exc_info=True)
                await asyncio.sleep(self.retry_s)
                continue
            if result.status is PullStatus.OFFSET_ILLEGAL:
                log.warning(
                    "pull offset illegal, moving on",
                    queue=str(self.mq),
                    offset=self.next_offset,
                    to=result.next_offset,
                )
            await self.deliver(self.mq, result)
            self.next_offset = result.next_offset

    async def stop(self) -> None:
        await cancel_all([self.task])
