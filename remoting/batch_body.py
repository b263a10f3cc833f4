"""The body of SEND_BATCH_MESSAGE (320) (RocketMQ `MessageDecoder.encodeMessages`).

Items back to back, each::

    i32 totalSize (itself included) | i32 magic = 0 | i32 bodyCRC = 0 | i32 flag |
    i32 bodyLen | body | i16 propertiesLen | properties (name\\x01value\\x02...)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from rmqpy.remoting.errors import RemoteProtocolError

ITEM_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLen
PROPS_LEN = struct.Struct(">h")
assert ITEM_HEAD.size == 20 and PROPS_LEN.size == 2


@dataclass(frozen=True, slots=True)
class BatchItem:
    flag: int
    body: bytes
    properties: str


def decode_batch_body(data: bytes) -> list[tuple[int, bytes, str]]:
    """(flag, body, properties) of every item of a batch body (plain tuples: this runs once
    per message sent in a batch); a malformed body raises RemoteProtocolError."""
    items = []
    view = memoryview(data)
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < ITEM_HEAD.size + PROPS_LEN.size:
            raise RemoteProtocolError(f"batch item at byte {pos} is truncated")
        total, _magic, _crc, flag, body_len = ITEM_HEAD.unpack_from(view, pos)
        body_at = pos + ITEM_HEAD.size
        props_at = body_at + body_len
        if body_len < 0 or props_at + PROPS_LEN.size > end:
            raise RemoteProtocolError(f"batch item at byte {pos}: body length {body_len} is bad")
        (props_len,) = PROPS_LEN.unpack_from(view, props_at)
        item_end = props_at + PROPS_LEN.size + props_len
        if props_len < 0 or item_end > end or total != item_end - pos:
            raise RemoteProtocolError(f"batch item at byte {pos}: sizes do not add up")
        try:
            props = bytes(view[props_at + PROPS_LEN.size : item_end]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError(f"batch item at byte {pos}: properties not UTF-8") from exc
        items.append((flag, bytes(view[body_at:props_at]), props))
        pos = item_end
    if not items:
        raise RemoteProtocolError("empty batch body")
    return items


def encode_batch_body(items: Iterable[BatchItem]) -> bytes:
    out = bytearray()
    for item in items:
        props = item.properties.encode("utf-8")
        total = ITEM_HEAD.size + len(item.body) + PROPS_LEN.size + len(props)
        out += ITEM_HEAD.pack(total, 0, 0, item.flag, len(item.body))
        out += item.body
        out += PROPS_LEN.pack(len(props))
        out += props
    return bytes(out)
