"""Store bytes built field by field from RocketMQ's formats, independent of `store.layout`,
request signatures built from the plain ACL spec, independent of `remoting.signature`, and
fastjson's queue-keyed maps read by their exact text, independent of `config.java_json`.

Golden tests compare our encoder against these, and readers against files made with them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import struct
import zlib
from typing import Any


def spec_properties(props: dict[str, str] | str) -> bytes:
    """name\\x01value\\x02 for each property; a str is taken as the encoded text itself."""
    if isinstance(props, str):
        return props.encode()
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()


def spec_record(
    *,
    body: bytes,
    topic: str,
    props: dict[str, str] | str,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    phys_offset: int = 0,
    sys_flag: int = 0,
    born_ts: int = 0,
    born_ip: bytes = b"\x7f\x00\x00\x01",
    born_port: int = 0,
    store_ts: int = 0,
    store_ip: bytes = b"\x7f\x00\x00\x01",
    store_port: int = 10911,
    reconsume_times: int = 0,
    prepared_offset: int = 0,
) -> bytes:
    """A v1 commitlog record, one field at a time."""
    if len(born_ip) == 16:
        sys_flag |= 0x10
    if len(store_ip) == 16:
        sys_flag |= 0x20
    prop_bytes = spec_properties(props)
    topic_bytes = topic.encode()
    fields = [
        struct.pack(">i", -626843481),  # MAGIC v1 0xDAA320A7
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),
        struct.pack(">i", queue_id),
        struct.pack(">i", flag),
        struct.pack(">q", queue_offset),
        struct.pack(">q", phys_offset),
        struct.pack(">i", sys_flag),
        struct.pack(">q", born_ts),
        born_ip + struct.pack(">i", born_port),
        struct.pack(">q", store_ts),
        store_ip + struct.pack(">i", store_port),
        struct.pack(">i", reconsume_times),
        struct.pack(">q", prepared_offset),
        struct.pack(">i", len(body)) + body,
        struct.pack(">b", len(topic_bytes)) + topic_bytes,
        struct.pack(">h", len(prop_bytes)) + prop_bytes,
    ]
    rest = b"".join(fields)
    return struct.pack(">i", 4 + len(rest)) + rest


def spec_blank(bytes_left: int) -> bytes:
    return struct.pack(">i", bytes_left) + bytes.fromhex("CBD43194")


def spec_cq_entry(offset: int, size: int, tags_code: int) -> bytes:
    return struct.pack(">q", offset) + struct.pack(">i", size) + struct.pack(">q", tags_code)


def spec_signed(
    ext: dict[str, str], body: bytes, access_key: str, secret_key: str
) -> dict[str, str]:
    """`ext` signed as RocketMQ's AclClientRPCHook signs a request, written here from the
    spec alone: AccessKey added, then Signature = base64(HMAC-SHA1(secretKey, the values of
    the fields sorted by key, as UTF-8, then the body))."""
    fields = {**ext, "AccessKey": access_key}
    content = "".join(value for _key, value in sorted(fields.items())).encode() + body
    mac = hmac.new(secret_key.encode(), content, hashlib.sha1).digest()
    return {**fields, "Signature": base64.b64encode(mac).decode()}


_JAVA_QUEUE_KEY = re.compile(r'\{"brokerName":"([^"]*)","queueId":(\d+),"topic":"([^"]*)"\}:')


def spec_queue_keyed(body: bytes) -> Any:
    """A body with fastjson's `Map<MessageQueue, V>`: each key is written as the queue object
    itself, fields in fastjson's (alphabetical) order, `{"brokerName":..,"queueId":..,
    "topic":..}:`. Read here by matching exactly that text; each such key comes back as
    "topic/brokerName/queueId"."""
    text = _JAVA_QUEUE_KEY.sub(lambda m: f'"{m[3]}/{m[1]}/{m[2]}":', body.decode("utf-8"))
    return json.loads(text)
