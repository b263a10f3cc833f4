"""The producer: `send`, `send_async`, `send_oneway`, `send_batch` (RocketMQ
`DefaultMQProducer`).

    async with Producer("my-group", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message("T", b"hello", tags="TagA", keys="order-1"))

Each message gets a UNIQ_KEY (its `msg_id`); bodies over 4 KiB are zlib-compressed. A send that
fails with a retriable code, a timeout or a lost connection is retried (twice by default) on
another queue, on another broker when there is one, within the send timeout. A topic the name
server does not know is sent through `TBW102`'s route for the broker to auto-create.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import structlog

from rmqpy.client.errors import ClientError, MessageRefusedError
from rmqpy.client.instance import ClientInstance
from rmqpy.client.message import (
    COMPRESS_OVER,
    MAX_MESSAGE_SIZE,
    Message,
    MessageQueue,
    SendResult,
    SendStatus,
    UniqKeyFactory,
    compress_body,
    with_uniq_key,
)
from rmqpy.client.transport import WireFields, check, ext_of
from rmqpy.remoting.batch_body import BatchItem, encode_batch_body
from rmqpy.remoting.codes import DEFAULT_TOPIC, RequestCode, ResponseCode
from rmqpy.remoting.headers.send import SendMessageRequestHeader, SendMessageResponseHeader
from rmqpy.remoting.signature import Credentials
from rmqpy.store.java_hash import java_string_hash
from rmqpy.store.layout import MessageConst
from rmqpy.store.message import (
    encode_properties,
    illegal_message_remark,
    oversized_body,
    validate_topic,
)

log = structlog.get_logger(__name__)
QUEUE_ID_KEY = SendMessageRequestHeader.ext_keys(v2=True)["queue_id"]

DEFAULT_TOPIC_QUEUE_NUMS = 4

RETRIABLE = {
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.NO_PERMISSION,
}
STATUS_OF: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


class QueueSelector(Protocol):
    def __call__(
        self, queues: Sequence[MessageQueue], msg: Message, arg: object
    ) -> MessageQueue: ...


def select_by_hash(queues: Sequence[MessageQueue], msg: Message, arg: object) -> MessageQueue:
    """RocketMQ `SelectMessageQueueByHash`: the same sharding key, the same queue (strings
    hash as Java's `String.hashCode`, so Java and Python producers agree)."""
    key = java_string_hash(arg) if isinstance(arg, str) else hash(arg)
    return queues[abs(key) % len(queues)]


class Producer:
    def __init__(
        self,
        group: str = "DEFAULT_PRODUCER",
        namesrv: str = "127.0.0.1:9876",
        *,
        send_timeout_s: float = 3.0,
        retries: int = 2,
        compress_over: int = COMPRESS_OVER,
        max_message_size: int = MAX_MESSAGE_SIZE,
        serialize: str = "auto",
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | bool | None = None,
        instance: ClientInstance | None = None,
    ) -> None:
        self.group = group
        self.send_timeout_s = send_timeout_s
        self.retries = retries
        self.compress_over = compress_over
        self.max_message_size = max_message_size
        self.instance = instance or ClientInstance(
            namesrv, serialize=serialize, credentials=credentials, tls=tls
        )
        self._owns_instance = instance is None
        self._uniq = UniqKeyFactory(self.instance.client_ip)
        self._round_robin = itertools.count()
        self._started = False

    async def start(self) -> Producer:
        if not self._started:
            self.instance.producer_groups.add(self.group)
            self.instance.start()
            self._started = True
        return self

    async def close(self) -> None:
        if self._started:
            if self._owns_instance:
                await self.instance.close()
            else:
                await self.instance.unregister(producer_group=self.group)
        self._started = False

    async def __aenter__(self) -> Producer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- public API ---------------------------------------------------------------------------
    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: object = None,
        timeout_s: float | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer. `queue` pins the queue; `selector(queues,
        msg, arg)` picks one (ordered messages: `select_by_hash` with a sharding key)."""
        result = await self._send([msg], False, queue, selector, arg, timeout_s, oneway=False)
        assert result is not None
        return result

    def send_async(
        self,
        msg: Message,
        on_success: Callable[[SendResult], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: object = None,
        timeout_s: float | None = None,
    ) -> asyncio.Task[SendResult]:
        """Start a send; the task's result is the SendResult, and the callbacks (RocketMQ's
        SendCallback) run when it completes."""
        task = asyncio.ensure_future(
            self.send(msg, queue=queue, selector=selector, arg=arg, timeout_s=timeout_s)
        )

        def done(t: asyncio.Task[SendResult]) -> None:
            if t.cancelled():
                return
            exc = t.exception()
            if exc is not None:
                if on_error is not None:
                    on_error(exc)
            elif on_success is not None:
                on_success(t.result())

        task.add_done_callback(done)
        return task

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """Send without waiting for an answer (nothing is retried)."""
        await self._send([msg], False, queue, None, None, None, oneway=True)

    async def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout_s: float | None = None,
    ) -> SendResult:
        """Send messages of one topic as one request; they get consecutive queue
        offsets in one queue. `msg_id` is their UNIQ_KEYs joined by commas."""
        if not msgs:
            raise MessageRefusedError("an empty batch")
        if len({m.topic for m in msgs}) != 1:
            raise MessageRefusedError("the messages of a batch must share one topic")
        if any(m.delay_level > 0 for m in msgs):
            raise MessageRefusedError("a batch cannot take a delay level (RocketMQ's rule too)")
        result = await self._send(list(msgs), True, queue, None, None, timeout_s, oneway=False)
        assert result is not None
        return result

    # --- internals ----------------------------------------------------------------------------
    def _validate(self, msg: Message) -> None:
        why = validate_topic(msg.topic)
        if why is not None:
            raise MessageRefusedError(why, code=ResponseCode.MESSAGE_ILLEGAL)
        if not msg.body:
            raise MessageRefusedError("the message body length is zero")
        if len(msg.body) > self.max_message_size:
            detail = oversized_body(len(msg.body), self.max_message_size)
            raise MessageRefusedError(
                illegal_message_remark(self.max_message_size, detail),
                code=ResponseCode.MESSAGE_ILLEGAL,
            )

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's write queues, else TBW102's under the topic's name (auto-create)."""
        try:
            queues = (await self.instance.route(topic)).write_queues()
            if queues:
                return queues
        except ClientError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
        route = await self.instance.route(DEFAULT_TOPIC)
        queues = [
            MessageQueue(topic, q.broker_name, q.queue_id)
            for q in route.write_queues()
            if q.queue_id < DEFAULT_TOPIC_QUEUE_NUMS
        ]
        if not queues:
            raise ClientError(f"no route info of topic {topic} and no broker accepts new topics")
        return queues

    def _pick(
        self,
        queues: list[MessageQueue],
        msg: Message,
        selector: QueueSelector | None,
        arg: object,
        avoid_broker: str | None,
    ) -> MessageQueue:
        if selector is not None:
            return selector(queues, msg, arg)
        start = next(self._round_robin)
        for i in range(len(queues)):
            mq = queues[(start + i) % len(queues)]
            if mq.broker_name != avoid_broker:
                return mq
        return queues[start % len(queues)]

    def _request(
        self, msgs: list[Message], batch: bool
    ) -> tuple[SendMessageRequestHeader, bytes, str]:
        """Header (queue id still to choose), body and msgId, built once per send: a retry
        goes out with the same UNIQ_KEYs (so duplicates can be told apart) and compresses
        nothing twice."""
        first = msgs[0]
        sys_flag = 0
        if batch:
            ids = [self._uniq.next() for _ in msgs]
            body = encode_batch_body(
                BatchItem(m.flag, m.body, encode_properties(with_uniq_key(m, uniq)))
                for m, uniq in zip(msgs, ids, strict=True)
            )
            properties = encode_properties({MessageConst.WAIT: "true"})
            msg_id = ",".join(ids)
        else:
            msg_id = first.properties.get(MessageConst.UNIQ_KEY) or self._uniq.next()
            props = with_uniq_key(first, msg_id)
            props.setdefault(MessageConst.WAIT, "true")
            properties = encode_properties(props)
            body = first.body
            if len(body) > self.compress_over:
                body, sys_flag = compress_body(body)
        header = SendMessageRequestHeader(
            producer_group=self.group,
            topic=first.topic,
            default_topic=DEFAULT_TOPIC,
            default_topic_queue_nums=DEFAULT_TOPIC_QUEUE_NUMS,
            queue_id=-1,
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=first.flag,
            properties=properties,
            reconsume_times=0,
            unit_mode=False,
            batch=batch,
        )
        return header, body, msg_id

    async def _send(
        self,
        msgs: list[Message],
        batch: bool,
        queue: MessageQueue | None,
        selector: QueueSelector | None,
        arg: object,
        timeout_s: float | None,
        *,
        oneway: bool,
    ) -> SendResult | None:
        if not self._started:
            await self.start()
        for m in msgs:
            self._validate(m)
        topic = msgs[0].topic
        timeout = timeout_s if timeout_s is not None else self.send_timeout_s
        deadline = time.monotonic() + timeout
        pinned = queue is not None or selector is not None or oneway
        attempts = 1 if pinned else 1 + self.retries
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        template, body, msg_id = self._request(msgs, batch)
        fields = ext_of(template, v2=True)  # each attempt sets its queue's id in a copy
        last_error: ClientError | None = None
        avoid: str | None = None
        for _ in range(attempts):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            mq = queue or self._pick(await self.queues(topic), msgs[0], selector, arg, avoid)
            header = WireFields(fields)
            header[QUEUE_ID_KEY] = str(mq.queue_id)
            try:
                addr = await self.instance.broker_addr_of(topic, mq.broker_name)
                if oneway:
                    await self.instance.remoting.invoke_oneway(addr, code, header, body, v2=True)
                    return None
                response = await self.instance.remoting.invoke(
                    addr, code, header, body, left, v2=True
                )
            except ClientError as exc:  # unreachable, connection lost, timed out
                last_error, avoid = exc, mq.broker_name
                continue
            status = STATUS_OF.get(response.code)
            if status is not None:
                h = SendMessageResponseHeader.from_ext(response.ext_fields)
                return SendResult(status, msg_id, h.msg_id, mq, h.queue_offset)
            try:
                check(response, addr)
            except ClientError as exc:
                if exc.code not in RETRIABLE:
                    raise
                last_error, avoid = exc, mq.broker_name
                log.info("send failed, retrying", topic=topic, broker=addr, error=str(exc))
        if last_error is None:
            last_error = ClientError(f"sending to topic {topic} timed out after {timeout:g} s")
        raise last_error
