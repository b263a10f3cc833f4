# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of `SendProcessor`'s per-send work (`broker.processors.send`): one call
per group for its messages (`group_messages`) and one for its answers (`answer_all`).

A send of one message or a batch to an existing, writable topic, with a header as Java and
our clients write it, is made here: its fields read straight from the ext fields, a batch's
items split in C, each message filled by the store's compiled `fill`, its answer built from
the put's result. Anything else (retry and DLQ routing, topics still to create, transaction
flags, a delayed batch, refusals, odd numbers, a malformed batch, a CLUSTER already set) goes
to the reference's own method for that one send, so every refusal keeps the reference's code
and remark.

A run of such sends that needs nothing more is staged instead (`stage`, or `stage_read` for a
read's requests): whole commitlog records encoded into one buffer, a batch's items each a
record, with the columns `store.staged.StagedSends` holds; `answer_staged` and
`answer_frames` answer them from those columns. `stage_frames` stages the SEND_MESSAGE_V2
frames (binary or JSON headers) at the start of a read from the read's bytes themselves
(the same checks, on the header's bytes), and `answer_opaques` answers them."""

from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport (
    PyUnicode_AsUTF8AndSize,
    PyUnicode_DecodeASCII,
    PyUnicode_DecodeUTF8,
    PyUnicode_READ_CHAR,
)
from libc.limits cimport LLONG_MAX, LLONG_MIN
from libc.stdint cimport int16_t, int32_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from cpython cimport array
from rmqpy.remoting.headers._numbers cimport ascii_integer
from rmqpy.remoting._header_fields cimport (
    binary_fields, field_number, json_fields, same_bytes,
)
from rmqpy.remoting._wire cimport (
    binary_ext_len, is_utf8, put_binary_ext, put_binary_fixed, put_frame_prefix,
)
from rmqpy.store._message_id cimport hex16, offset_msg_id
from rmqpy.store._arrays cimport ints, longs
from rmqpy.store._big_endian cimport get32, put32
from rmqpy.store._crc cimport Crc32, native_crc32 as find_native_crc32
from rmqpy.store._decimal cimport put_signed_decimal
from rmqpy.store._record cimport put_record_head
from rmqpy.store._properties cimport (
    DELAY_AT, KEYS_AT, LEGACY_UNIQ_KEY_AT, NAMES, SHARDING_KEY_AT, TAGS_AT, UNIQ_KEY_AT, WAIT_AT,
    Span, ascii_tags_code, is_false, scan, scanned_names,
)

cdef extern from "string.h":
    void* memmem(const void* haystack, size_t haystack_len, const void* needle,
                 size_t needle_len) nogil

from rmqpy.remoting.batch_body import ITEM_HEAD, PROPS_LEN as BATCH_PROPS_LEN
from rmqpy.remoting.codes import BROKER_VERSION, LanguageCode, RequestCode, ResponseCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.header_codec import compact_json
from rmqpy.remoting.wire import BINARY_FIXED, FRAME_PREFIX, I32, RPC_ONEWAY, RPC_RESPONSE, U16
from rmqpy.store._message import fill
from rmqpy.store.layout import (
    CRC_MASK,
    MARK_NO_WAIT,
    MARK_SHARDING_KEY,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_V1,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    RECORD_FIXED,
    MessageConst,
    PutMessageStatus,
    SysFlag,
)
from rmqpy.store.message import Host, Message, send_template, tags_code
from rmqpy.store.staged import StagedSends
import zlib_ng.zlib_ng as _zlib_ng
from zlib_ng.zlib_ng import crc32
from rmqpy.store.message_id import offset_msg_id_prefix

cdef long long INT_LOW = -(2 ** 31), INT_HIGH = 2 ** 31 - 1
cdef int SEND_MESSAGE = RequestCode.SEND_MESSAGE
cdef int SEND_MESSAGE_V2 = RequestCode.SEND_MESSAGE_V2
cdef int SEND_BATCH_MESSAGE = RequestCode.SEND_BATCH_MESSAGE
if (ITEM_HEAD.format, BATCH_PROPS_LEN.format) != (">iiiii", ">h"):
    raise ImportError("broker.processors._send does not match remoting.batch_body")
cdef Py_ssize_t ITEM_HEAD_SIZE = ITEM_HEAD.size
cdef int TRANSACTION_MASK = SysFlag.TRANSACTION_MASK
cdef int TRANSACTION_PREPARED = SysFlag.TRANSACTION_PREPARED_TYPE
cdef str SEPARATOR = PROPERTY_SEPARATOR
cdef str TRAN_NAME = MessageConst.TRANSACTION_PREPARED + NAME_VALUE_SEPARATOR
cdef str CLUSTER_NAME = MessageConst.CLUSTER + NAME_VALUE_SEPARATOR
cdef str DELAY_NAME = MessageConst.DELAY + NAME_VALUE_SEPARATOR
cdef Py_UCS4 ITEM_END = ord(PROPERTY_SEPARATOR)
cdef str MSG_REGION = MessageConst.MSG_REGION
cdef str TRACE_ON = MessageConst.TRACE_SWITCH
cdef object PUT_OK = PutMessageStatus.PUT_OK
cdef object SUCCESS = ResponseCode.SUCCESS
cdef object FLUSH_DISK_TIMEOUT = ResponseCode.FLUSH_DISK_TIMEOUT
cdef object FLUSH_TIMED_OUT = PutMessageStatus.FLUSH_DISK_TIMEOUT
# Staged records (`store.staged`): laid out as `store._message.encode` lays them out.
if RECORD_FIXED[(False, False)].format != ">iiiiiqqiq4siq4siiqi":
    raise ImportError("broker.processors._send does not match store.layout's record")
cdef uint32_t MAGIC_V1 = <uint32_t><int32_t>MESSAGE_MAGIC_V1
cdef uint32_t CRC_BITS = CRC_MASK
cdef Py_ssize_t MAX_PROPS = MAX_PROPERTIES_LENGTH
cdef int SHARDING_MARK = MARK_SHARDING_KEY, NO_WAIT_MARK = MARK_NO_WAIT
cdef tuple WANTED = scanned_names(MessageConst)
cdef char ITEM_END_BYTE = ord(PROPERTY_SEPARATOR)
cdef char NAME_END_BYTE = ord(NAME_VALUE_SEPARATOR)
cdef array.array INTS = array.array("i"), LONGS = array.array("q")
cdef object PYTHON = LanguageCode.PYTHON
cdef object VERSION = BROKER_VERSION
cdef int RESPONSE = RPC_RESPONSE, ONEWAY_BIT = RPC_ONEWAY
cdef object new = object.__new__
cdef int TEMPLATES_MAX = 4096
cdef Py_ssize_t RECENT_QUEUES = 64
if (FRAME_PREFIX.format, BINARY_FIXED.format, U16.format, I32.format) != (
    ">ii", ">hbhii", ">H", ">i"
):
    raise ImportError("broker.processors._send does not match remoting.wire")
cdef object ROCKETMQ = SerializeType.ROCKETMQ
cdef object JSON = SerializeType.JSON
cdef uint32_t ROCKETMQ_KIND = int(SerializeType.ROCKETMQ)
cdef uint32_t JSON_KIND = int(SerializeType.JSON)
cdef Py_ssize_t PREFIX_SIZE = FRAME_PREFIX.size
cdef bytes TRAN_NAME_BYTES = TRAN_NAME.encode()
cdef bytes CLUSTER_NAME_BYTES = CLUSTER_NAME.encode()
# The SEND_MESSAGE_V2 fields a read's frames are staged from (`SendLane.stage_frames`), in
# the order of `FRAME_FIELDS`.
cdef tuple FRAME_FIELDS = (
    "producer_group", "topic", "default_topic", "default_topic_queue_nums", "queue_id",
    "sys_flag", "born_timestamp", "flag", "properties", "reconsume_times",
    "max_reconsume_times", "batch",
)
cdef enum:
    F_GROUP, F_TOPIC, F_DEFAULT_TOPIC, F_DEFAULT_QUEUES, F_QUEUE_ID, F_SYS_FLAG, F_BORN
    F_FLAG, F_PROPERTIES, F_RECONSUME, F_MAX_RECONSUME, F_BATCH, F_COUNT
cdef Py_ssize_t FIXED_SIZE = BINARY_FIXED.size
# How Java's and our clients' JSON headers of a SEND_MESSAGE_V2 open.
cdef bytes JSON_SEND_HEAD_TEXT = b'{"code":%d,' % SEND_MESSAGE_V2
cdef const unsigned char* JSON_SEND_HEAD = JSON_SEND_HEAD_TEXT
cdef Py_ssize_t JSON_SEND_HEAD_SIZE = len(JSON_SEND_HEAD_TEXT)


cdef Crc32 native_crc32 = find_native_crc32(_zlib_ng)
NATIVE_CRC32 = native_crc32 != NULL  # for the tests: which way bodies are summed here


cdef uint32_t _crc_at(const unsigned char* at, Py_ssize_t size) except? 0:
    """The CRC32 of `size` bytes at `at` (`zlib_ng.crc32` of them)."""
    if native_crc32 != NULL and size <= 0xFFFFFFFF:
        return native_crc32(0, at, <uint32_t>size)
    return crc32(PyBytes_FromStringAndSize(<const char*>at, size))


cdef inline Py_ssize_t _decimal(long long v, char* out) noexcept:
    return put_signed_decimal(v, <unsigned char*>out)


cdef str _msg_ids(str prefix, list offsets):
    """The offsetMsgIds of a put's records: `prefix` and each offset as 16 hex digits,
    joined by commas (what `format(offset, "016X")` writes, for offsets in [0, 2^63))."""
    for item in offsets:
        if type(item) is not int or not 0 <= item <= LLONG_MAX:
            return ",".join([prefix + format(o, "016X") for o in offsets])
    cdef array.array column = array.array("q", offsets)
    return _joined_ids(prefix, column.data.as_longlongs, len(column))


cdef str _joined_ids(str prefix, const long long* offsets, Py_ssize_t n):
    """`_msg_ids` of `n` offsets, each in [0, 2^63)."""
    cdef Py_ssize_t width = len(prefix) + 16, i
    cdef Py_ssize_t size = n * width + n - 1
    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef char* at = PyBytes_AS_STRING(out)
    cdef Py_ssize_t prefix_len
    cdef const char* prefix_at = PyUnicode_AsUTF8AndSize(prefix, &prefix_len)
    for i in range(n):
        if i:
            at[0] = 44  # ','
            at += 1
        memcpy(at, prefix_at, prefix_len)
        hex16(at + prefix_len, offsets[i])
        at += prefix_len + 16
    return PyUnicode_DecodeASCII(PyBytes_AS_STRING(out), size, NULL)


cdef class AnswerFrames:
    """A stored send's answer frame, written whole in its request's serialize type (binary
    or JSON): what `encode_frames` makes of the answer, built from pieces made once."""
    cdef tuple binary_keys  # each answer key as the binary header writes it
    cdef bytes region, json_head, json_after_code, json_after_msg_id, json_after_queue_id
    cdef bytes json_after_offset, json_tail
    cdef int language, version

    def __init__(self, tuple keys, str region):
        msg_id_key, queue_id_key, offset_key, region_key, trace_key = keys
        self.binary_keys = tuple(
            U16.pack(len(k.encode())) + k.encode() for k in keys
        )
        self.region = region.encode("utf-8")
        self.language = int(PYTHON)
        self.version = int(VERSION)
        self.json_head = b'{"code":'
        self.json_after_code = (
            b',"extFields":{' + compact_json(msg_id_key) + b':"'
        )
        self.json_after_msg_id = b'",' + compact_json(queue_id_key) + b':"'
        self.json_after_queue_id = b'",' + compact_json(offset_key) + b':"'
        self.json_after_offset = (
            b'",' + compact_json(region_key) + b":" + compact_json(region) + b","
            + compact_json(trace_key) + b':"true"},"flag":' + str(RESPONSE).encode()
            + b',"language":' + compact_json(PYTHON.name) + b',"opaque":'
        )
        self.json_tail = (
            b',"serializeTypeCurrentRPC":"JSON","version":' + str(self.version).encode() + b"}"
        )

    cdef object frame(self, kind, int code, opaque, str msg_id, str queue_id,
                      str queue_offset):
        """The frame, or None where `encode_frames` is to make it (another serialize
        type, an opaque out of its range)."""
        if type(opaque) is not int or not (-2147483648 <= opaque < 2147483648):
            return None
        cdef Py_ssize_t id_len, qid_len, off_len
        cdef const char* id_at = PyUnicode_AsUTF8AndSize(msg_id, &id_len)
        cdef const char* qid_at = PyUnicode_AsUTF8AndSize(queue_id, &qid_len)
        cdef const char* off_at = PyUnicode_AsUTF8AndSize(queue_offset, &off_len)
        if kind is ROCKETMQ:
            return self._binary(code, <int32_t>opaque, id_at, id_len, qid_at, qid_len,
                                off_at, off_len)
        if kind is JSON:
            return self._json(code, <int32_t>opaque, id_at, id_len, qid_at, qid_len,
                              off_at, off_len)
        return None

    cdef bytes _binary(self, int code, int32_t opaque, const char* id_at, Py_ssize_t id_len,
                       const char* qid_at, Py_ssize_t qid_len, const char* off_at,
                       Py_ssize_t off_len):
        cdef tuple keys = self.binary_keys
        cdef const char* values[5]
        cdef Py_ssize_t lengths[5]
        values[0], lengths[0] = id_at, id_len
        values[1], lengths[1] = qid_at, qid_len
        values[2], lengths[2] = off_at, off_len
        values[3], lengths[3] = PyBytes_AS_STRING(self.region), len(self.region)
        values[4], lengths[4] = b"true", 4
        cdef Py_ssize_t ext_len = binary_ext_len(keys, lengths, 5)
        cdef Py_ssize_t header_len = FIXED_SIZE + 4 + 4 + ext_len
        cdef bytes out = PyBytes_FromStringAndSize(NULL, PREFIX_SIZE + header_len)
        cdef unsigned char* at = <unsigned char*>PyBytes_AS_STRING(out)
        at = put_frame_prefix(at, header_len, 0, ROCKETMQ_KIND)
        at = put_binary_fixed(at, code, self.language, self.version, opaque, RESPONSE)
        at = put32(at, 0)  # no remark
        at = put32(at, <uint32_t>ext_len)
        put_binary_ext(at, keys, values, lengths, 5)
        return out

    cdef bytes _json(self, int code, int32_t opaque, const char* id_at, Py_ssize_t id_len,
                     const char* qid_at, Py_ssize_t qid_len, const char* off_at,
                     Py_ssize_t off_len):
        cdef char code_digits[20]
        cdef char opaque_digits[20]
        cdef Py_ssize_t code_len = _decimal(code, code_digits)
        cdef Py_ssize_t opaque_len = _decimal(opaque, opaque_digits)
        cdef const char* pieces[11]
        cdef Py_ssize_t lengths[11]
        pieces[0], lengths[0] = PyBytes_AS_STRING(self.json_head), len(self.json_head)
        pieces[1], lengths[1] = code_digits, code_len
        pieces[2], lengths[2] = PyBytes_AS_STRING(self.json_after_code), len(self.json_after_code)
        pieces[3], lengths[3] = id_at, id_len
        pieces[4], lengths[4] = (PyBytes_AS_STRING(self.json_after_msg_id),
                                 len(self.json_after_msg_id))
        pieces[5], lengths[5] = qid_at, qid_len
        pieces[6], lengths[6] = (PyBytes_AS_STRING(self.json_after_queue_id),
                                 len(self.json_after_queue_id))
        pieces[7], lengths[7] = off_at, off_len
        pieces[8], lengths[8] = (PyBytes_AS_STRING(self.json_after_offset),
                                 len(self.json_after_offset))
        pieces[9], lengths[9] = opaque_digits, opaque_len
        pieces[10], lengths[10] = PyBytes_AS_STRING(self.json_tail), len(self.json_tail)
        cdef Py_ssize_t header_len = 0, i
        for i in range(11):
            header_len += lengths[i]
        cdef bytes out = PyBytes_FromStringAndSize(NULL, PREFIX_SIZE + header_len)
        cdef unsigned char* at = <unsigned char*>PyBytes_AS_STRING(out)
        at = put_frame_prefix(at, header_len, 0, JSON_KIND)
        for i in range(11):
            memcpy(at, pieces[i], lengths[i])
            at += lengths[i]
        return out


cdef Py_ssize_t _batch_count(const unsigned char* data, Py_ssize_t end) noexcept:
    """The items of a batch body as `remoting.batch_body.decode_batch_body` splits it; 0
    where it raises (an empty body; a length that does not add up)."""
    cdef Py_ssize_t pos = 0, count = 0, props_at, item_end
    cdef int32_t total, body_len
    cdef int16_t props_len
    while pos < end:
        if end - pos < ITEM_HEAD_SIZE + 2:
            return 0
        total = get32(data + pos)
        body_len = get32(data + pos + 16)
        props_at = pos + ITEM_HEAD_SIZE + body_len
        if body_len < 0 or props_at + 2 > end:
            return 0
        props_len = <int16_t>((<uint16_t>data[props_at] << 8) | data[props_at + 1])
        item_end = props_at + 2 + props_len
        if props_len < 0 or item_end > end or total != item_end - pos:
            return 0
        count += 1
        pos = item_end
    return count


cdef inline Py_ssize_t _batch_item(const unsigned char* data, Py_ssize_t pos, int32_t* flag,
                                   Py_ssize_t* body_len) noexcept:
    """The item at `pos` of a batch body `_batch_count` has read: its flag and body length;
    returns its properties' length. Its body starts ITEM_HEAD_SIZE bytes in, its properties
    2 bytes after the body."""
    flag[0] = <int32_t>get32(data + pos + 12)
    body_len[0] = <int32_t>get32(data + pos + 16)
    cdef Py_ssize_t props_at = pos + ITEM_HEAD_SIZE + body_len[0]
    return (<Py_ssize_t>data[props_at] << 8) | data[props_at + 1]


cdef object _batch_items(object body):
    """`decode_batch_body(body)` as (flag, body, properties) tuples, or None where the
    reference raises (its error then answers the send)."""
    if type(body) is not bytes:
        return None
    cdef const unsigned char* data = <const unsigned char*>PyBytes_AS_STRING(body)
    cdef Py_ssize_t count = _batch_count(data, PyBytes_GET_SIZE(body)), k, pos = 0
    cdef Py_ssize_t body_len, props_len, props_at
    cdef int32_t flag
    if count == 0:
        return None
    cdef list items = []
    for k in range(count):
        props_len = _batch_item(data, pos, &flag, &body_len)
        props_at = pos + ITEM_HEAD_SIZE + body_len + 2
        try:
            props = PyUnicode_DecodeUTF8(<const char*>data + props_at, props_len, NULL)
        except UnicodeDecodeError:
            return None
        items.append((flag, PyBytes_FromStringAndSize(
            <const char*>data + pos + ITEM_HEAD_SIZE, body_len), props))
        pos = props_at + props_len
    return items


cdef class Keys:
    """A naming's keys of the fields read here (SEND_MESSAGE's, or SEND_MESSAGE_V2's)."""
    cdef object producer_group, topic, default_topic, default_topic_queue_nums, queue_id
    cdef object sys_flag, born_timestamp, flag, properties, reconsume_times
    cdef object max_reconsume_times, batch

    def __init__(self, dict keys):
        self.producer_group = keys["producer_group"]
        self.topic = keys["topic"]
        self.default_topic = keys["default_topic"]
        self.default_topic_queue_nums = keys["default_topic_queue_nums"]
        self.queue_id = keys["queue_id"]
        self.sys_flag = keys["sys_flag"]
        self.born_timestamp = keys["born_timestamp"]
        self.flag = keys["flag"]
        self.properties = keys["properties"]
        self.reconsume_times = keys["reconsume_times"]
        self.max_reconsume_times = keys["max_reconsume_times"]
        self.batch = keys["batch"]


cdef bint _number(PyObject* raw, long long low, long long high, long long* out) except -1:
    """`raw` is a str of an optional minus and 1 to 18 ASCII digits, in [low, high]."""
    if raw == NULL or type(<object>raw) is not str:
        return False
    return ascii_integer(<str>raw, out) and low <= out[0] <= high


cdef bint _starts_as_send(const unsigned char* data, Py_ssize_t n) noexcept:
    """Whether the read's first frame (`n` bytes of it, at least its length and type) may
    be a SEND_MESSAGE_V2: a binary header with its code, or a JSON header that opens with
    it."""
    cdef int kind = (<uint32_t>get32(data + 4)) >> 24
    if kind == ROCKETMQ_KIND:
        return n >= PREFIX_SIZE + 2 and ((<int>data[8] << 8) | data[9]) == SEND_MESSAGE_V2
    return kind == JSON_KIND and n >= PREFIX_SIZE + JSON_SEND_HEAD_SIZE and memcmp(
        data + PREFIX_SIZE, JSON_SEND_HEAD, JSON_SEND_HEAD_SIZE
    ) == 0


cdef struct Plain:
    long long queue_id, sys_flag, born, flag, reconsume
    bint batch


cdef struct SendParts:
    # A send's numbers, its properties text (UTF-8) and its body, where they lie: in the
    # request's own objects, or in the frame it came in.
    Plain fields
    const char* text
    Py_ssize_t text_len
    const unsigned char* body
    Py_ssize_t body_len


cdef inline str _text(const char* text, Span span):
    """The span's text (None where not found)."""
    if span.end < 0:
        return None
    return PyUnicode_DecodeUTF8(text + span.start, span.end - span.start, NULL)


cdef class _Records:
    """The columns of staged records as they are made: room for more grows as needed."""
    cdef Py_ssize_t count, room
    cdef array.array slots, sizes, body_sizes, marks, tags, flags, borns, props_sizes
    cdef array.array body_at, own_at, own_len, send_of  # where each record's parts are
    cdef list uniq_keys, keys

    def __cinit__(self, Py_ssize_t room):
        self.count = 0
        self.room = room
        (self.slots, self.sizes, self.body_sizes, self.marks, self.flags, self.props_sizes,
         self.body_at, self.own_at, self.own_len, self.send_of) = [
            array.clone(INTS, room, zero=False) for _ in range(10)
        ]
        self.tags, self.borns = array.clone(LONGS, room, zero=False), array.clone(
            LONGS, room, zero=False
        )
        self.uniq_keys = []
        self.keys = []

    cdef int _resize(self, Py_ssize_t size) except -1:
        for column in (self.slots, self.sizes, self.body_sizes, self.marks, self.tags,
                       self.flags, self.borns, self.props_sizes, self.body_at, self.own_at,
                       self.own_len, self.send_of):
            array.resize(<array.array>column, size)
        self.room = size
        return 0

    cdef int make_room(self, Py_ssize_t more) except -1:
        if self.count + more > self.room:
            self._resize(max(2 * self.room, self.count + more))
        return 0

    cdef int trim(self) except -1:
        """The columns cut to the records made."""
        if self.room != self.count:
            self._resize(self.count)
        return 0

    cdef int describe(self, Py_ssize_t r, const char* own, Py_ssize_t own_len,
                      const char* text, Span* header) except -2:
        """Record r's marks, TAGS code, UNIQ_KEY and KEYS, read from its own properties
        (`own`: a batch item's) and then the send's (`text`, whose spans are `header`): a
        name in both is the send's. -1 where it has a delay level (not staged); else 1 if
        it has WAIT false, plus 2 if it has a sharding key."""
        cdef Span found[NAMES]
        cdef const char* within[NAMES]
        cdef int which, code
        scan(own, own_len, WANTED, ITEM_END_BYTE, NAME_END_BYTE, found)
        for which in range(NAMES):
            if header[which].end >= 0:
                found[which] = header[which]
                within[which] = text
            else:
                within[which] = own
        if found[DELAY_AT].end >= 0:
            return -1
        cdef int described = (
            (1 if is_false(within[WAIT_AT], found[WAIT_AT]) else 0)
            | (2 if found[SHARDING_KEY_AT].end >= 0 else 0)
        )
        self.marks.data.as_ints[r] = (
            (NO_WAIT_MARK if described & 1 else 0) | (SHARDING_MARK if described & 2 else 0)
        )
        if ascii_tags_code(within[TAGS_AT], found[TAGS_AT], &code):
            self.tags.data.as_longlongs[r] = code
        else:
            self.tags.data.as_longlongs[r] = tags_code(_text(within[TAGS_AT], found[TAGS_AT]))
        if found[UNIQ_KEY_AT].end >= 0:
            self.uniq_keys.append(_text(within[UNIQ_KEY_AT], found[UNIQ_KEY_AT]))
        else:
            self.uniq_keys.append(_text(within[LEGACY_UNIQ_KEY_AT], found[LEGACY_UNIQ_KEY_AT]))
        self.keys.append(
            _text(within[KEYS_AT], found[KEYS_AT]) if found[KEYS_AT].end >= 0 else ""
        )
        return described


cdef class SendLane:
    cdef Keys v1, v2
    cdef object route  # topic -> its write queues when the lane may send to it, else 0
    cdef bint writable
    cdef str cluster_part  # CLUSTER as appended to a send's properties
    cdef str region
    cdef dict templates  # (topic, queue, sysFlag, reconsumeTimes, peer) -> MessageTemplate
    cdef object host  # the store host of the last answer, and its offsetMsgId prefix
    cdef str host_prefix
    cdef str msg_id_key, queue_id_key, queue_offset_key
    cdef AnswerFrames frames
    cdef object topic  # the topic `_check` found
    cdef bytes store_ip, cluster_bytes
    cdef uint32_t store_port, v6_bit
    cdef bint store_v6
    cdef Py_ssize_t max_body, cluster_len
    # The templates of the last topic, peer, sysFlag and reconsumeTimes, by queue id.
    cdef object recent_topic, recent_peer
    cdef long long recent_sys_flag, recent_reconsume
    cdef list recent
    # SEND_MESSAGE_V2's keys of `FRAME_FIELDS` as a binary header writes them, and the
    # topic of the last frame staged (its UTF-8 and its text).
    cdef tuple frame_keys
    cdef bytes frame_topic_bytes
    cdef str frame_topic

    def __init__(self, dict v1_keys, dict v2_keys, route, bint writable, str cluster_name,
                 str region_id, tuple answer_keys, store_host, Py_ssize_t max_body):
        self.msg_id_key, self.queue_id_key, self.queue_offset_key = answer_keys
        self.v1 = Keys(v1_keys)
        self.v2 = Keys(v2_keys)
        self.route = route
        self.writable = writable
        self.cluster_part = CLUSTER_NAME + cluster_name + SEPARATOR
        self.region = region_id
        self.templates = {}
        self.host = None
        self.host_prefix = ""
        self.frames = AnswerFrames(answer_keys + (MSG_REGION, TRACE_ON), region_id)
        self.store_ip = store_host.ip
        self.store_port = <uint32_t>store_host.port
        self.store_v6 = store_host.is_v6
        self.v6_bit = <uint32_t>SysFlag.STOREHOST_V6 if self.store_v6 else 0
        self.max_body = max_body
        self.cluster_bytes = self.cluster_part.encode("utf-8")
        self.cluster_len = len(self.cluster_bytes)
        self.recent = [None] * RECENT_QUEUES
        self.frame_keys = tuple(v2_keys[name].encode("utf-8") for name in FRAME_FIELDS)
        self.frame_topic_bytes = None
        self.frame_topic = None

    def group_messages(self, list group, list answers, slow):
        """`SendProcessor._group_messages(group, answers)`; `slow` is the reference's
        `_messages_or_refusal`, taken for any send not made here."""
        cdef list puts = [], owners = []
        cdef dict routes = {}
        cdef Py_ssize_t i
        for i in range(PyList_GET_SIZE(group)):
            ctx = <object>PyList_GET_ITEM(group, i)
            made = self._plain(ctx, routes) if self.writable else None
            if made is None:
                made = slow(ctx)
                if type(made) is not list:
                    answers[i] = made
                    continue
            puts.append(made)
            owners.append(i)
        return puts, owners

    cdef object _check(self, request, dict routes, Plain* out):
        """The properties text of a plain send that may go to its queue as it is, with its
        numbers in `out` and its topic in `self.topic`; None for the reference to decide."""
        cdef int code = request.code
        cdef Keys keys
        out.batch = False
        if code == SEND_MESSAGE_V2:
            keys = self.v2
        elif code == SEND_MESSAGE:
            keys = self.v1
        elif code == SEND_BATCH_MESSAGE:
            keys = self.v2
            out.batch = True
        else:
            return None
        ext = request.ext_fields
        if type(ext) is not dict:
            return None
        cdef dict fields = <dict>ext
        cdef long long unused
        cdef PyObject* raw
        out.reconsume = 0
        if (
            PyDict_GetItem(fields, keys.producer_group) == NULL
            or PyDict_GetItem(fields, keys.default_topic) == NULL
            or PyDict_GetItem(fields, keys.max_reconsume_times) != NULL
            or not _number(PyDict_GetItem(fields, keys.default_topic_queue_nums),
                           INT_LOW, INT_HIGH, &unused)
            or not _number(PyDict_GetItem(fields, keys.queue_id), 0, INT_HIGH, &out.queue_id)
            or not _number(PyDict_GetItem(fields, keys.sys_flag), INT_LOW, INT_HIGH,
                           &out.sys_flag)
            or not _number(PyDict_GetItem(fields, keys.flag), INT_LOW, INT_HIGH, &out.flag)
            or not _number(PyDict_GetItem(fields, keys.born_timestamp),
                           LLONG_MIN, LLONG_MAX, &out.born)
        ):
            return None
        raw = PyDict_GetItem(fields, keys.reconsume_times)
        if raw != NULL and not _number(raw, INT_LOW, INT_HIGH, &out.reconsume):
            return None
        raw = PyDict_GetItem(fields, keys.batch)
        if raw != NULL:
            if <object>raw == "true":
                out.batch = True
            elif <object>raw != "false":
                return None
        if out.sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED:
            return None
        raw = PyDict_GetItem(fields, keys.topic)
        if raw == NULL or type(<object>raw) is not str:
            return None
        topic = <object>raw
        raw = PyDict_GetItem(fields, keys.properties)
        if raw == NULL:
            props = ""
        elif type(<object>raw) is str:
            props = <object>raw
        else:
            return None
        if TRAN_NAME in props or CLUSTER_NAME in props or (out.batch and DELAY_NAME in props):
            return None
        if not self._routed(routes, topic, out.queue_id):
            return None
        return props

    cdef bint _routed(self, dict routes, topic, long long queue_id) except -1:
        """Whether the lane may send to `queue_id` of `topic` (its write queues asked once
        a read, kept in `routes`): then `self.topic` is it."""
        cdef PyObject* raw = PyDict_GetItem(routes, topic)
        if raw == NULL:
            queues = self.route(topic)
            routes[topic] = queues
        else:
            queues = <object>raw
        if queue_id >= <long long>queues:
            return False
        self.topic = topic
        return True

    cdef object _template(self, peer, Plain* fields, str added):
        """The template of a send to `self.topic` with these numbers (made once). A single
        message's is looked up by its queue id first, among the templates of the last
        topic, peer and flags sent with (a producer's pipelined sends share them)."""
        topic = self.topic
        cdef Py_ssize_t queue = fields.queue_id
        cdef bint recent = not added and 0 <= queue < RECENT_QUEUES
        if recent:
            if (
                peer is self.recent_peer
                and fields.sys_flag == self.recent_sys_flag
                and fields.reconsume == self.recent_reconsume
                and (topic is self.recent_topic or topic == self.recent_topic)
            ):
                cached = self.recent[queue]
                if cached is not None:
                    return cached
            else:
                self.recent_peer = peer
                self.recent_topic = topic
                self.recent_sys_flag = fields.sys_flag
                self.recent_reconsume = fields.reconsume
                self.recent = [None] * RECENT_QUEUES
        key = (topic, fields.queue_id, fields.sys_flag, fields.reconsume, peer, added)
        cdef PyObject* raw = PyDict_GetItem(self.templates, key)
        if raw != NULL:
            template = <object>raw
        else:
            if len(self.templates) >= TEMPLATES_MAX:
                self.templates.clear()
            template = send_template(topic, fields.queue_id, added, fields.sys_flag,
                                     Host.parse(peer), fields.reconsume)
            self.templates[key] = template
        if recent:
            self.recent[queue] = template
        return template

    cdef object _plain(self, ctx, dict routes):
        """The messages of a plain send, or None for the reference to decide."""
        cdef Plain fields
        props = self._check(ctx.request, routes, &fields)
        if props is None:
            return None
        cdef bint batch = fields.batch
        if props and PyUnicode_READ_CHAR(props, len(props) - 1) != ITEM_END:
            props = props + SEPARATOR + self.cluster_part
        else:
            props = props + self.cluster_part
        items = None
        if batch:  # each item's properties as sent, then the batch's
            items = _batch_items(ctx.request.body)
            if items is None:
                return None
        template = self._template(ctx.conn.peer, &fields, props if batch else "")
        if items is None:
            msg = new(Message)
            msg._properties = None
            fill(template, msg, ctx.request.body, fields.flag, props, fields.born)
            return [msg]
        cdef list made = []
        for item_flag, item_body, item_props in items:
            msg = new(Message)
            msg._properties = None
            fill(template, msg, item_body, item_flag, item_props, fields.born)
            made.append(msg)
        return made

    def stage(self, list group):
        """The sends of `group` (request contexts) as staged records
        (`store.staged.StagedSends`), when every one of them is a plain send (of one
        message, or a batch: a record per item) that needs nothing else: no delay level, no
        transaction flag, within the size limits, all with WAIT false or none, each batch's
        items of one message type; else None (the message path takes them all, in order)."""
        return self._stage(group, None)

    def stage_read(self, peer, list requests):
        """`stage` for send requests that came from one peer (one read of a connection)."""
        return self._stage(requests, peer)

    def stage_frames(self, peer, buf, long long max_frame_length):
        """The sends at the start of a read of `peer`'s (`buf`, its bytes) staged straight
        from its frames, without a command per send: the whole frames from the first on
        that are SEND_MESSAGE_V2 requests (not oneway) with binary headers or JSON ones as
        clients write them, each of a single message, every field as `stage` takes it.
        (bytes used, their `StagedSends`, their opaques, their headers' serialize types)
        when `stage` would stage them as decoded, else None (the frames are decoded and
        taken the usual way). A frame the decoder would refuse (a bad length, text that is
        not UTF-8) ends the run before it, and is left to the decoder."""
        if not self.writable:
            return None
        cdef Py_buffer view
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        cdef const unsigned char* data = <const unsigned char*>view.buf
        cdef Py_ssize_t n = view.len, pos = 0, count = 0, frames = 0, total
        cdef SendParts* parts = NULL
        cdef unsigned char* scratch = NULL
        cdef Py_ssize_t scratch_used = 0
        cdef array.array opaques, kinds
        cdef dict routes = {}
        cdef list templates = []
        try:
            if n < PREFIX_SIZE or not _starts_as_send(data, n):
                return None  # (a read of pulls leaves here, before anything is made for it)
            while n - pos >= PREFIX_SIZE:  # the whole frames, counted
                total = <int32_t>get32(data + pos)
                if total < 4 or total > max_frame_length or n - pos - 4 < total:
                    break
                frames += 1
                pos += 4 + total
            if frames == 0:
                return None
            parts = <SendParts*>PyMem_Malloc(frames * sizeof(SendParts))
            scratch = <unsigned char*>PyMem_Malloc(n)  # a JSON header's values, unescaped
            if parts == NULL or scratch == NULL:
                raise MemoryError()
            opaques = array.clone(INTS, frames, zero=False)
            kinds = array.clone(INTS, frames, zero=False)
            pos = 0
            while count < frames:
                total = <int32_t>get32(data + pos)
                if not self._frame_send(peer, data + pos + 4, total, routes, &parts[count],
                                        &opaques.data.as_ints[count],
                                        &kinds.data.as_ints[count], scratch, &scratch_used):
                    break
                templates.append(self._template(peer, &parts[count].fields, ""))
                count += 1
                pos += 4 + total
            if count == 0:
                return None
            if count < frames:
                array.resize(opaques, count)
                array.resize(kinds, count)
            staged = self._stage_parts(parts, count, templates)
            if staged is None:
                return None
            return pos, staged, opaques, kinds
        finally:
            PyMem_Free(parts)
            PyMem_Free(scratch)
            PyBuffer_Release(&view)

    cdef bint _frame_send(self, peer, const unsigned char* frame, Py_ssize_t size,
                          dict routes, SendParts* out, int* opaque, int* kind,
                          unsigned char* scratch, Py_ssize_t* scratch_used) except -1:
        """Whether the frame (`size` bytes after its length) is a send `stage` takes as it
        is, its parts then in `out`, its opaque in `opaque` and its header's serialize
        type in `kind`: `_check` on the header's bytes, the topic's text made once for
        frames in a row that name it. A JSON header's values are written unescaped to
        `scratch` from `scratch_used` on (moved past them)."""
        cdef uint32_t type_and_len = get32(frame)
        cdef Py_ssize_t header_len = type_and_len & 0xFFFFFF
        cdef Py_ssize_t at[F_COUNT]
        cdef Py_ssize_t lengths[F_COUNT]
        cdef const unsigned char* h = frame + 4
        cdef const unsigned char* base  # where the values the spans in `at` locate lie
        cdef int which
        cdef long long unused
        if header_len > size - 4:
            return False
        for which in range(F_COUNT):
            at[which] = -1
            lengths[which] = 0
        kind[0] = <int>(type_and_len >> 24)
        if <int>(type_and_len >> 24) == ROCKETMQ_KIND:
            if not binary_fields(h, header_len, FIXED_SIZE, SEND_MESSAGE_V2, self.frame_keys,
                                 at, lengths, opaque):
                return False
            base = h
        elif <int>(type_and_len >> 24) == JSON_KIND:
            if not json_fields(h, header_len, SEND_MESSAGE_V2, self.frame_keys, at, lengths,
                               opaque, scratch + scratch_used[0]):
                return False
            base = scratch + scratch_used[0]
            scratch_used[0] += header_len
        else:
            return False
        cdef Plain* fields = &out.fields
        fields.batch = False
        fields.reconsume = 0
        if (
            at[F_GROUP] < 0 or at[F_DEFAULT_TOPIC] < 0 or at[F_MAX_RECONSUME] >= 0
            or not field_number(base, at[F_DEFAULT_QUEUES], lengths[F_DEFAULT_QUEUES],
                                 INT_LOW, INT_HIGH, &unused)
            or not field_number(base, at[F_QUEUE_ID], lengths[F_QUEUE_ID], 0, INT_HIGH,
                                 &fields.queue_id)
            or not field_number(base, at[F_SYS_FLAG], lengths[F_SYS_FLAG], INT_LOW, INT_HIGH,
                                 &fields.sys_flag)
            or not field_number(base, at[F_FLAG], lengths[F_FLAG], INT_LOW, INT_HIGH,
                                 &fields.flag)
            or not field_number(base, at[F_BORN], lengths[F_BORN], LLONG_MIN, LLONG_MAX,
                                 &fields.born)
        ):
            return False
        if at[F_RECONSUME] >= 0 and not field_number(
            base, at[F_RECONSUME], lengths[F_RECONSUME], INT_LOW, INT_HIGH, &fields.reconsume
        ):
            return False
        if at[F_BATCH] >= 0 and not (
            lengths[F_BATCH] == 5 and memcmp(base + at[F_BATCH], b"false", 5) == 0
        ):
            return False  # a batch (or a value `stage` refuses): decoded and staged
        if fields.sys_flag & TRANSACTION_MASK or at[F_TOPIC] < 0:
            return False
        out.text = <const char*>base + (at[F_PROPERTIES] if at[F_PROPERTIES] >= 0 else 0)
        out.text_len = lengths[F_PROPERTIES]  # 0 where there are none
        if out.text_len and (
            memmem(out.text, out.text_len, PyBytes_AS_STRING(TRAN_NAME_BYTES),
                   PyBytes_GET_SIZE(TRAN_NAME_BYTES)) != NULL
            or memmem(out.text, out.text_len, PyBytes_AS_STRING(CLUSTER_NAME_BYTES),
                      PyBytes_GET_SIZE(CLUSTER_NAME_BYTES)) != NULL
        ):
            return False
        topic = self._frame_topic(base + at[F_TOPIC], lengths[F_TOPIC])
        if not self._routed(routes, topic, fields.queue_id):
            return False
        out.body = h + header_len
        out.body_len = size - 4 - header_len
        return True

    cdef str _frame_topic(self, const unsigned char* at, Py_ssize_t size):
        """The topic's text (made again only when it differs from the last frame's)."""
        if same_bytes(self.frame_topic_bytes, at, size):
            return self.frame_topic
        self.frame_topic = PyUnicode_DecodeUTF8(<const char*>at, size, NULL)
        self.frame_topic_bytes = PyBytes_FromStringAndSize(<const char*>at, size)
        return self.frame_topic

    cdef object _stage(self, list group, peer):
        """`stage`: `group` holds request contexts, or requests from `peer` when given."""
        cdef Py_ssize_t n = PyList_GET_SIZE(group), i
        if not self.writable or n == 0:
            return None
        cdef dict routes = {}
        cdef list templates = []
        cdef SendParts* parts = <SendParts*>PyMem_Malloc(n * sizeof(SendParts))
        if parts == NULL:
            raise MemoryError()
        cdef Py_ssize_t text_len
        try:
            for i in range(n):
                item = <object>PyList_GET_ITEM(group, i)
                if peer is None:
                    request, sender = item.request, item.conn.peer
                else:
                    request, sender = item, peer
                props = self._check(request, routes, &parts[i].fields)
                if props is None or parts[i].fields.sys_flag & TRANSACTION_MASK:
                    return None
                body = request.body
                if type(body) is not bytes:
                    return None
                try:
                    parts[i].text = PyUnicode_AsUTF8AndSize(props, &text_len)
                except UnicodeEncodeError:
                    return None
                parts[i].text_len = text_len
                parts[i].body = <const unsigned char*>PyBytes_AS_STRING(body)
                parts[i].body_len = PyBytes_GET_SIZE(body)
                templates.append(self._template(sender, &parts[i].fields, ""))
            # (the requests hold the texts and bodies the parts point into until this returns)
            return self._stage_parts(parts, n, templates)
        finally:
            PyMem_Free(parts)

    cdef object _stage_parts(self, SendParts* parts, Py_ssize_t n, list send_templates):
        """The staged records of `n` checked sends (`parts`, each with its template), or
        None where one of them is not to be staged."""
        cdef Py_ssize_t i, slot, count = 0, r, items, k
        cdef dict slot_of = {}
        cdef list templates = []
        cdef _Records records = _Records(n)
        cdef array.array counts = array.clone(INTS, n, zero=False)
        # What each template (slot) lays out: its fixed size, numbers and hosts.
        cdef array.array slot_fixed = array.clone(INTS, n, zero=False)
        cdef array.array slot_numbers = array.clone(LONGS, 4 * n, zero=False)
        cdef list slot_parts = []
        cdef Plain* fields
        cdef Span header[NAMES]
        cdef Py_ssize_t text_len, added_len, total = 0, body_len, pos, own_len, item_len
        cdef int32_t flag
        cdef const char* text
        cdef const unsigned char* data
        cdef PyObject* raw
        cdef bint store_v6 = self.store_v6
        cdef int described, wait = -1, fifo
        for i in range(n):
            fields = &parts[i].fields
            text = parts[i].text
            text_len = parts[i].text_len
            # The send's properties and CLUSTER follow each record's own (a batch item's).
            added_len = text_len + self.cluster_len
            if text_len and text[text_len - 1] != ITEM_END_BYTE:
                added_len += 1
            scan(text, text_len, WANTED, ITEM_END_BYTE, NAME_END_BYTE, header)
            template = <object>PyList_GET_ITEM(send_templates, i)
            raw = PyDict_GetItem(slot_of, template)
            if raw == NULL:
                slot = count
                count += 1
                slot_of[template] = slot
                templates.append(template)
                born = template.born_host
                slot_fixed.data.as_ints[slot] = template.fixed[store_v6]
                slot_numbers.data.as_longlongs[4 * slot] = template.queue_id
                slot_numbers.data.as_longlongs[4 * slot + 1] = template.sys_flag
                slot_numbers.data.as_longlongs[4 * slot + 2] = template.reconsume_times
                slot_numbers.data.as_longlongs[4 * slot + 3] = (
                    template.prepared_transaction_offset
                )
                slot_parts.append((born.ip, born.port, template.topic_part))
            else:
                slot = <object>raw
            data = parts[i].body
            body_len = parts[i].body_len
            items = _batch_count(data, body_len) if fields.batch else 1
            if items <= 0:
                return None
            records.make_room(items)
            pos = 0
            fifo = -1
            for k in range(items):
                r = records.count
                if fields.batch:
                    own_len = _batch_item(data, pos, &flag, &item_len)
                    records.flags.data.as_ints[r] = flag
                    records.body_at.data.as_ints[r] = <int>(pos + ITEM_HEAD_SIZE)
                    records.body_sizes.data.as_ints[r] = <int>item_len
                    pos += ITEM_HEAD_SIZE + item_len + 2
                    records.own_at.data.as_ints[r] = <int>pos
                    pos += own_len
                    if not is_utf8(<const char*>data + records.own_at.data.as_ints[r], own_len):
                        return None
                else:
                    own_len = 0
                    records.flags.data.as_ints[r] = fields.flag
                    records.body_at.data.as_ints[r] = 0
                    records.own_at.data.as_ints[r] = 0
                    records.body_sizes.data.as_ints[r] = body_len
                if records.body_sizes.data.as_ints[r] > self.max_body:
                    return None
                records.own_len.data.as_ints[r] = own_len
                if own_len and data[records.own_at.data.as_ints[r] + own_len - 1] != ITEM_END_BYTE:
                    own_len += 1
                records.props_sizes.data.as_ints[r] = own_len + added_len
                if own_len + added_len > MAX_PROPS:
                    return None
                described = records.describe(
                    r, <const char*>data + records.own_at.data.as_ints[r],
                    records.own_len.data.as_ints[r], text, header,
                )
                # Not staged: a delay level; a flush waited for by some only; a batch
                # whose items are not all of one message type (metrics count it as one).
                if described < 0 or (wait >= 0 and described & 1 != wait):
                    return None
                wait = described & 1
                if fifo >= 0 and described & 2 != fifo:
                    return None
                fifo = described & 2
                records.slots.data.as_ints[r] = slot
                records.sizes.data.as_ints[r] = (
                    slot_fixed.data.as_ints[slot] + records.body_sizes.data.as_ints[r]
                    + own_len + added_len
                )
                records.borns.data.as_longlongs[r] = fields.born
                records.send_of.data.as_ints[r] = i
                total += records.sizes.data.as_ints[r]
                records.count += 1
            counts.data.as_ints[i] = items
        records.trim()
        cdef bytearray out = bytearray(total)
        self._encode(out, records, slot_numbers, slot_parts, parts)
        # (the put's columns made here: the dataclass' default factories are Python calls)
        return StagedSends(out, templates, records.slots, records.sizes, records.body_sizes,
                           records.marks, records.tags, records.uniq_keys, records.keys,
                           counts, array.clone(LONGS, 0, zero=False),
                           array.clone(LONGS, 0, zero=False))

    cdef int _encode(self, bytearray out, _Records records, array.array slot_numbers,
                     list slot_parts, SendParts* parts) except -1:
        """The records, back to back in `out`, as `store._message.encode` lays them out,
        with QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP zero (the put fills them)."""
        cdef unsigned char* at = <unsigned char*><char*>out
        cdef unsigned char* end
        cdef Py_ssize_t r, slot, text_len, k, body_at, body_len, own_at, own_len, send
        cdef uint32_t crc
        cdef const char* text
        cdef const unsigned char* source_at
        cdef long long* numbers
        cdef bytes born_ip, topic_part
        cdef bytes store_ip = self.store_ip
        cdef bytes cluster = self.cluster_bytes
        cdef tuple slot_hosts
        for r in range(records.count):
            slot = records.slots.data.as_ints[r]
            numbers = slot_numbers.data.as_longlongs + 4 * slot
            slot_hosts = <tuple>slot_parts[slot]
            born_ip = <bytes>slot_hosts[0]
            topic_part = <bytes>slot_hosts[2]
            send = records.send_of.data.as_ints[r]
            source_at = parts[send].body
            body_at = records.body_at.data.as_ints[r]
            body_len = records.body_sizes.data.as_ints[r]
            crc = _crc_at(source_at + body_at, body_len)
            end = at + records.sizes.data.as_ints[r]
            at = put_record_head(  # QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP left zero
                at, <uint32_t>records.sizes.data.as_ints[r], MAGIC_V1,
                crc & CRC_BITS, <uint32_t><int32_t>numbers[0],
                <uint32_t>records.flags.data.as_ints[r], 0, 0,
                <uint32_t><int32_t>numbers[1] | self.v6_bit,
                <uint64_t>records.borns.data.as_longlongs[r], born_ip,
                <uint32_t><int32_t>slot_hosts[1], 0, store_ip, self.store_port,
                <uint32_t><int32_t>numbers[2], <uint64_t>numbers[3],
                <const char*>source_at + body_at, body_len,
            )
            memcpy(at, PyBytes_AS_STRING(topic_part), PyBytes_GET_SIZE(topic_part))
            at += PyBytes_GET_SIZE(topic_part)
            k = records.props_sizes.data.as_ints[r]
            at[0] = <unsigned char>(k >> 8)
            at[1] = <unsigned char>k
            at += 2
            own_at = records.own_at.data.as_ints[r]
            own_len = records.own_len.data.as_ints[r]
            if own_len:  # a batch item's own properties, then the send's
                memcpy(at, source_at + own_at, own_len)
                at += own_len
                if source_at[own_at + own_len - 1] != ITEM_END_BYTE:
                    at[0] = ITEM_END_BYTE
                    at += 1
            text = parts[send].text
            text_len = parts[send].text_len
            memcpy(at, text, text_len)
            at += text_len
            if text_len and text[text_len - 1] != ITEM_END_BYTE:
                at[0] = ITEM_END_BYTE
                at += 1
            memcpy(at, PyBytes_AS_STRING(cluster), PyBytes_GET_SIZE(cluster))
            at += PyBytes_GET_SIZE(cluster)
            if at != end:
                raise ValueError(f"staged record {r} is not the length its template says")
        return 0

    def answer_all(self, list group, list owners, list puts, list results, list answers,
                   bint timed_out, slow):
        """The answers of `SendProcessor._answer_all` (metrics aside); `slow` is the
        reference's `_answer`, taken for any put not stored."""
        cdef Py_ssize_t n
        for n in range(PyList_GET_SIZE(owners)):
            i = <object>PyList_GET_ITEM(owners, n)
            ctx = group[i]
            msgs = <object>PyList_GET_ITEM(puts, n)
            result = <object>PyList_GET_ITEM(results, n)
            if result.status is not PUT_OK:
                answers[i] = slow(ctx, msgs, result, timed_out)
                continue
            answers[i] = self._stored(ctx.request, msgs, result, timed_out)

    cdef object _stored(self, request, list msgs, result, bint timed_out):
        host = result.store_host
        if host is None:
            msg_id = ""
        else:
            msg_id = _msg_ids(self._prefix(host), result.record_offsets)
        code = FLUSH_DISK_TIMEOUT if timed_out else SUCCESS
        return self._answer(request, code, msg_id, str(msgs[0].queue_id),
                            str(result.queue_offset))

    cdef str _prefix(self, host):
        """The offsetMsgId of `host` less its offset's 16 digits."""
        if host is not self.host:  # one store host, one object: rarely made again
            self.host_prefix = offset_msg_id_prefix(host)
            self.host = host
        return self.host_prefix

    cdef object _answer(self, request, code, str msg_id, str queue_id, str queue_offset):
        ext = {
            self.msg_id_key: msg_id,
            self.queue_id_key: queue_id,
            self.queue_offset_key: queue_offset,
            MSG_REGION: self.region,
            TRACE_ON: "true",
        }
        answer = new(RemotingCommand)
        answer.wire = self.frames.frame(request.serialize_type, code, request.opaque, msg_id,
                                        queue_id, queue_offset)
        answer.code = code
        answer.opaque = request.opaque
        answer.flag = RESPONSE
        answer.remark = None
        answer.ext_fields = ext
        answer.body = b""
        answer.language = PYTHON
        answer.version = VERSION
        answer.serialize_type = request.serialize_type
        return answer

    def answer_staged(self, list group, staged, list answers, bint timed_out, store_host):
        """The answers to staged sends stored at `store_host`, as `answer_all` gives them
        (FLUSH_DISK_TIMEOUT where their flush timed out or failed)."""
        cdef Py_ssize_t n = PyList_GET_SIZE(group), i
        if len(answers) != n:
            raise ValueError("staged sends and their answers differ in length")
        cdef list msg_ids = [], queue_ids = [], offsets = []
        self._placed(staged, n, store_host, msg_ids, queue_ids, offsets)
        code = FLUSH_DISK_TIMEOUT if timed_out or staged.status is FLUSH_TIMED_OUT else SUCCESS
        for i in range(n):
            request = (<object>PyList_GET_ITEM(group, i)).request
            answers[i] = self._answer(request, code, msg_ids[i], queue_ids[i], offsets[i])

    def answer_frames(self, list requests, staged, store_host):
        """The answer frames of `answer_staged`, written whole, for staged sends all stored
        (PUT_OK) and `requests` themselves: none for a oneway request; None when one cannot
        be written here (a serialize type or an opaque the frames do not take)."""
        cdef Py_ssize_t n = PyList_GET_SIZE(requests), i
        places = self._stored_places(staged, n, store_host)
        if places is None:
            return None
        msg_ids, queue_ids, offsets = places
        cdef list frames = []
        for i in range(n):
            request = <object>PyList_GET_ITEM(requests, i)
            if request.flag & ONEWAY_BIT:
                continue
            frame = self.frames.frame(request.serialize_type, SUCCESS, request.opaque,
                                      msg_ids[i], queue_ids[i], offsets[i])
            if frame is None:
                return None
            frames.append(frame)
        return frames

    def answer_opaques(self, array.array opaques, array.array kinds, staged, store_host):
        """`answer_frames` for sends staged by `stage_frames` (none oneway), from their
        opaques and serialize types; None unless all were stored (PUT_OK)."""
        cdef Py_ssize_t n = len(opaques), i
        places = self._stored_places(staged, n, store_host)
        if places is None:
            return None
        msg_ids, queue_ids, offsets = places
        cdef list frames = []
        for i in range(n):
            kind = ROCKETMQ if kinds.data.as_ints[i] == ROCKETMQ_KIND else JSON
            frames.append(self.frames.frame(kind, SUCCESS, opaques.data.as_ints[i],
                                            msg_ids[i], queue_ids[i], offsets[i]))
        return frames

    cdef tuple _stored_places(self, staged, Py_ssize_t n, store_host):
        """`_placed`'s lists for `n` staged sends all stored (PUT_OK); None otherwise."""
        if staged.status is not PUT_OK:
            return None
        cdef list msg_ids = [], queue_ids = [], offsets = []
        self._placed(staged, n, store_host, msg_ids, queue_ids, offsets)
        return msg_ids, queue_ids, offsets

    cdef int _placed(self, staged, Py_ssize_t n, store_host, list msg_ids, list queue_ids,
                     list offsets) except -1:
        """Each of the `n` staged sends' offsetMsgId(s), queue id and first queue offset,
        as its answer gives them."""
        cdef long long* phys = longs(staged.phys).data.as_longlongs
        cdef long long* queue_offsets = longs(staged.queue_offsets).data.as_longlongs
        cdef int* slots = ints(staged.slots).data.as_ints
        cdef array.array count_column = ints(staged.counts)
        cdef int* counts = count_column.data.as_ints
        cdef list templates = staged.templates
        cdef Py_ssize_t i, j, k, r = 0
        cdef Py_ssize_t records = len(staged.phys)
        if not (len(staged.queue_offsets) == len(staged.slots) == records
                and len(count_column) == n):
            raise ValueError("staged sends and their group differ in length")
        cdef list slot_queue_ids = [str(t.queue_id) for t in templates]
        prefix = self._prefix(store_host)
        cdef Py_ssize_t slot, slots_count = len(slot_queue_ids)
        for i in range(n):
            k = counts[i]
            if k < 1 or r + k > records:
                raise ValueError(f"staged send {i} has no records")
            slot = slots[r]
            if not 0 <= slot < slots_count:
                raise ValueError(f"staged record {r} has no place")
            for j in range(r, r + k):
                if phys[j] < 0:
                    raise ValueError(f"staged record {j} has no place")
            msg_ids.append(offset_msg_id(prefix, phys[r]) if k == 1
                           else _joined_ids(prefix, phys + r, k))
            queue_ids.append(slot_queue_ids[slot])
            offsets.append(str(queue_offsets[r]))
            r += k
        if r != records:
            raise ValueError("staged sends and their records differ in number")
        return 0
