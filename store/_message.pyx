# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twins of `MessageTemplate.fill` and `RecordEncoder.encode` (`rmqpy.store.message`).

`fill` sets the same fields to the same values, with the properties scanned once in C for
TAGS, KEYS and UNIQ_KEY (and the name rmqpy 0.1.0 wrote it under) instead of once per name.
`encode` lays the records out in one bytes object, field by field in C (the CRC is zlib-ng's,
as the reference's). Separators, names and the record's layout come from `store.layout` and
are checked at import."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from zlib_ng.zlib_ng import crc32

from rmqpy.store._record cimport put_record_head
from rmqpy.store._properties cimport (
    DELAY_AT, KEYS_AT, LEGACY_UNIQ_KEY_AT, NAMES, SHARDING_KEY_AT, TAGS_AT, UNIQ_KEY_AT, WAIT_AT,
    Span, ascii_tags_code, is_false, scan, scanned_names,
)

from rmqpy.store.layout import (
    CRC_MASK,
    INT_RANGE,
    LONG_RANGE,
    MARK_DELAY as _MARK_DELAY,
    MARK_NO_WAIT as _MARK_NO_WAIT,
    MARK_SHARDING_KEY as _MARK_SHARDING_KEY,
    MESSAGE_MAGIC_V1,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPS_LEN,
    RECORD_FIXED,
    MessageConst,
)


cdef object _reference():
    """`rmqpy.store.message`, imported when first needed: it imports this module."""
    import rmqpy.store.message
    return rmqpy.store.message

assert PROPS_LEN.format == ">h", "PROPLEN is a big-endian short"
cdef char NAME_END = ord(NAME_VALUE_SEPARATOR)
cdef char ITEM_END = ord(PROPERTY_SEPARATOR)
cdef str ITEM_END_TEXT = PROPERTY_SEPARATOR
cdef int MARK_DELAY = _MARK_DELAY, MARK_NO_WAIT = _MARK_NO_WAIT
cdef int MARK_SHARDING_KEY = _MARK_SHARDING_KEY
cdef tuple WANTED = scanned_names(MessageConst)
cdef object INT_LOW = INT_RANGE.start, INT_HIGH = INT_RANGE.stop - 1
cdef object LONG_LOW = LONG_RANGE.start, LONG_HIGH = LONG_RANGE.stop - 1


cdef inline object _value(const char* text, Span span):
    if span.end < 0:
        return None
    return PyUnicode_DecodeUTF8(text + span.start, span.end - span.start, NULL)


cdef object _tags_code(const char* text, Span span):
    """Java's String.hashCode of TAGS (0 without them): in C for ASCII, else the reference."""
    cdef int code
    if ascii_tags_code(text, span, &code):
        return code
    return _reference().tags_code(_value(text, span))


def fill(template, msg, body, flag, properties, born_timestamp):
    """`MessageTemplate.fill(template, msg, body, flag, properties, born_timestamp)`."""
    cdef Span found[NAMES]
    cdef Py_ssize_t size, part_size, i
    cdef const char* text
    cdef char* out
    if not INT_LOW <= flag <= INT_HIGH or not LONG_LOW <= born_timestamp <= LONG_HIGH:
        _reference().check_field_ranges(
            flag=(flag, INT_RANGE), bornTimestamp=(born_timestamp, LONG_RANGE)
        )
    added = template.added
    if added:
        if properties and properties[len(properties) - 1] != ITEM_END_TEXT:
            properties += ITEM_END_TEXT
        properties += added
    cdef bytes props_bytes = properties.encode("utf-8")
    msg.topic = template.topic
    msg.topic_bytes = template.topic_bytes
    msg.queue_id = template.queue_id
    msg.queue_key = template.queue_key
    msg.body = body
    msg.flag = flag
    msg.born_host = template.born_host
    msg.sys_flag = template.sys_flag
    msg.born_timestamp = born_timestamp
    msg.reconsume_times = template.reconsume_times
    msg.prepared_transaction_offset = template.prepared_transaction_offset
    msg.queued = template.queued
    msg.indexed = template.indexed
    msg.props_bytes = props_bytes
    size = PyBytes_GET_SIZE(props_bytes)
    text = PyBytes_AS_STRING(props_bytes)
    if size:
        scan(text, size, WANTED, ITEM_END, NAME_END, found)
        msg.tags_code = _tags_code(text, found[TAGS_AT])
        keys = _value(text, found[KEYS_AT])
        msg.keys = keys if keys is not None else ""
        msg.uniq_key = _value(
            text, found[UNIQ_KEY_AT] if found[UNIQ_KEY_AT].end >= 0 else found[LEGACY_UNIQ_KEY_AT]
        )
        msg.marks = (
            (MARK_DELAY if found[DELAY_AT].end >= 0 else 0)
            | (MARK_NO_WAIT if is_false(text, found[WAIT_AT]) else 0)
            | (MARK_SHARDING_KEY if found[SHARDING_KEY_AT].end >= 0 else 0)
        )
    else:
        msg.tags_code, msg.keys, msg.uniq_key, msg.marks = 0, "", None, 0
    # Everything after the body: TOPICLEN, TOPIC, PROPLEN, PROPS.
    cdef bytes topic_part = template.topic_part
    part_size = PyBytes_GET_SIZE(topic_part)
    tail = PyBytes_FromStringAndSize(NULL, part_size + 2 + size)
    out = PyBytes_AS_STRING(tail)
    memcpy(out, PyBytes_AS_STRING(topic_part), part_size)
    cdef unsigned short prop_len = <unsigned short>(size if size < 0x7FFF else 0x7FFF)
    out[part_size] = <char>(prop_len >> 8)
    out[part_size + 1] = <char>(prop_len & 0xFF)
    memcpy(out + part_size + 2, text, size)
    msg.tail = tail
    cdef Py_ssize_t variable = len(body) + size
    fixed = template.fixed
    msg.lengths = (fixed[0] + variable, fixed[1] + variable)


# --- records -------------------------------------------------------------------------------
if (
    RECORD_FIXED[(False, False)].format != ">iiiiiqqiq4siq4siiqi"
    or RECORD_FIXED[(True, True)].format != ">iiiiiqqiq16siq16siiqi"
):
    raise ImportError("store._message does not match store.layout's record")
cdef int32_t MAGIC_V1 = MESSAGE_MAGIC_V1
cdef uint32_t CRC_BITS = CRC_MASK


cdef inline unsigned char* _bytes(unsigned char* at, bytes data) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    memcpy(at, PyBytes_AS_STRING(data), n)
    return at + n


def encode(encoder, list parts, records, queue_offsets, phys, long long store_timestamp):
    """`RecordEncoder.encode(encoder, parts, records, queue_offsets, phys, store_timestamp)`,
    all the records as one bytes object appended to `parts` (the reference appends three
    parts a record: joined, the same bytes)."""
    cdef bint store_v6 = encoder.store_v6
    cdef bytes store_ip = encoder.store_ip
    cdef uint32_t store_port = <uint32_t>encoder.store_port
    cdef uint32_t v6_bit = <uint32_t>encoder.v6_bit
    cdef Py_ssize_t n = len(records), i, total = 0, size
    if len(queue_offsets) != n or len(phys) != n:
        raise ValueError("records, queue offsets and offsets differ in length")
    cdef list sizes = [0] * n
    for i in range(n):
        size = records[i].lengths[store_v6]
        sizes[i] = size
        total += size
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char* at = <unsigned char*>PyBytes_AS_STRING(out)
    cdef unsigned char* end
    cdef bytes body, tail
    for i in range(n):
        msg = records[i]
        born = msg.born_host
        body = msg.body
        tail = msg.tail
        end = at + <Py_ssize_t>sizes[i]
        at = put_record_head(
            at, <uint32_t><int32_t>sizes[i], <uint32_t>MAGIC_V1, <uint32_t>crc32(body) & CRC_BITS,
            <uint32_t><int32_t>msg.queue_id, <uint32_t><int32_t>msg.flag,
            <uint64_t><int64_t>queue_offsets[i], <uint64_t><int64_t>phys[i],
            <uint32_t><int32_t>msg.sys_flag | v6_bit, <uint64_t><int64_t>msg.born_timestamp,
            born.ip, <uint32_t><int32_t>born.port, <uint64_t>store_timestamp, store_ip,
            store_port, <uint32_t><int32_t>msg.reconsume_times,
            <uint64_t><int64_t>msg.prepared_transaction_offset, <const char*>body, len(body),
        )
        at = _bytes(at, tail)
        if at != end:
            raise ValueError(f"record {i} is not the length its message says")
    parts.append(out)
