"""Commitlog records to Arrow, two ways that must agree.

`decode_batch` is the fast one, compiled where built (`pipeline._arrow_records`: the columns
written straight into Arrow buffers, about ten times faster), else numpy: given where
records start (from `commitlog_scan.scan`), every fixed field is gathered for all records at
once with numpy (a record's fields sit at offsets that depend only on its host kinds, IPv4
or IPv6), bodies, topics and properties are copied out of the buffer by Arrow's `take` (no
Python per record), properties are split into a map with Arrow compute, and hosts and
message ids are formatted once per distinct host. Offsets come from the layout structs in
`store.layout`, never from literals.

`reference_rows` is the plain one: `store.message.decode_record` per record, the same decoder
the broker's recovery and the client use. A test proves the two agree field for field.

Both give a body the way consumers receive it: inflated when the record's sysFlag marks it
compressed (zlib: RocketMQ producers compress bodies over 4 KiB); `sys_flag` keeps the flags
as stored.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rmqpy.config.compiled import twin
from rmqpy.pipeline.commitlog_scan import Damage
from rmqpy.pipeline.schema import ARROW_SCHEMA, NAMES
from rmqpy.store.layout import (
    HOST_V4,
    HOST_V6,
    I32,
    I64,
    MESSAGE_MAGIC_V1,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPS_LEN,
    RECORD_FIXED,
    RECORD_HEAD,
    RECORD_HEAD_DTYPE,
    RECORD_TAIL,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
    MessageConst,
    SysFlag,
)
from rmqpy.store.message import Host, decode_record, inflated_body
from rmqpy.store.message_id import create_offset_msg_id

Ints = npt.NDArray[np.int64]

_HEX = np.array([f"{i:02X}".encode() for i in range(256)], dtype="S2")
_UTC = pa.timestamp("us", tz="UTC")


def _rows(buf8: npt.NDArray[np.uint8], starts: Ints, width: int) -> npt.NDArray[np.uint8]:
    """The `width` bytes at each of `starts`, one contiguous row each."""
    return np.ascontiguousarray(buf8[starts[:, None] + np.arange(width)])


def _be(buf8: npt.NDArray[np.uint8], starts: Ints, width: int) -> Ints:
    """The big-endian signed integers of `width` bytes at `starts`."""
    return _rows(buf8, starts, width).view(f">i{width}").reshape(-1).astype(np.int64)


def _within(
    at: Ints, width: Ints | int, low: Ints, high: Ints
) -> tuple[Ints, npt.NDArray[np.bool_]]:
    """`at` where [at, at + width) lies in [low, high), else `low` (a place safe to read),
    and where it did."""
    ok = (at >= low) & (at + width <= high)
    return np.where(ok, at, low), ok


def _heads(buf8: npt.NDArray[np.uint8], starts: Ints) -> npt.NDArray[np.void]:
    """The leading fields every record has at the same offsets (RECORD_HEAD), of every
    record at once: one gather instead of one per field."""
    return _rows(buf8, starts, RECORD_HEAD.size).view(RECORD_HEAD_DTYPE).reshape(-1)


def _ranges(kind: pa.DataType, buf: bytes | memoryview, starts: Ints, lengths: Ints) -> pa.Array:
    """The byte ranges [start, start + length) of `buf` as an Arrow array of `kind` (binary
    or string). The ranges, in order and apart, and the gaps between them are the values of
    one array laid over `buf` as it is (no copy; 64-bit offsets, for files past 2 GiB);
    Arrow's `take` then copies every other value out in C, with no Python per range."""
    count = len(starts)
    bounds = np.empty(2 * count + 1, dtype=np.int64)
    bounds[0 : 2 * count : 2] = starts
    bounds[1 : 2 * count : 2] = starts + lengths
    bounds[2 * count] = bounds[2 * count - 1] if count else 0
    if count and (bounds[0] < 0 or bounds[-1] > len(buf) or (np.diff(bounds) < 0).any()):
        # Arrow trusts the offsets it is given: a range out of order or out of the buffer
        # would be a read out of bounds, not an error. `decode_batch` never passes one.
        raise ValueError("byte ranges must be in order, apart, and inside the buffer")
    large = pa.large_binary() if kind == pa.binary() else pa.large_string()
    laid = pa.Array.from_buffers(large, 2 * count, [None, pa.py_buffer(bounds), pa.py_buffer(buf)])
    return laid.take(pa.array(np.arange(0, 2 * count, 2))).cast(kind)


