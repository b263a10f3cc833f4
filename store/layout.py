"""Every byte format of the store, defined once. All big-endian.

CommitLog record, v1, IPv4 hosts (RocketMQ `CommitLog`/`MessageDecoder`)::

     0 TOTALSIZE i32 | 4 MAGIC i32 | 8 BODYCRC i32 | 12 QUEUEID i32 | 16 FLAG i32
    20 QUEUEOFFSET i64 | 28 PHYSICALOFFSET i64 | 36 SYSFLAG i32 | 40 BORNTIMESTAMP i64
    48 BORNHOST 4s+i32 (16s+i32 if SYSFLAG&0x10) | 56 STORETIMESTAMP i64
    64 STOREHOST 4s+i32 (16s+i32 if SYSFLAG&0x20) | 72 RECONSUMETIMES i32
    76 PREPARED_TX_OFFSET i64 | 84 BODYLEN i32, BODY | TOPICLEN i8, TOPIC | PROPLEN i16, PROPS

End-of-file filler (BLANK): ``i32 bytesLeft | i32 0xCBD43194``.
ConsumeQueue entry: ``i64 commitLogOffset | i32 size | i64 tagsCode`` (20 bytes).
IndexFile: 40-byte header, ``i32`` hash slots, 20-byte entries
``i32 keyHash | i64 phyOffset | i32 timeDiffSec | i32 prevIndex``.
Checkpoint: 4096 bytes, ``i64 physic | i64 logics | i64 index | i64 masterFlushed | i64 confirm``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from enum import IntEnum
from functools import lru_cache

import numpy as np

# --- commitlog ---------------------------------------------------------------------------------
MESSAGE_MAGIC_V1 = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8
CRC_MASK = 0x7FFFFFFF
MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767


class SysFlag:
    """RocketMQ `MessageSysFlag` bits."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80


def transaction_type(sys_flag: int) -> int:
    return sys_flag & SysFlag.TRANSACTION_MASK


def is_queued(sys_flag: int) -> bool:
    """NOT and COMMIT records take a queue offset and a consume-queue entry (prepared and
    rolled-back ones do not)."""
    return transaction_type(sys_flag) in (
        SysFlag.TRANSACTION_NOT_TYPE,
        SysFlag.TRANSACTION_COMMIT_TYPE,
    )


def is_indexed(sys_flag: int) -> bool:
    """Every record but a rolled-back one is indexed (RocketMQ `IndexService.buildIndex`)."""
    return transaction_type(sys_flag) != SysFlag.TRANSACTION_ROLLBACK_TYPE


def queue_key(topic: str, queue_id: int) -> str:
    """`topic-queueId`, RocketMQ's key of the queue-offset table."""
    return f"{topic}-{queue_id}"


def _entry_layout(
    fields: list[tuple[str, str]],
) -> tuple[struct.Struct, np.dtype[np.void]]:
    """One fixed-size entry as a struct (one at a time) and a numpy dtype (whole arrays),
    both from the same big-endian field list."""
    return (
        struct.Struct(">" + "".join(code for _, code in fields)),
        np.dtype([(name, ">" + code) for name, code in fields]),
    )


# Leading fields up to BORNTIMESTAMP: size, magic, crc, queueId, flag, queueOffset, physOffset,
# sysFlag, bornTimestamp; as a struct (one record) and a numpy dtype (many records' heads).
_RECORD_HEAD_LAYOUT = [
    ("total", "i"), ("magic", "i"), ("crc", "i"), ("queue_id", "i"), ("flag", "i"),
    ("queue_offset", "q"), ("phy", "q"), ("sys_flag", "i"), ("born_ts", "q"),
]  # fmt: skip
RECORD_HEAD, RECORD_HEAD_DTYPE = _entry_layout(_RECORD_HEAD_LAYOUT)
assert RECORD_HEAD.size == RECORD_HEAD_DTYPE.itemsize == 48
# Where each of those fields starts in a record.
RECORD_HEAD_OFFSETS = {
    name: struct.calcsize(">" + "".join(code for _, code in _RECORD_HEAD_LAYOUT[:i]))
    for i, (name, _) in enumerate(_RECORD_HEAD_LAYOUT)
}
HOST_V4 = struct.Struct(">4si")
HOST_V6 = struct.Struct(">16si")
assert HOST_V4.size == 8 and HOST_V6.size == 20
# The fixed part ends with reconsumeTimes, preparedTransactionOffset, bodyLength.
RECORD_TAIL = struct.Struct(">iqi")


def _fixed(born_v6: bool, store_v6: bool) -> struct.Struct:
    """The fixed part of a record, up to and including BODYLEN, for its host kinds."""
    born = "16si" if born_v6 else "4si"
    store = "16si" if store_v6 else "4si"
    return struct.Struct(RECORD_HEAD.format + born + "q" + store + RECORD_TAIL.format[1:])


RECORD_FIXED = {
    (False, False): _fixed(False, False),
    (True, False): _fixed(True, False),
    (False, True): _fixed(False, True),
    (True, True): _fixed(True, True),
}
assert RECORD_FIXED[(False, False)].size == 88
assert RECORD_FIXED[(True, True)].size == 88 + 24
TOPIC_LEN_V1 = struct.Struct(">b")
TOPIC_LEN_V2 = struct.Struct(">h")
PROPS_LEN = struct.Struct(">h")
BLANK = struct.Struct(">ii")
assert BLANK.size == END_FILE_MIN_BLANK_LENGTH


