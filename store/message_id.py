"""Message ids: offsetMsgId (store host + physical offset) and UNIQ_KEY.

offsetMsgId = uppercase hex of ``ip(4|16) | i32 port | i64 physicalOffset`` (RocketMQ
`MessageDecoder.createMessageId`); 32 characters for IPv4, 56 for IPv6.
UNIQ_KEY = uppercase hex of ``ip(4|16) | i16 pid | i32 classLoaderHash | i32 msSinceMonthStart
| i16 counter`` (RocketMQ `MessageClientIDSetter`).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from rmqpy.store.layout import I64, MSG_ID_V4, MSG_ID_V6
from rmqpy.store.message import Host

# The time field is the milliseconds since the month began: Java writes them with an int
# cast (`MessageClientIDSetter`), so past day 24 the bits are those of an unsigned count,
# which is how `getNearlyTimeFromID` reads them back.
UNIQ_V4 = struct.Struct(">4shiIh")
UNIQ_V6 = struct.Struct(">16shiIh")
assert UNIQ_V4.size == 16 and UNIQ_V6.size == 28


def create_offset_msg_id(store_host: Host, physical_offset: int) -> str:
    return f"{offset_msg_id_prefix(store_host)}{physical_offset:016X}"


def offset_msg_ids(store_host: Host, physical_offsets: Iterable[int]) -> list[str]:
    """`create_offset_msg_id` of each offset (a batch's records share their host)."""
    host = offset_msg_id_prefix(store_host)
    return [f"{host}{offset:016X}" for offset in physical_offsets]


@functools.lru_cache(maxsize=64)
def offset_msg_id_prefix(store_host: Host) -> str:
    """The id's host part: ip and port, in uppercase hex (the offset's 16 digits follow)."""
    fmt = MSG_ID_V6 if store_host.is_v6 else MSG_ID_V4
    return fmt.pack(store_host.ip, store_host.port, 0).hex().upper()[: -2 * I64.size]


def decode_offset_msg_id(msg_id: str) -> tuple[Host, int]:
    """(store host, physical offset); 32 characters are IPv4, anything else IPv6. Raises
    ValueError when the id cannot be one: wrong length, or a port or offset out of range."""
    raw = bytes.fromhex(msg_id)
    fmt = MSG_ID_V4 if len(msg_id) == 32 else MSG_ID_V6
    if len(raw) != fmt.size:
        raise ValueError(f"message id {msg_id!r} is neither 32 nor 56 hex characters")
    ip, port, offset = fmt.unpack(raw)
    if not 0 <= port <= 0xFFFF or offset < 0:  # e.g. a UNIQ_KEY, whose bytes there are a pid
        raise ValueError(f"{msg_id!r} is not an offsetMsgId: port {port}, offset {offset}")
    return Host(bytes(ip), port), offset


@dataclass(frozen=True, slots=True)
class UniqKey:
    ip: bytes
    pid: int
    class_loader_hash: int
    ms_since_month_start: int
    counter: int

    def encode(self) -> str:
        fmt = UNIQ_V6 if len(self.ip) == 16 else UNIQ_V4
        return (
            fmt.pack(
                self.ip, self.pid, self.class_loader_hash, self.ms_since_month_start, self.counter
            )
            .hex()
            .upper()
        )

    @classmethod
    def decode(cls, text: str) -> UniqKey:
        raw = bytes.fromhex(text)
        fmt = UNIQ_V4 if len(raw) == UNIQ_V4.size else UNIQ_V6
        if len(raw) != fmt.size:
            raise ValueError(f"UNIQ_KEY {text!r} is neither 32 nor 56 hex characters")
        ip, pid, loader, ms, counter = fmt.unpack(raw)
        return cls(bytes(ip), pid, loader, ms, counter)
