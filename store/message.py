"""Messages as the store sees them: the put input, the v1 record codec, properties, tag hashes.

`Message` mirrors RocketMQ's `MessageExtBrokerInner`: what a producer sent plus the broker's
additions. `encode_record` lays it out as a v1 commitlog record (layout in `store.layout`);
`decode_record` / `check_record` read records back, from our files or from Java RocketMQ's.
"""

from __future__ import annotations

import functools
import ipaddress
import mmap
import re
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from zlib_ng.zlib_ng import crc32

from rmqpy.config.compiled import twin
from rmqpy.store.java_hash import java_string_hash
from rmqpy.store.layout import (
    BLANK_MAGIC,
    CRC_MASK,
    HOST_V4,
    HOST_V6,
    I32,
    INT_RANGE,
    LONG_RANGE,
    MARK_DELAY,
    MARK_NO_WAIT,
    MARK_SHARDING_KEY,
    MAX_TOPIC_LENGTH,
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    NAME_VALUE_SEPARATOR,
    OFF_SYS_FLAG,
    PROPERTY_SEPARATOR,
    PROPS_LEN,
    RECORD_FIXED,
    RECORD_HEAD,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
    MessageConst,
    SysFlag,
    is_indexed,
    is_queued,
    queue_key,
    store_timestamp_offset,
)

# What records are read from: bytes, or a commitlog file's mapping read in place.
RecordBuffer = bytes | bytearray | memoryview | mmap.mmap

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")


class RecordError(ValueError):
    """A commitlog record that fails its length, magic or CRC check."""


class FieldRangeError(ValueError):
    """A message field too wide for its place in a record (a 4-byte flag of 2^40, say):
    refused when the message is made, so every `Message` the store is handed encodes."""


def check_field_ranges(**fields: tuple[int, range]) -> None:
    """Raise FieldRangeError naming the first of `fields` (name: (value, range)) outside
    its range."""
    for name, (value, allowed) in fields.items():
        if value not in allowed:
            kind = "int" if allowed is INT_RANGE else "long"
            raise FieldRangeError(f"{name} {value} does not fit a record's {kind} field")


SUB_ALL = "*"  # the subscription expression that takes every message


def parse_tag_expression(expression: str | None) -> frozenset[str]:
    """The tags of a TAG subscription (`TagA || TagB`), as RocketMQ's `FilterAPI` splits it;
    empty for `*` or a blank expression, which take every message."""
    text = (expression or SUB_ALL).strip()
    if text == SUB_ALL:
        return frozenset()
    return frozenset(t.strip() for t in text.split("||") if t.strip())


@functools.lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """The consume-queue tags code: hashCode of TAGS, 0 without tags."""
    return java_string_hash(tags) if tags else 0


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """Body CRC: zlib CRC-32 masked with 0x7FFFFFFF. zlib-ng's CRC-32 gives the
    same values as zlib's, about 5x faster (it uses the CPU's carry-less multiply)."""
    return crc32(body) & CRC_MASK


def inflated_body(body: bytes, sys_flag: int) -> bytes:
    """A record's body as consumers receive it: inflated when its sysFlag marks it compressed
    (zlib, as RocketMQ producers compress bodies over 4 KiB); `zlib.error` when it does not
    inflate."""
    return zlib.decompress(body) if sys_flag & SysFlag.COMPRESSED else body


def encode_properties(props: Mapping[str, str | None]) -> str:
    """`name\\x01value\\x02` per entry, a trailing `\\x02` included; null values skipped."""
    return "".join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}"
        for k, v in props.items()
        if v is not None
    )


def decode_properties(text: str) -> dict[str, str]:
    """Split on `\\x02`, skip segments shorter than 3 or without `\\x01` (RocketMQ's parser)."""
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if len(item) < 3:
            continue
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            out[name] = value
    return out