I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
INT_RANGE = range(-(2**31), 2**31)  # what a record's 4-byte fields hold (Java's int)
LONG_RANGE = range(-(2**63), 2**63)  # and its 8-byte ones (Java's long)

OFF_SYS_FLAG = RECORD_HEAD_OFFSETS["sys_flag"]
assert OFF_SYS_FLAG == 36


def store_timestamp_offset(sys_flag: int) -> int:
    """Where STORETIMESTAMP sits: 56, or 68 when the born host is IPv6."""
    born = HOST_V6.size if sys_flag & SysFlag.BORNHOST_V6 else HOST_V4.size
    return RECORD_HEAD.size + born


# --- properties ------------------------------------------------------------------
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


# Message.marks: what the put path asks of a message's properties, found when it is made.
MARK_DELAY = 1  # DELAY is set (a delay level is asked for)
MARK_NO_WAIT = 2  # WAIT is "false": under SYNC_FLUSH it is answered without its flush
MARK_SHARDING_KEY = 4  # SHARDING_KEY is set (an ordered message)


class MessageConst:
    """Property names from RocketMQ `MessageConst` used by the store."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    UNIQ_KEY = "UNIQ_KEY"  # the producer's message id (PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    # The name rmqpy 0.1 wrote the producer's id under by mistake (the Java constant's name,
    # not its value): still read wherever UNIQ_KEY is, never written.
    LEGACY_UNIQ_KEY = "UNIQ_CLIENT_MESSAGE_ID_KEYIDX"
    CLUSTER = "CLUSTER"
    RETRY_TOPIC = "RETRY_TOPIC"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    SHARDING_KEY = "__SHARDINGKEY"  # a FIFO (ordered) message's group, from RocketMQ 5 clients
    REAL_TOPIC = "REAL_TOPIC"  # a delayed message's own topic and queue while it waits
    REAL_QID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"  # "true" on a transaction's half message
    MSG_REGION = "MSG_REGION"  # extFields of a send's answer: the broker's region
    TRACE_SWITCH = "TRACE_ON"  # and whether message trace is on


# Where delayed messages wait, queue level-1; its consume-queue entries' tags code is the
# time each is due (store time + the level's delay), not a hash of TAGS.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


def due_time(store_timestamp: int, queue_id: int, delay_levels_ms: Sequence[int]) -> int:
    """The tags code of a schedule-topic entry: when its message is due."""
    level = min(max(queue_id, 0), len(delay_levels_ms) - 1)
    return store_timestamp + delay_levels_ms[level]


# --- consume queue ---------------------------------------------------------------------
CQ_ENTRY, CQ_ENTRY_DTYPE = _entry_layout([("offset", "q"), ("size", "i"), ("tags", "q")])
CQ_STORE_UNIT_SIZE = CQ_ENTRY.size
assert CQ_STORE_UNIT_SIZE == 20
CQ_PLACEHOLDER = (0, 0x7FFFFFFF, 0)  # fills slots below a queue's first file
assert CQ_ENTRY_DTYPE.itemsize == CQ_STORE_UNIT_SIZE


@lru_cache(maxsize=64)
def cq_entries(count: int) -> struct.Struct:
    """`count` consecutive consume-queue entries as one flat struct: unpacked in one call,
    field k of entry i is item 3*i + k."""
    return struct.Struct(">" + CQ_ENTRY.format[1:] * count)


# --- index file ------------------------------------------------------------------------
INDEX_HEADER = struct.Struct(">qqqqii")
assert INDEX_HEADER.size == 40
INDEX_SLOT = struct.Struct(">i")
INDEX_ENTRY, INDEX_ENTRY_DTYPE = _entry_layout(
    [("hash", "i"), ("phy", "q"), ("diff", "i"), ("prev", "i")]
)
assert INDEX_ENTRY.size == INDEX_ENTRY_DTYPE.itemsize == 20
INDEX_SLOT_SIZE = INDEX_SLOT.size

# --- checkpoint ------------------------------------------------------------------------
CHECKPOINT = struct.Struct(">qqqqq")
CHECKPOINT_FILE_SIZE = 4096

# --- message ids ----------------------------------------------------------------------
MSG_ID_V4 = struct.Struct(">4siq")
MSG_ID_V6 = struct.Struct(">16siq")
assert MSG_ID_V4.size == 16 and MSG_ID_V6.size == 28

PAGE_SIZE = 4096


class PutMessageStatus(IntEnum):
    """Mirrors RocketMQ `PutMessageStatus` (ordinals of 5.x)."""

    PUT_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3
    SERVICE_NOT_AVAILABLE = 4
    CREATE_MAPPED_FILE_FAILED = 5
    MESSAGE_ILLEGAL = 6
    PROPERTIES_SIZE_EXCEEDED = 7
    OS_PAGE_CACHE_BUSY = 8
    UNKNOWN_ERROR = 9


class GetMessageStatus(IntEnum):
    """Mirrors RocketMQ `GetMessageStatus`."""

    FOUND = 0
    NO_MATCHED_MESSAGE = 1
    MESSAGE_WAS_REMOVING = 2
    OFFSET_FOUND_NULL = 3
    OFFSET_OVERFLOW_BADLY = 4
    OFFSET_OVERFLOW_ONE = 5
    OFFSET_TOO_SMALL = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    NO_MESSAGE_IN_QUEUE = 8
    OFFSET_RESERVED = 9