def _hosts(
    buf8: npt.NDArray[np.uint8], at: Ints, v6: npt.NDArray[np.bool_]
) -> tuple[list[Host], npt.NDArray[np.intp]]:
    """The distinct hosts among the records (their ip:port at `at`), and each record's index
    into them; records repeat a handful of hosts."""
    index = np.zeros(len(at), dtype=np.intp)
    hosts: list[Host] = []
    v4 = ~v6
    if v4.any():
        ip = (_be(buf8, at[v4], 4) & 0xFFFFFFFF).astype(np.uint64)
        port = (_be(buf8, at[v4] + 4, 4) & 0xFFFFFFFF).astype(np.uint64)
        distinct, inverse = np.unique((ip << np.uint64(32)) | port, return_inverse=True)
        hosts = [Host((k >> 32).to_bytes(4, "big"), k & 0xFFFFFFFF) for k in distinct.tolist()]
        index[v4] = inverse.reshape(-1)
    seen: dict[bytes, int] = {}
    for i in np.flatnonzero(v6).tolist():
        key = bytes(buf8[at[i] : at[i] + HOST_V6.size])
        if key not in seen:
            ip6, port6 = HOST_V6.unpack(key)
            seen[key] = len(hosts)
            hosts.append(Host(bytes(ip6), port6))
        index[i] = seen[key]
    return hosts, index


