# cython: language_level=3, boundscheck=False, wraparound=False
"""`client.message.decode_messages`, compiled: a pull body's records read in one call.

A record whose every length agrees (magic, total size, body, topic and properties within
it, the body CRC right, summed where the body lies) is read here: fields straight from the
bytes, its topic, hosts and offsetMsgId prefix kept from the record before when they repeat
(a consumer's records share their topic and store host, and often their born host, from one
pull to the next), the message and its properties made without their `__init__` (allocated
and their slots filled). Any other record is read by the reference
(`client.message.decode_one`), so what is logged and left out, and what is raised, is the
reference's exactly.

Properties are kept as their text (`ReceivedProperties`, split at first use); only the
producer's id (UNIQ_KEY) is looked up here, in the bytes, for `msg_id`.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy

from rmqpy.store._big_endian cimport get32, get64
from rmqpy.store._crc cimport Crc32, native_crc32
from rmqpy.store._message_id cimport offset_msg_id

import zlib

import zlib_ng.zlib_ng as _zlib_ng
from zlib_ng.zlib_ng import crc32

from rmqpy.store.layout import (
    CRC_MASK,
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    RECORD_HEAD,
    MessageConst,
    SysFlag,
)
from rmqpy.store.message import _known_host
from rmqpy.store.message_id import offset_msg_id_prefix

cdef int32_t MAGIC_V1 = MESSAGE_MAGIC_V1
cdef int32_t MAGIC_V2 = MESSAGE_MAGIC_V2
cdef Py_ssize_t HEAD = RECORD_HEAD.size
cdef int32_t COMPRESSED = SysFlag.COMPRESSED
cdef int32_t BORN_V6 = SysFlag.BORNHOST_V6
cdef int32_t STORE_V6 = SysFlag.STOREHOST_V6
cdef uint32_t MASK = CRC_MASK
cdef bytes UNIQ = (MessageConst.UNIQ_KEY + "\x01").encode()
cdef bytes LEGACY_UNIQ = (MessageConst.LEGACY_UNIQ_KEY + "\x01").encode()
cdef object new = object.__new__
cdef Crc32 body_crc32 = native_crc32(_zlib_ng)
NATIVE_CRC32 = body_crc32 != NULL  # for the tests: which way bodies are summed here
cdef object decompress = zlib.decompress
# ReceivedMessage's fields, in order (checked against the class at first use).
cdef tuple FIELDS = (
    "topic", "body", "queue_id", "queue_offset", "commitlog_offset", "properties",
    "born_timestamp", "store_timestamp", "born_host", "store_host", "reconsume_times",
    "sys_flag", "flag", "msg_id", "offset_msg_id", "broker_name",
)
cdef object _client_message = None


cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset


cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    ctypedef struct PyTypeObject:
        void* tp_alloc
    object PyType_GenericAlloc(PyTypeObject* cls, Py_ssize_t items)
    void* GENERIC_ALLOC "((void*)PyType_GenericAlloc)"


# ReceivedProperties' slots, in the order they are set here.
cdef tuple PROPERTIES_FIELDS = ("_text", "_split")
# Where each of ReceivedMessage's and ReceivedProperties' slots lies in their objects (from
# the classes' own slot descriptors at first use): a fresh object's fields are stored there
# directly, as the frozen dataclass's own __init__ would through object.__setattr__,
# without a lookup per field.
cdef Py_ssize_t SLOT_AT[16]
cdef Py_ssize_t PROPERTIES_AT[2]
MemberDescriptor = type(type("_Slotted", (), {"__slots__": ("x",)}).__dict__["x"])


cdef void _slot_offsets(cls, tuple names, Py_ssize_t* out) except *:
    cdef Py_ssize_t i
    for i in range(len(names)):
        descriptor = cls.__dict__.get(names[i])
        if type(descriptor) is not MemberDescriptor:
            raise ImportError(f"{cls.__name__}.{names[i]} is not a slot")
        out[i] = (<PyMemberDescrObject*><PyObject*>descriptor).d_member.offset


cdef inline void _set_slot(object obj, Py_ssize_t* offsets, Py_ssize_t i, object value) noexcept:
    """A fresh object's empty slot `i` (at `offsets[i]`) set to `value`."""
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>obj) + offsets[i]))[0] = <PyObject*>value


cdef bint _allocates_plainly(cls):
    """Whether `object.__new__(cls)` only allocates (what `PyType_GenericAlloc` does), so a
    fresh object may be made by that call alone."""
    return (<PyTypeObject*><PyObject*>cls).tp_alloc == GENERIC_ALLOC and (
        cls.__new__ is object.__new__
    )


