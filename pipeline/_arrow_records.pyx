# cython: language_level=3, boundscheck=False, wraparound=False
"""`pipeline.arrow_records.decode_batch`, compiled: the records' columns written straight
into Arrow buffers, two passes over the records (where each field is and how long, then the
bytes), no Python per record.

It takes the records the Spark sources meet: IPv4 hosts, and every length agreeing with
TOTALSIZE. A batch with any other record (an IPv6 host, damage) is left to the reference
(`None`), which decodes it, says where the damage is, and stops there, as it always did.
Properties are split as the reference splits them: on PROPERTY_SEPARATOR, each segment of
at least 3 characters with a NAME_VALUE_SEPARATOR a pair; keys, tags and the producer's id
are each the last pair of their name."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy, memcmp

import numpy as np
import pyarrow as pa

from rmqpy.store._big_endian cimport get32, get64
from rmqpy.store._decimal cimport put_decimal

from rmqpy.pipeline.schema import ARROW_SCHEMA, NAMES
from rmqpy.store.layout import (
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    RECORD_FIXED,
    MessageConst,
    SysFlag,
)

if RECORD_FIXED[(False, False)].format != ">iiiiiqqiq4siq4siiqi":
    raise ImportError("pipeline._arrow_records does not match store.layout's record")
if NAMES != ("topic", "queue_id", "queue_offset", "commitlog_offset", "body", "keys", "tags",
             "properties", "born_timestamp", "store_timestamp", "born_host", "store_host",
             "sys_flag", "reconsume_times", "msg_id", "offset_msg_id"):
    raise ImportError("pipeline._arrow_records does not match pipeline.schema")

# Where the fields of a record with IPv4 hosts start (RECORD_FIXED[(False, False)]).
cdef Py_ssize_t QUEUE_ID = 12, QUEUE_OFFSET = 20, PHY = 28, SYS_FLAG = 36, BORN_TS = 40
cdef Py_ssize_t BORN_HOST = 48, STORE_TS = 56, STORE_HOST = 64, RECONSUME = 72, BODY_LEN = 84
cdef Py_ssize_t FIXED = RECORD_FIXED[(False, False)].size
cdef int32_t MAGIC_V1 = MESSAGE_MAGIC_V1, MAGIC_V2 = MESSAGE_MAGIC_V2
cdef int32_t V6_HOSTS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6
cdef uint8_t ITEM_END = ord(PROPERTY_SEPARATOR), NAME_END = ord(NAME_VALUE_SEPARATOR)
cdef bytes KEYS = MessageConst.KEYS.encode(), TAGS = MessageConst.TAGS.encode()
cdef bytes UNIQ = MessageConst.UNIQ_KEY.encode()
cdef bytes LEGACY_UNIQ = MessageConst.LEGACY_UNIQ_KEY.encode()
cdef Py_ssize_t HOST_TEXT_MAX = 26  # 255.255.255.255:4294967295
cdef Py_ssize_t ID_TEXT = 32  # offsetMsgId of an IPv4 store host
cdef const char* HEX = b"0123456789ABCDEF"
cdef object UTC_MICROS = pa.timestamp("us", tz="UTC")
cdef int64_t INT32_MAX = 2147483647

# Per record, the fields pass one finds (indexes into `spans`).
DEF TOPIC_AT = 0
DEF TOPIC_LEN = 1
DEF BODY_AT = 2
DEF BODY_LEN_ = 3
DEF PROPS_AT = 4
DEF PROPS_LEN = 5
DEF KEYS_AT = 6  # -1: none
DEF KEYS_LEN = 7
DEF TAGS_AT = 8
DEF TAGS_LEN = 9
DEF ID_AT = 10  # the producer's id (UNIQ_KEY, else the legacy name); -1: none
DEF ID_LEN = 11
DEF SPAN = 12


cdef inline bint _named(const uint8_t* at, Py_ssize_t length, bytes name) noexcept:
    return length == len(name) and memcmp(at, <const char*>name, length) == 0


cdef inline Py_ssize_t _chars(const uint8_t* at, Py_ssize_t length) noexcept:
    """UTF-8 characters in [at, at + length) (bytes that do not continue one)."""
    cdef Py_ssize_t i, n = 0
    for i in range(length):
        if at[i] & 0xC0 != 0x80:
            n += 1
    return n


cdef Py_ssize_t _pairs(const uint8_t* src, Py_ssize_t start, Py_ssize_t length,
                       int64_t* span, int64_t* key_bytes, int64_t* value_bytes,
                       int32_t* keys, int32_t* values, uint8_t* key_data,
                       uint8_t* value_data) noexcept:
    """The pairs of the properties at [start, start + length): counted (keys NULL), or
    written as Arrow string offsets and bytes from `key_bytes` and `value_bytes` on; the
    last KEYS, TAGS and producer id noted in `span`."""
    cdef Py_ssize_t seg = start, end = start + length, stop, cut, n = 0, key_len, value_len
    cdef int64_t id_legacy_at = -1, id_legacy_len = 0
    cdef bint found_uniq = False
    cdef const uint8_t* hit
    while seg <= end:
        stop = seg
        while stop < end and src[stop] != ITEM_END:
            stop += 1
        cut = seg
        while cut < stop and src[cut] != NAME_END:
            cut += 1
        if cut < stop and _chars(src + seg, stop - seg) >= 3:
            key_len = cut - seg
            value_len = stop - cut - 1
            if keys != NULL:
                memcpy(key_data + key_bytes[0], src + seg, key_len)
                memcpy(value_data + value_bytes[0], src + cut + 1, value_len)
            key_bytes[0] += key_len
            value_bytes[0] += value_len
            if keys != NULL:
                keys[n + 1] = <int32_t>key_bytes[0]
                values[n + 1] = <int32_t>value_bytes[0]
            n += 1
            if _named(src + seg, key_len, KEYS):
                span[KEYS_AT], span[KEYS_LEN] = cut + 1, value_len
            elif _named(src + seg, key_len, TAGS):
                span[TAGS_AT], span[TAGS_LEN] = cut + 1, value_len
            elif _named(src + seg, key_len, UNIQ):
                span[ID_AT], span[ID_LEN] = cut + 1, value_len
                found_uniq = True
            elif _named(src + seg, key_len, LEGACY_UNIQ):
                id_legacy_at, id_legacy_len = cut + 1, value_len
        seg = stop + 1
    if not found_uniq and id_legacy_at >= 0:
        span[ID_AT], span[ID_LEN] = id_legacy_at, id_legacy_len
    return n


cdef inline bint _value(const uint8_t* src, int64_t at, int64_t length, Py_ssize_t i,
                        uint8_t* data, int64_t* used, int32_t* offsets,
                        uint8_t* valid) noexcept:
    """Row `i` of a string column that may be null: the `length` bytes at `at`, or null
    (`at` < 0); whether it is null."""
    valid[i] = at >= 0
    if at >= 0:
        memcpy(data + used[0], src + at, length)
        used[0] += length
    offsets[i + 1] = <int32_t>used[0]
    return at < 0


cdef Py_ssize_t _host_text(const uint8_t* host, uint8_t* out) noexcept:
    """`a.b.c.d:port` of an IPv4 host as a record stores it (port unsigned)."""
    cdef Py_ssize_t n = 0, i
    for i in range(4):
        n += put_decimal(host[i], out + n)
        out[n] = 46 if i < 3 else 58  # . or :
        n += 1
    return n + put_decimal(<uint32_t>get32(host + 4), out + n)


cdef inline void _hex(const uint8_t* src, Py_ssize_t length, uint8_t* out) noexcept:
    cdef Py_ssize_t i
    for i in range(length):
        out[2 * i] = HEX[src[i] >> 4]
        out[2 * i + 1] = HEX[src[i] & 15]


def _strings(offsets, data, valid=None, Py_ssize_t nulls=0):
    """An Arrow string array over numpy buffers (int32 offsets, bytes, a validity mask)."""
    bitmap = None if valid is None or nulls == 0 else pa.py_buffer(
        np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1,
                                 [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls if bitmap is not None else 0)


def decode_batch(buf, const int64_t[::1] positions):
    """`pipeline.arrow_records.decode_batch`'s batch, or None for the reference to decode
    (a record with an IPv6 host, or one whose lengths do not add up)."""
    cdef const uint8_t[::1] view = buf
    cdef const uint8_t* src = &view[0] if view.shape[0] > 0 else NULL
    cdef Py_ssize_t size = view.shape[0], n = positions.shape[0], i, p, total, body_len
    cdef Py_ssize_t topic_len, topic_at, props_len_at, props_at, props_len
    cdef int32_t magic
    spans_array = np.empty((max(n, 1), SPAN), dtype=np.int64)
    cdef int64_t[:, ::1] spans = spans_array
    cdef int64_t topics = 0, bodies = 0, pairs = 0, key_bytes = 0, value_bytes = 0
    cdef int64_t ids = 0
    # Pass one: where each field is, and how much of each column there is.
    for i in range(n):
        p = positions[i]
        if p < 0 or p + FIXED > size:
            return None
        total = get32(src + p)
        magic = get32(src + p + 4)
        if total < FIXED or p + total > size or (magic != MAGIC_V1 and magic != MAGIC_V2):
            return None
        if get32(src + p + SYS_FLAG) & V6_HOSTS:
            return None
        body_len = get32(src + p + BODY_LEN)
        if body_len < 0 or FIXED + body_len + 1 > total:
            return None
        topic_at = p + FIXED + body_len
        if magic == MAGIC_V1:
            topic_len = src[topic_at]
            topic_at += 1
        else:
            if FIXED + body_len + 2 > total:
                return None
            topic_len = <Py_ssize_t>((<uint32_t>src[topic_at] << 8) | src[topic_at + 1])
            topic_at += 2
        props_len_at = topic_at + topic_len
        if props_len_at + 2 > p + total:
            return None
        props_len = <Py_ssize_t>(<int>(<signed char>src[props_len_at]) * 256
                                 + src[props_len_at + 1])
        props_at = props_len_at + 2
        if props_len < 0 or props_at + props_len - p != total:
            return None
        spans[i, TOPIC_AT], spans[i, TOPIC_LEN] = topic_at, topic_len
        spans[i, BODY_AT], spans[i, BODY_LEN_] = p + FIXED, body_len
        spans[i, PROPS_AT], spans[i, PROPS_LEN] = props_at, props_len
        spans[i, KEYS_AT] = spans[i, TAGS_AT] = spans[i, ID_AT] = -1
        spans[i, KEYS_LEN] = spans[i, TAGS_LEN] = spans[i, ID_LEN] = 0
        pairs += _pairs(src, props_at, props_len, &spans[i, 0], &key_bytes, &value_bytes,
                        NULL, NULL, NULL, NULL)
        topics += topic_len
        bodies += body_len
        ids += spans[i, ID_LEN] if spans[i, ID_AT] >= 0 else ID_TEXT
    if max(topics, bodies, key_bytes, value_bytes, ids, n * ID_TEXT) > INT32_MAX:
        return None  # past 32-bit offsets: the reference's casts say so
    # Pass two: the bytes.
    topic_offsets = np.empty(n + 1, dtype=np.int32)
    body_offsets = np.empty(n + 1, dtype=np.int32)
    keys_offsets = np.empty(n + 1, dtype=np.int32)
    tags_offsets = np.empty(n + 1, dtype=np.int32)
    id_offsets = np.empty(n + 1, dtype=np.int32)
    offset_id_offsets = np.arange(0, (n + 1) * ID_TEXT, ID_TEXT, dtype=np.int32)
    born_offsets = np.empty(n + 1, dtype=np.int32)
    store_offsets = np.empty(n + 1, dtype=np.int32)
    map_offsets = np.empty(n + 1, dtype=np.int32)
    key_offsets = np.empty(pairs + 1, dtype=np.int32)
    value_offsets = np.empty(pairs + 1, dtype=np.int32)
    topic_data = np.empty(topics, dtype=np.uint8)
    body_data = np.empty(bodies, dtype=np.uint8)
    key_data = np.empty(key_bytes, dtype=np.uint8)
    value_data = np.empty(value_bytes, dtype=np.uint8)
    keys_data = np.empty(value_bytes, dtype=np.uint8)
    tags_data = np.empty(value_bytes, dtype=np.uint8)
    id_data = np.empty(ids, dtype=np.uint8)
    offset_id_data = np.empty(n * ID_TEXT, dtype=np.uint8)
    born_data = np.empty(n * HOST_TEXT_MAX, dtype=np.uint8)
    store_data = np.empty(n * HOST_TEXT_MAX, dtype=np.uint8)
    keys_valid = np.empty(n, dtype=np.bool_)
    tags_valid = np.empty(n, dtype=np.bool_)
    queue_ids = np.empty(n, dtype=np.int32)
    queue_offsets = np.empty(n, dtype=np.int64)
    phys = np.empty(n, dtype=np.int64)
    born_ts = np.empty(n, dtype=np.int64)
    store_ts = np.empty(n, dtype=np.int64)
    sys_flags = np.empty(n, dtype=np.int32)
    reconsumes = np.empty(n, dtype=np.int32)
    cdef int32_t[::1] t_off = topic_offsets, b_off = body_offsets, k_off = keys_offsets
    cdef int32_t[::1] g_off = tags_offsets, i_off = id_offsets, m_off = map_offsets
    cdef int32_t[::1] bh_off = born_offsets, sh_off = store_offsets
    cdef int32_t[::1] pk_off = key_offsets, pv_off = value_offsets
    cdef uint8_t[::1] t_data = topic_data, b_data = body_data, k_data = keys_data
    cdef uint8_t[::1] g_data = tags_data, i_data = id_data, o_data = offset_id_data
    cdef uint8_t[::1] bh_data = born_data, sh_data = store_data
    cdef uint8_t[::1] pk_data = key_data, pv_data = value_data
    cdef uint8_t[::1] k_valid = keys_valid.view(np.uint8), g_valid = tags_valid.view(np.uint8)
    cdef int32_t[::1] c_qid = queue_ids, c_flag = sys_flags, c_again = reconsumes
    cdef int64_t[::1] c_qoff = queue_offsets, c_phy = phys, c_born = born_ts, c_store = store_ts
    cdef int64_t t = 0, b = 0, k = 0, g = 0, d = 0, bh = 0, sh = 0, m = 0
    cdef int64_t pk = 0, pv = 0, at
    cdef Py_ssize_t keys_nulls = 0, tags_nulls = 0, length
    cdef uint8_t id_raw[16]
    t_off[0] = b_off[0] = k_off[0] = g_off[0] = i_off[0] = m_off[0] = bh_off[0] = sh_off[0] = 0
    pk_off[0] = pv_off[0] = 0
    for i in range(n):
        p = positions[i]
        if spans[i, TOPIC_LEN]:
            memcpy(&t_data[0] + t, src + spans[i, TOPIC_AT], spans[i, TOPIC_LEN])
        t += spans[i, TOPIC_LEN]
        t_off[i + 1] = <int32_t>t
        if spans[i, BODY_LEN_]:
            memcpy(&b_data[0] + b, src + spans[i, BODY_AT], spans[i, BODY_LEN_])
        b += spans[i, BODY_LEN_]
        b_off[i + 1] = <int32_t>b
        m += _pairs(src, spans[i, PROPS_AT], spans[i, PROPS_LEN], &spans[i, 0], &pk, &pv,
                    &pk_off[m] if pairs else NULL, &pv_off[m] if pairs else NULL,
                    &pk_data[0] if key_bytes else NULL, &pv_data[0] if value_bytes else NULL)
        m_off[i + 1] = <int32_t>m
        keys_nulls += _value(src, spans[i, KEYS_AT], spans[i, KEYS_LEN], i, &k_data[0], &k,
                             &k_off[0], &k_valid[0])
        tags_nulls += _value(src, spans[i, TAGS_AT], spans[i, TAGS_LEN], i, &g_data[0], &g,
                             &g_off[0], &g_valid[0])
        memcpy(id_raw, src + p + STORE_HOST, 8)
        memcpy(id_raw + 8, src + p + PHY, 8)
        _hex(id_raw, 16, &o_data[0] + i * ID_TEXT)
        at, length = spans[i, ID_AT], spans[i, ID_LEN]
        if at >= 0:
            if length:
                memcpy(&i_data[0] + d, src + at, length)
            d += length
        else:
            memcpy(&i_data[0] + d, &o_data[0] + i * ID_TEXT, ID_TEXT)
            d += ID_TEXT
        i_off[i + 1] = <int32_t>d
        bh += _host_text(src + p + BORN_HOST, &bh_data[0] + bh)
        bh_off[i + 1] = <int32_t>bh
        sh += _host_text(src + p + STORE_HOST, &sh_data[0] + sh)
        sh_off[i + 1] = <int32_t>sh
        c_qid[i] = get32(src + p + QUEUE_ID)
        c_qoff[i] = get64(src + p + QUEUE_OFFSET)
        c_phy[i] = get64(src + p + PHY)
        c_flag[i] = get32(src + p + SYS_FLAG)
        c_born[i] = get64(src + p + BORN_TS) * 1000
        c_store[i] = get64(src + p + STORE_TS) * 1000
        c_again[i] = get32(src + p + RECONSUME)
    properties = pa.MapArray.from_arrays(
        pa.array(map_offsets), _strings(key_offsets, key_data), _strings(value_offsets, value_data)
    )
    columns = [
        _strings(topic_offsets, topic_data),
        pa.array(queue_ids),
        pa.array(queue_offsets),
        pa.array(phys),
        pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(body_offsets),
                                               pa.py_buffer(body_data)]),
        _strings(keys_offsets, keys_data, keys_valid, keys_nulls),
        _strings(tags_offsets, tags_data, tags_valid, tags_nulls),
        properties,
        pa.Array.from_buffers(UTC_MICROS, n, [None, pa.py_buffer(born_ts)]),
        pa.Array.from_buffers(UTC_MICROS, n, [None, pa.py_buffer(store_ts)]),
        _strings(born_offsets, born_data),
        _strings(store_offsets, store_data),
        pa.array(sys_flags),
        pa.array(reconsumes),
        _strings(id_offsets, id_data),
        _strings(offset_id_offsets, offset_id_data),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