def _properties(text: pa.Array) -> pa.Array:
    """`k\\x01v\\x02...` strings to a map, as RocketMQ's parser reads them: segments shorter
    than 3 characters or without a separator are skipped."""
    items = pc.split_pattern(text, PROPERTY_SEPARATOR)
    flat = pc.list_flatten(items)
    parents = pc.list_parent_indices(items).to_numpy()
    pairs = pc.split_pattern(flat, NAME_VALUE_SEPARATOR, max_splits=1)
    valid = pc.and_(
        pc.greater_equal(pc.utf8_length(flat), 3), pc.equal(pc.list_value_length(pairs), 2)
    )
    pairs = pc.filter(pairs, valid)
    counts = np.bincount(parents[valid.to_numpy(zero_copy_only=False)], minlength=len(text))
    offsets = np.zeros(len(text) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(
        pa.array(offsets), pc.list_element(pairs, 0), pc.list_element(pairs, 1)
    )


def reference_decode_batch(
    buf: bytes | memoryview, positions: Ints
) -> tuple[pa.RecordBatch, Damage | None]:
    """The records starting at `positions` of `buf`: a commitlog file, or a pull's body (whole
    records back to back). A record whose fields do not add up to its TOTALSIZE ends the
    batch there; the Damage says where."""
    buf8 = np.frombuffer(buf, dtype=np.uint8)
    p = positions
    head = _heads(buf8, p)
    total = head["total"].astype(np.int64)
    magic = head["magic"].astype(np.int64)
    sys_flag = head["sys_flag"].astype(np.int64)
    born_v6 = (sys_flag & SysFlag.BORNHOST_V6) != 0
    store_v6 = (sys_flag & SysFlag.STOREHOST_V6) != 0
    fixed = np.where(
        born_v6,
        np.where(store_v6, RECORD_FIXED[(True, True)].size, RECORD_FIXED[(True, False)].size),
        np.where(store_v6, RECORD_FIXED[(False, True)].size, RECORD_FIXED[(False, False)].size),
    )
    # Every field is read inside its record: a length that points elsewhere (a damaged
    # record whose head still passed the walk) is read at the record's start instead, and
    # the record reported damaged below, rather than read past the buffer.
    end = np.minimum(p + total, len(buf8))
    inside = fixed <= total
    born_at = p + RECORD_HEAD.size
    store_ts_at = born_at + np.where(born_v6, HOST_V6.size, HOST_V4.size)
    store_at = store_ts_at + I64.size
    tail_at = p + fixed - RECORD_TAIL.size
    body_at = p + fixed
    store_ts_at, store_at, tail_at = (
        np.where(inside, at, p) for at in (store_ts_at, store_at, tail_at)
    )
    # BODYLEN ends the fixed part
    body_len = _be(buf8, np.where(inside, p + fixed - I32.size, p), I32.size)
    v1 = magic == MESSAGE_MAGIC_V1
    topic_len_at, ok = _within(body_at + body_len, np.where(v1, 1, TOPIC_LEN_V2.size), p, end)
    inside &= ok & (body_len >= 0)
    topic_len = np.where(
        v1,
        _be(buf8, topic_len_at, 1) & 0xFF,
        _be(buf8, topic_len_at, TOPIC_LEN_V2.size),
    )
    topic_at = topic_len_at + np.where(v1, TOPIC_LEN_V1.size, TOPIC_LEN_V2.size)
    props_len_at, ok = _within(topic_at + topic_len, PROPS_LEN.size, p, end)
    inside &= ok
    props_len = _be(buf8, props_len_at, PROPS_LEN.size)
    props_at = props_len_at + PROPS_LEN.size
    bad = np.flatnonzero(
        ~inside
        | (props_at + props_len - p != total)
        | (body_len < 0)
        | (topic_len < 0)
        | (props_len < 0)
    )
    damage = None
    if len(bad):
        k = int(bad[0])
        damage = Damage(int(p[k]), f"record at {int(p[k])}: its fields do not add up to TOTALSIZE")
        return reference_decode_batch(buf, p[:k])[0], damage

    topics = _ranges(pa.string(), buf, topic_at, topic_len)
    props = _properties(_ranges(pa.string(), buf, props_at, props_len))
    store_hosts, store_index = _hosts(buf8, store_at, store_v6)
    born_hosts, born_index = _hosts(buf8, born_at, born_v6)
    phy = head["phy"].astype(np.int64)
    columns: dict[str, pa.Array] = {
        "topic": topics,
        "queue_id": pa.array(head["queue_id"].astype(np.int32)),
        "queue_offset": pa.array(head["queue_offset"].astype(np.int64)),
        "commitlog_offset": pa.array(phy),
        "body": _ranges(pa.binary(), buf, body_at, body_len),
        "keys": pc.map_lookup(props, MessageConst.KEYS, "last"),
        "tags": pc.map_lookup(props, MessageConst.TAGS, "last"),
        "properties": props,
        "born_timestamp": pa.array(head["born_ts"].astype(np.int64) * 1000, _UTC),
        "store_timestamp": pa.array(_be(buf8, store_ts_at, 8) * 1000, _UTC),
        "born_host": pa.array([str(h) for h in born_hosts], pa.string()).take(born_index),
        "store_host": pa.array([str(h) for h in store_hosts], pa.string()).take(store_index),
        "sys_flag": pa.array(sys_flag.astype(np.int32)),
        "reconsume_times": pa.array(_be(buf8, tail_at, 4).astype(np.int32)),
        "offset_msg_id": _msg_ids(buf8, store_at, store_v6, phy, store_hosts, store_index),
    }
    columns["msg_id"] = pc.coalesce(
        pc.map_lookup(props, MessageConst.UNIQ_KEY, "last"),
        pc.map_lookup(props, MessageConst.LEGACY_UNIQ_KEY, "last"),
        columns["offset_msg_id"],
    )
    batch = pa.RecordBatch.from_arrays([columns[n] for n in NAMES], schema=ARROW_SCHEMA)
    return batch, damage


def _msg_ids(
    buf8: npt.NDArray[np.uint8],
    store_at: Ints,
    store_v6: npt.NDArray[np.bool_],
    phy: Ints,
    hosts: list[Host],
    index: npt.NDArray[np.intp],
) -> pa.Array:
    """offsetMsgId: hex of store ip, port and physical offset; IPv6 ones one by one."""
    n = len(phy)
    raw = np.empty((n, 16), dtype=np.uint8)
    raw[:, :8] = _rows(buf8, store_at, HOST_V4.size)
    raw[:, 8:] = phy.astype(">i8").view(np.uint8).reshape(n, 8)
    ids = pa.array(_HEX[raw].view("S32").reshape(-1), pa.binary()).cast(pa.string())
    v6 = np.flatnonzero(store_v6).tolist()
    if not v6:
        return ids
    out = ids.to_pylist()
    for i in v6:
        out[i] = create_offset_msg_id(hosts[index[i]], int(phy[i]))
    return pa.array(out, pa.string())


# The numpy decoder is kept as the reference the compiled twin is tested against; the twin
# declines the batches it does not take (None), and the reference decodes those.
decode_records = reference_decode_batch
_compiled = twin("rmqpy.pipeline._arrow_records")
if _compiled is not None:
    _compiled_decode = _compiled.decode_batch

    def decode_records(
        buf: bytes | memoryview, positions: Ints
    ) -> tuple[pa.RecordBatch, Damage | None]:
        batch = _compiled_decode(buf, np.ascontiguousarray(positions, dtype=np.int64))
        if batch is None:
            return reference_decode_batch(buf, positions)
        return batch, None


def decode_batch(buf: bytes | memoryview, positions: Ints) -> tuple[pa.RecordBatch, Damage | None]:
    """The records at `positions` as the sources hand them to Spark: `decode_records` (the
    compiled twin where built), with compressed bodies inflated."""
    batch, damage = decode_records(buf, positions)
    batch, bad_body = inflate_bodies(batch, positions)
    return batch, bad_body or damage


def inflate_bodies(batch: pa.RecordBatch, positions: Ints) -> tuple[pa.RecordBatch, Damage | None]:
    """`batch` with each body its sysFlag marks compressed inflated; a body that does not
    inflate ends the batch before its record, and the Damage says where (`positions`)."""
    flags = batch.column(NAMES.index("sys_flag"))
    compressed = pc.not_equal(pc.bit_wise_and(flags, SysFlag.COMPRESSED), 0)
    if not pc.any(compressed).as_py():
        return batch, None
    index = NAMES.index("body")
    bodies = batch.column(index).to_pylist()
    damage = None
    for k in np.flatnonzero(compressed.to_numpy(zero_copy_only=False)).tolist():
        try:
            bodies[k] = zlib.decompress(bodies[k])
        except zlib.error as exc:
            at = int(positions[k])
            damage = Damage(at, f"record at {at}: its compressed body does not inflate ({exc})")
            batch, bodies = batch.slice(0, k), bodies[:k]
            break
    column = pa.array(bodies, pa.binary())
    return batch.set_column(index, batch.schema.field(index), column), damage


def reference_rows(buf: bytes | memoryview, positions: Ints) -> list[dict[str, Any]]:
    """The same rows, one `decode_record` at a time."""
    rows = []
    for pos in positions.tolist():
        r = decode_record(buf, pos, check_crc=False)
        rows.append(
            {
                "topic": r.topic,
                "queue_id": r.queue_id,
                "queue_offset": r.queue_offset,
                "commitlog_offset": r.physical_offset,
                "body": inflated_body(r.body, r.sys_flag),
                "keys": r.properties.get(MessageConst.KEYS),
                "tags": r.properties.get(MessageConst.TAGS),
                "properties": list(r.properties.items()),
                "born_timestamp": _utc(r.born_timestamp),
                "store_timestamp": _utc(r.store_timestamp),
                "born_host": str(r.born_host),
                "store_host": str(r.store_host),
                "sys_flag": r.sys_flag,
                "reconsume_times": r.reconsume_times,
                "msg_id": r.uniq_key or create_offset_msg_id(r.store_host, r.physical_offset),
                "offset_msg_id": create_offset_msg_id(r.store_host, r.physical_offset),
            }
        )
    return rows


def _utc(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