cdef bint plain_alloc = False  # both classes' objects made by PyType_GenericAlloc


cdef inline object _fresh(object cls):
    return PyType_GenericAlloc(<PyTypeObject*><PyObject*>cls, 0) if plain_alloc else new(cls)


cdef object _reference():
    """`client.message`, imported at first use: it imports this module at its end."""
    global _client_message, plain_alloc
    if _client_message is None:
        import rmqpy.client.message as module
        if tuple(module.ReceivedMessage.__dataclass_fields__) != FIELDS:
            raise ImportError("ReceivedMessage's fields are not the ones this module sets")
        _slot_offsets(module.ReceivedMessage, FIELDS, SLOT_AT)
        _slot_offsets(module.ReceivedProperties, PROPERTIES_FIELDS, PROPERTIES_AT)
        plain_alloc = _allocates_plainly(module.ReceivedMessage) and _allocates_plainly(
            module.ReceivedProperties
        )
        _client_message = module
    return _client_message


cdef inline bint _same_bytes(bytes raw, const uint8_t* at, Py_ssize_t size) noexcept:
    """Whether `raw` holds the `size` bytes at `at`."""
    return PyBytes_GET_SIZE(raw) == size and memcmp(PyBytes_AS_STRING(raw), at, size) == 0


cdef class _Text:
    """A text seen in one position of the records (the topic): its bytes as stored and its
    str. Never changed once made: the last ones seen are kept across calls (a consumer's
    pulls mostly repeat them), and a thread that reads one while another replaces it still
    holds a whole one."""

    cdef bytes raw
    cdef object text

    def __init__(self):
        self.raw, self.text = b"", ""  # an empty first topic is "" too

    cdef bint same(self, const uint8_t* at, Py_ssize_t size) noexcept:
        return _same_bytes(self.raw, at, size)


cdef _Text _text_at(const uint8_t* at, Py_ssize_t size):
    cdef _Text made = _Text()
    made.text = PyUnicode_DecodeUTF8(<const char*>at, size, "replace")
    made.raw = PyBytes_FromStringAndSize(<const char*>at, size)
    return made


cdef class _Host(_Text):
    """A host seen in one position of the records: its bytes as stored (IP and port), and
    what the message shows of it (`str(Host)`); kept as `_Text` is."""

    cdef object id_prefix  # the offsetMsgId before the offset, for a store host


cdef _Host _host_at(const uint8_t* at, Py_ssize_t size, bint store):
    cdef _Host made = _Host()
    made.raw = PyBytes_FromStringAndSize(<const char*>at, size)
    host = _known_host(made.raw[: size - 4], get32(at + size - 4))
    made.text = str(host)
    if store:
        made.id_prefix = offset_msg_id_prefix(host)
    return made


# The born host, store host and topic of the last record decoded, whichever call read it.
cdef _Host born_seen = _Host()
cdef _Host stored_seen = _Host()
cdef _Text topic_seen = _Text()


cdef object property_value(const uint8_t* p, Py_ssize_t n, bytes key):
    """`store.message.property_value` on the properties' bytes: the value of the last
    `name\\x01value` pair whose name is `key`'s (which ends in \\x01), or None. The
    separators are ASCII, so splitting bytes and then decoding each part is what splitting
    the decoded text gives."""
    cdef Py_ssize_t k = PyBytes_GET_SIZE(key), i = 0, end
    cdef const char* name = PyBytes_AS_STRING(key)
    cdef const uint8_t* sep
    cdef Py_ssize_t found = -1, found_end = 0
    while i < n:
        sep = <const uint8_t*>memchr(p + i, 2, n - i)
        end = n if sep == NULL else sep - p
        if end - i >= k and memcmp(p + i, name, k) == 0:
            found, found_end = i + k, end
        i = end + 1
    if found < 0:
        return None
    return PyUnicode_DecodeUTF8(<const char*>p + found, found_end - found, "replace")