def property_value(text: str, name: str) -> str | None:
    """The value `decode_properties(text)` gives `name` (its last entry wins), without
    splitting all of `text`; for names of two characters or more."""
    key = name + NAME_VALUE_SEPARATOR
    at = text.rfind(key)
    while at > 0 and text[at - 1] != PROPERTY_SEPARATOR:
        at = text.rfind(key, 0, at)
    if at < 0:
        return None
    start = at + len(key)
    end = text.find(PROPERTY_SEPARATOR, start)
    return text[start:] if end < 0 else text[start:end]


def uniq_key_in(text: str) -> str | None:
    """The producer's message id in encoded properties: UNIQ_KEY, or the name rmqpy 0.1.0
    wrote it under."""
    value = property_value(text, MessageConst.UNIQ_KEY)
    if value is None and MessageConst.LEGACY_UNIQ_KEY in text:
        return property_value(text, MessageConst.LEGACY_UNIQ_KEY)
    return value


def uniq_key_of(properties: Mapping[str, str]) -> str | None:
    """The producer's message id in decoded properties (as `uniq_key_in`)."""
    value = properties.get(MessageConst.UNIQ_KEY)
    return properties.get(MessageConst.LEGACY_UNIQ_KEY) if value is None else value


def with_property(text: str, name: str, value: str) -> str:
    """Encoded properties with `name` set to `value`: appended when `name` is absent."""
    if name + NAME_VALUE_SEPARATOR not in text:
        sep = PROPERTY_SEPARATOR if text and text[-1] != PROPERTY_SEPARATOR else ""
        return f"{text}{sep}{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
    props = decode_properties(text)
    props[name] = value
    return encode_properties(props)


def oversized_body(size: int, limit: int) -> str:
    """Why a body over `maxMessageSize` is refused (store, broker and client say the same)."""
    return f"message body size {size} exceeds the limit {limit}"


def illegal_message_remark(limit: int, detail: str) -> str:
    """The remark of MESSAGE_ILLEGAL (RocketMQ's wording, then the reason)."""
    return (
        "the message is illegal, maybe msg body or properties length not matched. "
        f"msg body length limit {limit // 1024}k, msg properties length limit 32k. ({detail})"
    )


def validate_topic(topic: str) -> str | None:
    """Why a topic name is illegal, or None when it is fine."""
    if not topic:
        return "the topic name is empty"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"the topic name is longer than {MAX_TOPIC_LENGTH} characters"
    if not TOPIC_PATTERN.match(topic):
        return f"the topic name {topic!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


@dataclass(frozen=True, slots=True)
class Host:
    """A socket address as records store it: packed IP (4 or 16 bytes) and port."""

    ip: bytes
    port: int
    is_v6: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_v6", len(self.ip) == 16)

    @classmethod
    def parse(cls, address: str) -> Host:
        """`1.2.3.4:10911` or `[::1]:10911` (cached: a connection's peer parses once)."""
        return _parse_host(address)

    def __str__(self) -> str:
        return _host_text(self.ip, self.port)

    def pack(self) -> bytes:
        return (HOST_V6 if self.is_v6 else HOST_V4).pack(self.ip, self.port)


LOCALHOST = Host(b"\x7f\x00\x00\x01", 0)


