"""What the client sends and receives: `Message`, `ReceivedMessage`, `MessageQueue`,
`SendResult`, and the producer-side encoding of bodies and properties.

Record and id layouts come from `store` (defined once); this module only adds the
client's view: UNIQ_KEY generation (RocketMQ `MessageClientIDSetter`), zlib compression of
bodies over 4 KiB (sysFlag bit 0) and transparent decompression on receipt.
"""

from __future__ import annotations

import base64
import itertools
import os
import random
import socket
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import structlog

from rmqpy.config import java_json
from rmqpy.config.compiled import twin
from rmqpy.store.layout import RECORD_HEAD, MessageConst, SysFlag
from rmqpy.store.message import (
    PropertyViews,
    RecordError,
    RecordFields,
    decode_properties,
    inflated_body,
    record_fields,
    uniq_key_of,
)
from rmqpy.store.message_id import UniqKey, create_offset_msg_id

log = structlog.get_logger(__name__)

COMPRESS_OVER = 4 * 1024
COMPRESS_LEVEL = 5
MAX_MESSAGE_SIZE = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker (RocketMQ `MessageQueue`)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id}

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


def queue_keyed(table: Mapping[str, Any]) -> dict[MessageQueue, Any]:
    """A fastjson `Map<MessageQueue, V>` as `java_json.loads` reads it (object keys as text)."""
    out = {}
    for key, value in table.items():
        mq = java_json.object_key(key)
        out[MessageQueue(str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"]))] = value
    return out


@dataclass(slots=True)
class Message:
    """A message to send. `tags` and `keys` become the TAGS and KEYS properties, and
    `delay_level` (1-18 of the broker's `messageDelayLevel`: 1s 5s 10s 30s 1m ...) the DELAY
    property: the broker holds the message until then (not in a batch)."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0

    def wire_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        if self.delay_level > 0:
            props[MessageConst.DELAY] = str(self.delay_level)
        if self.tags:
            props[MessageConst.TAGS] = self.tags
        if self.keys:
            keys = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
            props[MessageConst.KEYS] = keys
        return props


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    """`msg_id` is the UNIQ_KEY the producer set (for a batch, the ids joined by commas);
    `offset_msg_id` is the broker's store-host + commitlog-offset id."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status.value,
            "msgId": self.msg_id,
            "offsetMsgId": self.offset_msg_id,
            "topic": self.queue.topic,
            "brokerName": self.queue.broker_name,
            "queueId": self.queue.queue_id,
            "queueOffset": self.queue_offset,
        }


class ReceivedProperties(Mapping[str, str]):
    """A received message's properties: split from their stored text at first use, as most
    consumers read a message's body, and at most its tags or keys."""

    __slots__ = ("_split", "_text")

    def __init__(self, text: str = "", split: dict[str, str] | None = None) -> None:
        self._text = text  # as stored: name\x01value pairs, \x02 after each
        self._split = split

    def _dict(self) -> dict[str, str]:
        split = self._split
        if split is None:
            split = self._split = decode_properties(self._text)
        return split

    def __getitem__(self, name: str) -> str:
        return self._dict()[name]

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self._dict().get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._dict()

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __repr__(self) -> str:
        return repr(self._dict())


@dataclass(frozen=True, slots=True)
class ReceivedMessage(PropertyViews):
    """A consumed message (RocketMQ `MessageExt`): body decompressed, `msg_id` the UNIQ_KEY
    when the producer set one, else `offset_msg_id`."""

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    properties: Mapping[str, str]
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    sys_flag: int
    flag: int
    msg_id: str
    offset_msg_id: str
    broker_name: str = ""

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    @classmethod
    def from_fields(cls, fields: RecordFields, broker_name: str = "") -> ReceivedMessage:
        """From `store.message.record_fields` (no `Record` in between: pulls decode many)."""
        (_, _, _, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, born_host,
         store_ts, store_host, reconsume, _, body, topic, properties) = fields  # fmt: skip
        body = inflated_body(body, sys_flag)
        offset_id = create_offset_msg_id(store_host, physical_offset)
        return cls(
            topic,
            body,
            queue_id,
            queue_offset,
            physical_offset,
            ReceivedProperties(split=properties),
            born_ts,
            store_ts,
            str(born_host),
            str(store_host),
            reconsume,
            sys_flag,
            flag,
            uniq_key_of(properties) or offset_id,
            offset_id,
            broker_name,
        )

    def to_json(self) -> dict[str, object]:
        """The message as JSON: its body whole in `bodyBase64` (as `nats` and `kcat` give
        bytes), and as text in `body` when it is UTF-8 (else null: replacing the bytes
        that are not would lose them)."""
        return {
            "topic": self.topic,
            "brokerName": self.broker_name,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "msgId": self.msg_id,
            "offsetMsgId": self.offset_msg_id,
            "tags": self.tags,
            "keys": self.keys,
            "properties": dict(self.properties),
            "bornTimestamp": self.born_timestamp,
            "storeTimestamp": self.store_timestamp,
            "bornHost": self.born_host,
            "storeHost": self.store_host,
            "reconsumeTimes": self.reconsume_times,
            "body": _text_or_none(self.body),
            "bodyBase64": base64.b64encode(self.body).decode("ascii"),
        }


def _text_or_none(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def decode_messages(body: bytes, broker_name: str = "") -> list[ReceivedMessage]:
    """A pull or query body: stored records back to back. Topic and properties
    bytes that are no UTF-8 decode as Java's client decodes them (replaced); a record that
    is damaged otherwise (its body CRC, its lengths) is logged and left out, and when its
    length cannot be trusted, so is the rest of the body: a consumer moves on past them
    rather than failing the same pull for ever. Compiled where built
    (`client._message.decode_messages`), one call per body."""
    out: list[ReceivedMessage] = []
    pos = 0
    while 0 <= pos < len(body):
        pos = decode_one(body, pos, broker_name, out)
    return out


def decode_one(body: bytes, pos: int, broker_name: str, out: list[ReceivedMessage]) -> int:
    """The record at `pos` of a pull body appended to `out` (or logged and left out, if
    damaged): where the next one starts, or -1 when the rest of the body cannot be trusted."""
    try:
        fields = record_fields(body, pos, text_errors="replace")
    except RecordError as exc:
        size = int.from_bytes(body[pos : pos + 4], "big", signed=True)
        sane = RECORD_HEAD.size < size <= len(body) - pos
        log.error("damaged message left out", broker=broker_name, error=str(exc),
                  rest_left_out=not sane)  # fmt: skip
        return pos + size if sane else -1
    out.append(ReceivedMessage.from_fields(fields, broker_name))
    return pos + fields[0]


reference_decode_messages = decode_messages


def compress_body(body: bytes) -> tuple[bytes, int]:
    """(body to send, sysFlag bits): zlib level 5 over 4 KiB, as Java producers do."""
    if len(body) > COMPRESS_OVER:
        return zlib.compress(body, COMPRESS_LEVEL), SysFlag.COMPRESSED
    return body, 0


def local_ip() -> str:
    """The address this host reaches the network from (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _i16(value: int) -> int:
    return (value + 0x8000) % 0x10000 - 0x8000


def _month_bounds_ms(now_s: float) -> tuple[int, int]:
    """Start of this month and of the next, local time, in ms (UNIQ_KEY counts from the
    first, and is re-based when the second passes)."""
    t = time.localtime(now_s)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    end = time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1))
    return int(start * 1000), int(end * 1000)


class UniqKeyFactory:
    """UNIQ_KEY = ip | pid (i16) | class-loader hash (i32) | ms since month start | counter;
    thread-safe."""

    def __init__(self, ip: str | None = None) -> None:
        self._ip = socket.inet_aton(ip or local_ip())
        self._pid = _i16(os.getpid())
        self._loader = random.getrandbits(31)
        self._counter = itertools.count(random.getrandbits(15))
        self._lock = threading.Lock()
        self._month_start_ms = 0
        self._next_month_ms = 0

    def next(self) -> str:
        now_ms = int(time.time() * 1000)
        with self._lock:
            if now_ms >= self._next_month_ms:
                self._month_start_ms, self._next_month_ms = _month_bounds_ms(now_ms / 1000)
            counter = next(self._counter)
            since = (now_ms - self._month_start_ms) & 0xFFFFFFFF  # Java's int cast, unsigned
        return UniqKey(self._ip, self._pid, self._loader, since, _i16(counter)).encode()


def with_uniq_key(msg: Message, uniq_key: str) -> dict[str, str]:
    """The properties a producer sends for `msg`: its own, TAGS, KEYS and the UNIQ_KEY."""
    props = msg.wire_properties()
    props.setdefault(MessageConst.UNIQ_KEY, uniq_key)
    return props


# `decode_messages`, or its compiled twin where it is built.
_compiled = twin("rmqpy.client._message")
if _compiled is not None:
    decode_messages = _compiled.decode_messages