def decode_messages(bytes body, str broker_name=""):
    """`client.message.decode_messages`: the messages of a pull body."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(body)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(body), pos = 0, at, end, born_size, store_size
    cdef Py_ssize_t body_at, topic_at, props_at
    cdef int32_t total, magic, crc, sys_flag, body_len, topic_len, props_len
    cdef int64_t commitlog_offset
    cdef Py_ssize_t i
    cdef list out = []
    global born_seen, stored_seen, topic_seen
    cdef _Host born = born_seen, stored = stored_seen
    cdef _Text topic = topic_seen
    reference = _reference()
    received = reference.ReceivedMessage
    lazy = reference.ReceivedProperties
    decode_one = reference.decode_one
    while 0 <= pos < n:
        # The fast way only for a record whose every length agrees; anything else (and
        # the end of a body cut short) goes the reference's way.
        if pos + HEAD > n:
            pos = decode_one(body, pos, broker_name, out)
            continue
        total = get32(p + pos)
        magic = get32(p + pos + 4)
        end = pos + total
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or total <= HEAD or end > n:
            pos = decode_one(body, pos, broker_name, out)
            continue
        sys_flag = get32(p + pos + 36)
        born_size = 20 if sys_flag & BORN_V6 else 8
        store_size = 20 if sys_flag & STORE_V6 else 8
        body_at = pos + HEAD + born_size + 8 + store_size + 16
        if body_at > end:
            pos = decode_one(body, pos, broker_name, out)
            continue
        body_len = get32(p + body_at - 4)
        topic_at = body_at + body_len
        if body_len < 0 or topic_at + 1 > end:
            pos = decode_one(body, pos, broker_name, out)
            continue
        if magic == MAGIC_V1:
            topic_len = p[topic_at]
            topic_at += 1
        else:
            if topic_at + 2 > end:
                pos = decode_one(body, pos, broker_name, out)
                continue
            topic_len = <int16_t>((p[topic_at] << 8) | p[topic_at + 1])
            topic_at += 2
        props_at = topic_at + topic_len
        if topic_len < 0 or props_at + 2 > end:
            pos = decode_one(body, pos, broker_name, out)
            continue
        props_len = <int16_t>((p[props_at] << 8) | p[props_at + 1])
        props_at += 2
        if props_len < 0 or props_at + props_len != end:
            pos = decode_one(body, pos, broker_name, out)
            continue
        commitlog_offset = get64(p + pos + 28)
        if commitlog_offset < 0:  # the reference writes its id with a minus sign
            pos = decode_one(body, pos, broker_name, out)
            continue
        crc = get32(p + pos + 8)
        if body_crc32 != NULL:
            if <int32_t>(body_crc32(0, p + body_at, <uint32_t>body_len) & MASK) != crc:
                pos = decode_one(body, pos, broker_name, out)
                continue
            data = PyBytes_FromStringAndSize(<const char*>p + body_at, body_len)
        else:
            data = PyBytes_FromStringAndSize(<const char*>p + body_at, body_len)
            if <int32_t>(<uint32_t>crc32(data) & MASK) != crc:
                pos = decode_one(body, pos, broker_name, out)
                continue
        at = pos + HEAD
        if not born.same(p + at, born_size):
            born = born_seen = _host_at(p + at, born_size, False)
        at += born_size + 8
        if not stored.same(p + at, store_size):
            stored = stored_seen = _host_at(p + at, store_size, True)
        at += store_size
        if not topic.same(p + topic_at, topic_len):
            topic = topic_seen = _text_at(p + topic_at, topic_len)
        properties = _fresh(lazy)
        _set_slot(properties, PROPERTIES_AT, 0,
                  PyUnicode_DecodeUTF8(<const char*>p + props_at, props_len, "replace"))
        _set_slot(properties, PROPERTIES_AT, 1, None)
        offset_id = offset_msg_id(stored.id_prefix, commitlog_offset)
        uniq = property_value(p + props_at, props_len, UNIQ)
        if uniq is None:
            uniq = property_value(p + props_at, props_len, LEGACY_UNIQ)
        msg = _fresh(received)
        _set_slot(msg, SLOT_AT, 0, topic.text)
        _set_slot(msg, SLOT_AT, 1, decompress(data) if sys_flag & COMPRESSED else data)
        _set_slot(msg, SLOT_AT, 2, get32(p + pos + 12))  # queue id
        _set_slot(msg, SLOT_AT, 3, get64(p + pos + 20))  # queue offset
        _set_slot(msg, SLOT_AT, 4, commitlog_offset)
        _set_slot(msg, SLOT_AT, 5, properties)
        _set_slot(msg, SLOT_AT, 6, get64(p + pos + 40))  # born timestamp
        _set_slot(msg, SLOT_AT, 7, get64(p + pos + HEAD + born_size))  # store timestamp
        _set_slot(msg, SLOT_AT, 8, born.text)
        _set_slot(msg, SLOT_AT, 9, stored.text)
        _set_slot(msg, SLOT_AT, 10, get32(p + at))  # reconsume times
        _set_slot(msg, SLOT_AT, 11, sys_flag)
        _set_slot(msg, SLOT_AT, 12, get32(p + pos + 16))  # flag
        _set_slot(msg, SLOT_AT, 13, uniq or offset_id)
        _set_slot(msg, SLOT_AT, 14, offset_id)
        _set_slot(msg, SLOT_AT, 15, broker_name)
        out.append(msg)
        pos = end
    return out
