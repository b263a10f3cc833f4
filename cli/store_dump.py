"""`rmqpy store dump`: decode RocketMQ store files offline, ours or Java RocketMQ's.

Each dumper yields one dict per record / entry and ends by raising `DumpStopped` when it meets
damage (a bad magic, a torn record, a CRC mismatch, an entry that cannot be), so the caller
prints everything before the damage and then where and why it stopped. A clean end (the
BLANK filler, zeros after the last record, the index count) just ends the iteration.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rmqpy.store.fileio import map_read_only
from rmqpy.store.layout import (
    BLANK_MAGIC,
    CQ_ENTRY,
    CQ_PLACEHOLDER,
    I32,
    INDEX_ENTRY,
    INDEX_HEADER,
    INDEX_SLOT_SIZE,
    MessageConst,
    SysFlag,
)
from rmqpy.store.message import RecordError, check_record, decode_record, inflated_body
from rmqpy.store.message_id import create_offset_msg_id

DEFAULT_INDEX_SLOTS = 5_000_000


class DumpStopped(Exception):
    """Damage at byte `position` of the file."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"stopped at byte {position}: {reason}")
        self.position = position
        self.reason = reason


def _base_offset(path: Path) -> int:
    """Files are named by their first byte's offset (20 digits); other names start at 0."""
    return int(path.name) if path.name.isdigit() else 0


def _preview(body: bytes, limit: int = 80) -> str:
    text = body[:limit].decode("utf-8", "replace")
    return text + ("…" if len(body) > limit else "")


def _inflated(body: bytes, sys_flag: int) -> bytes:
    """The body as consumers receive it: inflated when the sysFlag marks it compressed (the
    stored bytes when they do not inflate: a dump shows what is there)."""
    try:
        return inflated_body(body, sys_flag)
    except zlib.error:
        return body


def dump_commitlog(path: Path, check_crc: bool = True) -> Iterator[dict[str, Any]]:
    buf = map_read_only(path)
    base = _base_offset(path)
    pos, end = 0, len(buf)
    while pos + 8 <= end:
        total, magic = I32.unpack_from(buf, pos)[0], I32.unpack_from(buf, pos + 4)[0]
        if total == 0 and magic == 0:
            return  # the unwritten, zero-filled rest of the file
        if magic == BLANK_MAGIC:
            return
        try:
            check_record(buf, pos, check_crc)
            record = decode_record(buf, pos, check_crc=False)
        except (RecordError, ValueError, UnicodeDecodeError) as exc:
            raise DumpStopped(pos, str(exc)) from exc
        offset_id = create_offset_msg_id(record.store_host, record.physical_offset)
        yield {
            "position": pos,
            "commitlogOffset": base + pos,
            "totalSize": record.total_size,
            "topic": record.topic,
            "queueId": record.queue_id,
            "queueOffset": record.queue_offset,
            "physicalOffset": record.physical_offset,
            "sysFlag": record.sys_flag,
            "bornTimestamp": record.born_timestamp,
            "bornHost": str(record.born_host),
            "storeTimestamp": record.store_timestamp,
            "storeHost": str(record.store_host),
            "reconsumeTimes": record.reconsume_times,
            "bodyCrc": record.body_crc,
            "bodyLength": len(record.body),  # as stored
            "bodyCompressed": bool(record.sys_flag & SysFlag.COMPRESSED),
            "tags": record.tags,
            "keys": record.properties.get(MessageConst.KEYS),
            "msgId": record.uniq_key or offset_id,
            "offsetMsgId": offset_id,
            "properties": record.properties,
            "body": _preview(_inflated(record.body, record.sys_flag)),
        }
        pos += record.total_size


def dump_consume_queue(path: Path) -> Iterator[dict[str, Any]]:
    buf = map_read_only(path)
    base = _base_offset(path)
    size = CQ_ENTRY.size
    whole = len(buf) - len(buf) % size
    for pos in range(0, whole, size):
        offset, length, tags_code = CQ_ENTRY.unpack_from(buf, pos)
        if (offset, length, tags_code) == (0, 0, 0):
            return
        placeholder = (offset, length, tags_code) == CQ_PLACEHOLDER
        if not placeholder and (offset < 0 or length <= 0):
            raise DumpStopped(pos, f"entry with commitlog offset {offset} and size {length}")
        yield {
            "position": pos,
            "index": (base + pos) // size,
            "commitlogOffset": offset,
            "size": length,
            "tagsCode": tags_code,
            "placeholder": placeholder,
        }
    if whole != len(buf):
        raise DumpStopped(whole, f"{len(buf) - whole} trailing bytes are not a whole entry")


def dump_index(path: Path, slots: int = DEFAULT_INDEX_SLOTS) -> Iterator[dict[str, Any]]:
    """The header first, then entries 1 .. indexCount-1 (entry 0 is never used)."""
    buf = map_read_only(path)
    if len(buf) < INDEX_HEADER.size:
        raise DumpStopped(0, f"{len(buf)} bytes is shorter than the 40-byte header")
    begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = INDEX_HEADER.unpack_from(buf)
    entries_at = INDEX_HEADER.size + slots * INDEX_SLOT_SIZE
    capacity = (len(buf) - entries_at) // INDEX_ENTRY.size
    if capacity <= 0 or (len(buf) - entries_at) % INDEX_ENTRY.size:
        raise DumpStopped(
            INDEX_HEADER.size,
            f"file size {len(buf)} does not fit {slots} hash slots (pass --slots maxHashSlotNum)",
        )
    yield {
        "header": True,
        "beginTimestamp": begin_ts,
        "endTimestamp": end_ts,
        "beginPhyOffset": begin_phy,
        "endPhyOffset": end_phy,
        "hashSlotCount": slot_count,
        "indexCount": index_count,
        "capacity": capacity,
    }
    if index_count > capacity:
        raise DumpStopped(INDEX_HEADER.size, f"indexCount {index_count} > capacity {capacity}")
    for i in range(1, index_count):
        pos = entries_at + i * INDEX_ENTRY.size
        key_hash, phy, time_diff, prev = INDEX_ENTRY.unpack_from(buf, pos)
        if prev < 0 or prev >= i or phy < 0:
            raise DumpStopped(pos, f"entry {i} links to entry {prev} at commitlog offset {phy}")
        yield {
            "index": i,
            "keyHash": key_hash,
            "commitlogOffset": phy,
            "timeDiffSeconds": time_diff,
            "prevIndex": prev,
        }