class Message:
    """What a put stores: RocketMQ `MessageExtBrokerInner`, with its encoded parts cached.

    `properties` is decoded from `props_bytes` when first asked for: messages made by a
    `MessageTemplate` (the send path) carry only their encoded properties."""

    __slots__ = (
        "_properties",
        "body",
        "born_host",
        "born_timestamp",
        "flag",
        "indexed",
        "keys",
        "lengths",
        "marks",
        "prepared_transaction_offset",
        "props_bytes",
        "queue_id",
        "queue_key",
        "queued",
        "reconsume_times",
        "sys_flag",
        "tags_code",
        "tail",
        "topic",
        "topic_bytes",
        "uniq_key",
    )
    _properties: dict[str, str] | None
    body: bytes
    born_host: Host
    born_timestamp: int
    flag: int
    indexed: bool
    keys: str  # KEYS as sent: space-separated
    lengths: tuple[int, int]  # TOTALSIZE with an IPv4 store host, then with an IPv6 one
    marks: int  # MARK_* (store.layout) of its properties
    prepared_transaction_offset: int
    props_bytes: bytes
    queue_id: int
    queue_key: str
    queued: bool
    reconsume_times: int
    sys_flag: int
    tags_code: int
    tail: bytes  # everything after the body: TOPICLEN, TOPIC, PROPLEN, PROPS
    topic: str
    topic_bytes: bytes
    uniq_key: str | None

    def __init__(
        self,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        properties: Mapping[str, str] | None = None,
        *,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: Host = LOCALHOST,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> None:
        props = dict(properties or {})
        template = MessageTemplate(
            topic,
            queue_id,
            sys_flag=sys_flag,
            born_host=born_host,
            reconsume_times=reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
        )
        fill_message(template, self, body, flag, encode_properties(props), born_timestamp)
        self._properties = props

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = self._properties = decode_properties(self.props_bytes.decode("utf-8"))
        return props

    def get_property(self, name: str) -> str | None:
        """One property, read out of the encoded text unless `properties` was built."""
        props = self._properties
        if props is None:
            return property_value(self.props_bytes.decode("utf-8"), name)
        return props.get(name)

    def encoded_length(self, store_v6: bool) -> int:
        return self.lengths[store_v6]


class MessageTemplate:
    """What the messages of one send share: topic, queue, born host, flags, and the properties
    the broker appends to each message's own (a batch's properties and CLUSTER). Immutable:
    the send path keeps the templates it made (`send_template`).

    `message()` makes each message from its body, flag and encoded properties, kept as sent:
    no properties dict is built (RocketMQ stores a batch item's properties as they came, then
    the batch's); TAGS, KEYS and UNIQ_KEY are read out of the text."""

    __slots__ = (
        "added",
        "born_host",
        "fixed",
        "indexed",
        "prepared_transaction_offset",
        "queue_id",
        "queue_key",
        "queued",
        "reconsume_times",
        "sys_flag",
        "topic",
        "topic_bytes",
        "topic_part",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        added: str = "",
        *,
        sys_flag: int = 0,
        born_host: Host = LOCALHOST,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> None:
        check_field_ranges(
            queueId=(queue_id, INT_RANGE),
            sysFlag=(sys_flag, INT_RANGE),
            reconsumeTimes=(reconsume_times, INT_RANGE),
            preparedTransactionOffset=(prepared_transaction_offset, LONG_RANGE),
        )
        self.topic = topic
        self.queue_id = queue_id
        self.added = added
        self.born_host = born_host
        # The host-width bits lay the record out: they follow the hosts, not the sender
        # (the store host's bit is set when the record is encoded).
        self.sys_flag = (sys_flag & ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)) | (
            SysFlag.BORNHOST_V6 if born_host.is_v6 else 0
        )
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.topic_bytes = topic.encode("utf-8")
        self.queue_key = queue_key(topic, queue_id)
        self.queued = is_queued(self.sys_flag)
        self.indexed = is_indexed(self.sys_flag)
        size = len(self.topic_bytes)
        self.topic_part = TOPIC_LEN_V1.pack(size & 0x7F if size < 128 else 0) + self.topic_bytes
        # TOTALSIZE less body and properties, with an IPv4 store host, then an IPv6 one.
        more = len(self.topic_part) + PROPS_LEN.size
        self.fixed = (
            RECORD_FIXED[(born_host.is_v6, False)].size + more,
            RECORD_FIXED[(born_host.is_v6, True)].size + more,
        )

    def message(self, body: bytes, flag: int, properties: str, born_timestamp: int) -> Message:
        msg: Message = object.__new__(Message)
        msg._properties = None
        fill_message(self, msg, body, flag, properties, born_timestamp)
        return msg

    def fill(
        self, msg: Message, body: bytes, flag: int, properties: str, born_timestamp: int
    ) -> None:
        """Set every field of `msg`; `properties` are the message's own, `added` follows.
        Raises FieldRangeError when `flag` or `born_timestamp` does not fit the record."""
        if flag not in INT_RANGE or born_timestamp not in LONG_RANGE:
            check_field_ranges(flag=(flag, INT_RANGE), bornTimestamp=(born_timestamp, LONG_RANGE))
        added = self.added
        if added:
            if properties and properties[-1] != PROPERTY_SEPARATOR:
                properties += PROPERTY_SEPARATOR
            properties += added
        props_bytes = properties.encode("utf-8")
        msg.topic = self.topic
        msg.topic_bytes = self.topic_bytes
        msg.queue_id = self.queue_id
        msg.queue_key = self.queue_key
        msg.body = body
        msg.flag = flag
        msg.born_host = self.born_host
        msg.sys_flag = self.sys_flag
        msg.born_timestamp = born_timestamp
        msg.reconsume_times = self.reconsume_times
        msg.prepared_transaction_offset = self.prepared_transaction_offset
        msg.queued = self.queued
        msg.indexed = self.indexed
        msg.props_bytes = props_bytes
        if properties:
            msg.tags_code = tags_code(property_value(properties, MessageConst.TAGS))
            msg.keys = property_value(properties, MessageConst.KEYS) or ""
            msg.uniq_key = uniq_key_in(properties)
            msg.marks = (
                (property_value(properties, MessageConst.DELAY) is not None) * MARK_DELAY
                | (property_value(properties, MessageConst.WAIT) == "false") * MARK_NO_WAIT
                | (property_value(properties, MessageConst.SHARDING_KEY) is not None)
                * MARK_SHARDING_KEY
            )
        else:
            msg.tags_code, msg.keys, msg.uniq_key, msg.marks = 0, "", None, 0
        # Everything after the body: TOPICLEN, TOPIC, PROPLEN, PROPS.
        size = len(props_bytes)
        msg.tail = self.topic_part + PROPS_LEN.pack(min(size, 0x7FFF)) + props_bytes
        variable = len(body) + size
        fixed = self.fixed
        msg.lengths = (fixed[0] + variable, fixed[1] + variable)


# `MessageTemplate.fill` and `RecordEncoder.encode`, or their compiled twins where built.
_compiled = twin("rmqpy.store._message")
fill_message: Callable[[MessageTemplate, Message, bytes, int, str, int], None] = (
    MessageTemplate.fill if _compiled is None else _compiled.fill
)


@functools.lru_cache(maxsize=4096)
def send_template(
    topic: str, queue_id: int, added: str, sys_flag: int, born_host: Host, reconsume_times: int
) -> MessageTemplate:
    """The template of a send with these fields, made once (a producer sends to the same
    queues from the same address over and over)."""
    return MessageTemplate(
        topic,
        queue_id,
        added,
        sys_flag=sys_flag,
        born_host=born_host,
        reconsume_times=reconsume_times,
    )


class RecordEncoder:
    """Lays messages out as v1 records for one store host. What the host fixes (its packed
    address, the STOREHOSTADDRESS_V6 bit, the fixed part's `Struct` for each kind of born
    host) is looked up once, when the commitlog starts, not once per put."""

    __slots__ = ("_packs", "store_ip", "store_port", "store_v6", "v6_bit")

    def __init__(self, store_host: Host) -> None:
        self.store_v6 = store_host.is_v6
        self.store_ip, self.store_port = store_host.ip, store_host.port
        self.v6_bit = SysFlag.STOREHOST_V6 if self.store_v6 else 0
        self._packs = {v6: RECORD_FIXED[(v6, self.store_v6)].pack for v6 in (False, True)}

    def encode(
        self,
        parts: list[bytes],
        records: Sequence[Message],
        queue_offsets: Sequence[int],
        phys: Sequence[int],
        store_timestamp: int,
    ) -> None:
        """Append each record to `parts` (the fixed part up to BODYLEN, then the body, then
        `msg.tail`) with its QUEUEOFFSET and PHYSICALOFFSET from the matching columns."""
        store_v6, store_ip, store_port = self.store_v6, self.store_ip, self.store_port
        v6_bit = self.v6_bit
        born: Host | None = None
        pack = self._packs[False]
        born_ip, born_port = b"", 0
        for msg, queue_offset, phy in zip(records, queue_offsets, phys, strict=True):
            if msg.born_host is not born:  # one born host per send: looked up once
                born = msg.born_host
                pack = self._packs[born.is_v6]
                born_ip, born_port = born.ip, born.port
            body = msg.body
            parts += (
                pack(
                    msg.lengths[store_v6],
                    MESSAGE_MAGIC_V1,
                    crc32(body) & CRC_MASK,
                    msg.queue_id,
                    msg.flag,
                    queue_offset,
                    phy,
                    msg.sys_flag | v6_bit,
                    msg.born_timestamp,
                    born_ip,
                    born_port,
                    store_timestamp,
                    store_ip,
                    store_port,
                    msg.reconsume_times,
                    msg.prepared_transaction_offset,
                    len(body),
                ),
                body,
                msg.tail,
            )


EncodeRecords = Callable[
    [RecordEncoder, list[bytes], Sequence[Message], Sequence[int], Sequence[int], int], None
]
encode_records: EncodeRecords = RecordEncoder.encode if _compiled is None else _compiled.encode


def place_group(
    group: Sequence[Message], sizes: Sequence[int], queue_offset: int, phy_offset: int
) -> tuple[list[int], list[int], int]:
    """Where each record of a group stored from `phy_offset` starts (`sizes`: their
    TOTALSIZEs), its QUEUEOFFSET, and the queue offset after the group. Queued records take
    consecutive queue offsets from `queue_offset`; the others (prepared and rolled-back
    transactions) store 0, as RocketMQ's CommitLog does."""
    phys = list(accumulate(sizes, initial=phy_offset))
    phys.pop()
    if all([m.queued for m in group]):
        end = queue_offset + len(group)
        return phys, list(range(queue_offset, end)), end
    queue_offsets = []
    for msg in group:
        queue_offsets.append(queue_offset if msg.queued else 0)
        queue_offset += msg.queued
    return phys, queue_offsets, queue_offset


def encode_group(
    parts: list[bytes],
    group: Sequence[Message],
    queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
    store_host: Host,
) -> tuple[list[int], int]:
    """Append the v1 records of `group`, the first at `phy_offset`, to `parts`, placed as
    `place_group` says and laid out by the `RecordEncoder` the commitlog uses; returns where
    each record starts and the queue offset after the group."""
    sizes = [m.lengths[store_host.is_v6] for m in group]
    phys, queue_offsets, after = place_group(group, sizes, queue_offset, phy_offset)
    encode_records(RecordEncoder(store_host), parts, group, queue_offsets, phys, store_timestamp)
    return phys, after


def encode_record(
    out: bytearray,
    msg: Message,
    queue_offset: int,
    phy_offset: int,
    store_timestamp: int,
    store_host: Host,
) -> None:
    """Append `msg` as one v1 record to `out`."""
    parts: list[bytes] = []
    encode_group(parts, (msg,), queue_offset, phy_offset, store_timestamp, store_host)
    out += b"".join(parts)


class PropertyViews:
    """TAGS, KEYS and UNIQ_KEY read from a message's `properties` (records here, received
    messages in the client)."""

    __slots__ = ()
    properties: Mapping[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(MessageConst.KEYS, "").split(" ") if k]

    @property
    def uniq_key(self) -> str | None:
        return uniq_key_of(self.properties)


@dataclass(frozen=True, slots=True)
class Record(PropertyViews):
    """A decoded commitlog record (RocketMQ `MessageExt` as `MessageDecoder` reads it)."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: Host
    store_timestamp: int
    store_host: Host
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]


@functools.lru_cache(maxsize=4096)
def _parse_host(address: str) -> Host:
    host, _, port = address.rpartition(":")
    return Host(ipaddress.ip_address(host.strip("[]")).packed, int(port))


@functools.lru_cache(maxsize=4096)
def _host_text(ip: bytes, port: int) -> str:
    text = ipaddress.ip_address(ip)
    return f"[{text}]:{port}" if len(ip) == 16 else f"{text}:{port}"


_known_host = functools.lru_cache(maxsize=4096)(Host)  # records repeat a few hosts


def message_from_record(
    record: Record,
    topic: str,
    queue_id: int,
    properties: Mapping[str, str],
    *,
    reconsume_times: int,
    prepared_transaction_offset: int = 0,
) -> Message:
    """A stored record put again under `topic` (a send-back, a delayed message when due):
    its body, flag, born host and time; the store host flag goes, the new store sets it."""
    return Message(
        topic,
        record.body,
        queue_id,
        properties,
        flag=record.flag,
        sys_flag=record.sys_flag & ~SysFlag.STOREHOST_V6,
        born_timestamp=record.born_timestamp,
        born_host=record.born_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )


def decode_record(buf: bytes | memoryview, pos: int = 0, check_crc: bool = True) -> Record:
    """Decode the record at `pos`, validating length, magic and (optionally) the body CRC."""
    return Record(*record_fields(buf, pos, check_crc))


RecordFields = tuple[
    int, int, int, int, int, int, int, int, int, Host, int, Host, int, int, bytes, str,
    dict[str, str],
]  # fmt: skip


def fixed_part(buf: RecordBuffer, pos: int) -> struct.Struct:
    """The layout of the fixed-size head (up to BODYLEN) of the record at `pos`, which
    depends on whether its hosts are IPv4 or IPv6; the body follows it."""
    (sys_flag,) = I32.unpack_from(buf, pos + OFF_SYS_FLAG)
    return RECORD_FIXED[
        (bool(sys_flag & SysFlag.BORNHOST_V6), bool(sys_flag & SysFlag.STOREHOST_V6))
    ]


def record_fields(
    buf: bytes | memoryview, pos: int = 0, check_crc: bool = True, text_errors: str = "strict"
) -> RecordFields:
    """The fields of the record at `pos` in `Record`'s order, validated as `decode_record`
    does; for readers that build their own objects (the client's messages). `text_errors`
    is how topic and properties bytes that are no UTF-8 decode: "strict" raises RecordError,
    "replace" takes them as Java's `new String(bytes, UTF_8)` does."""
    if pos + RECORD_HEAD.size > len(buf):
        raise RecordError(f"record at {pos} is cut short")
    fixed = fixed_part(buf, pos)
    try:
        (total, magic, crc, queue_id, flag, q_off, phy, sys_flag, born_ts, born_ip, born_port,
         store_ts, store_ip, store_port, reconsume, prepared, body_len) = fixed.unpack_from(
            buf, pos
        )  # fmt: skip
    except struct.error as exc:
        raise RecordError(f"record at {pos} is cut short") from exc
    if magic not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2):
        raise RecordError(f"bad magic {magic & 0xFFFFFFFF:#010x} at {pos}")
    if total <= RECORD_HEAD.size or pos + total > len(buf):
        raise RecordError(f"bad total size {total} at {pos}")
    try:
        p = pos + fixed.size
        if body_len < 0:
            raise RecordError(f"negative body length at {pos}")
        body = bytes(buf[p : p + body_len])
        p += body_len
        if magic == MESSAGE_MAGIC_V1:
            topic_len = buf[p]
            p += 1
        else:
            (topic_len,) = TOPIC_LEN_V2.unpack_from(buf, p)
            p += TOPIC_LEN_V2.size
        topic = bytes(buf[p : p + topic_len]).decode("utf-8", text_errors)
        p += topic_len
        (props_len,) = PROPS_LEN.unpack_from(buf, p)
        p += 2
        if props_len < 0:
            raise RecordError(f"negative properties length at {pos}")
        props = decode_properties(bytes(buf[p : p + props_len]).decode("utf-8", text_errors))
        p += props_len
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise RecordError(f"record at {pos} is malformed: {exc}") from exc
    if p - pos != total:
        raise RecordError(f"record at {pos}: fields take {p - pos} bytes, TOTALSIZE says {total}")
    if check_crc and body_crc(body) != crc:
        raise RecordError(f"body CRC mismatch at {pos}")
    return (
        total, magic, crc, queue_id, flag, q_off, phy, sys_flag, born_ts,
        _known_host(born_ip, born_port), store_ts, _known_host(store_ip, store_port),
        reconsume, prepared, body, topic, props,
    )  # fmt: skip


def is_blank(buf: bytes | memoryview, pos: int) -> bool:
    """True when the 8 bytes at `pos` are the end-of-file BLANK filler."""
    return pos + 8 <= len(buf) and I32.unpack_from(buf, pos + 4)[0] == BLANK_MAGIC


def record_store_timestamp(buf: bytes | memoryview, pos: int = 0) -> int:
    """STORETIMESTAMP of the record at `pos` (its offset depends on the born host's size)."""
    (sys_flag,) = I32.unpack_from(buf, pos + OFF_SYS_FLAG)
    return int(struct.unpack_from(">q", buf, pos + store_timestamp_offset(sys_flag))[0])


def check_record(
    buf: RecordBuffer,
    pos: int,
    check_crc: bool,
    limit: int | None = None,
) -> int:
    """Validate the record at `pos` and return its size; 0 for BLANK (end of file).

    Raises `RecordError` for a bad magic, a length that disagrees with the fields, or a CRC
    mismatch (RocketMQ `CommitLog.checkMessageAndReturnSize`). `limit` bounds the record
    (the file's end by default)."""
    end = len(buf) if limit is None else limit
    if pos + 8 > end:
        raise RecordError(f"{end - pos} bytes left at {pos}: too few for a record")
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic == BLANK_MAGIC:
        return 0
    if magic not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2):
        raise RecordError(f"bad magic {magic & 0xFFFFFFFF:#010x} at {pos}")
    if total <= RECORD_HEAD.size or pos + total > end:
        raise RecordError(f"bad total size {total} at {pos}")
    fixed = fixed_part(buf, pos)
    body_len = struct.unpack_from(">i", buf, pos + fixed.size - 4)[0]
    p = pos + fixed.size + body_len
    if body_len < 0 or p + 3 > pos + total:
        raise RecordError(f"bad body length {body_len} at {pos}")
    if magic == MESSAGE_MAGIC_V1:
        topic_len = buf[p]
        p += 1
    else:
        topic_len = TOPIC_LEN_V2.unpack_from(buf, p)[0]
        p += TOPIC_LEN_V2.size
    p += topic_len
    if p + 2 > pos + total:
        raise RecordError(f"bad topic length at {pos}")
    props_len = struct.unpack_from(">h", buf, p)[0]
    if p + 2 + props_len - pos != total:
        raise RecordError(
            f"record at {pos}: fields take {p + 2 + props_len - pos} bytes, TOTALSIZE says {total}"
        )
    if check_crc:
        crc = struct.unpack_from(">i", buf, pos + 8)[0]
        body_start = pos + fixed.size
        if crc32(buf[body_start : body_start + body_len]) & CRC_MASK != crc:
            raise RecordError(f"body CRC mismatch at {pos}")
    return int(total)
