# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of `bench.floor.FloorState`: a read's sends and pulls with binary headers
served in C, frames split, fields read and records and answers laid out without a Python
object per message but the bytes handed on. Layouts from `remoting.wire` and `store.layout`."""

import time

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcmp, memcpy, memset

from rmqpy.remoting.codes import RequestCode, ResponseCode, SerializeType
from rmqpy.remoting.wire import BINARY_FIXED
from rmqpy.store.layout import MESSAGE_MAGIC_V1, RECORD_FIXED

cdef int FIXED_SIZE = RECORD_FIXED[(False, False)].size
cdef unsigned int MAGIC = MESSAGE_MAGIC_V1 & 0xFFFFFFFF
cdef int BINARY = int(SerializeType.ROCKETMQ)
cdef int BINARY_FIXED_SIZE = BINARY_FIXED.size
cdef int SEND = int(RequestCode.SEND_MESSAGE)
cdef int SEND_V2 = int(RequestCode.SEND_MESSAGE_V2)
cdef int PULL = int(RequestCode.PULL_MESSAGE)
cdef int SUCCESS = int(ResponseCode.SUCCESS)
cdef double SUSPEND_S = 1.0
cdef int ANSWER_HEADER = 21  # i16 code, i8 language, i16 version, i32 opaque, flag, 0, 0
cdef bytes TOPIC = b"floor"  # `floor.RECORD_TOPIC`
assert FIXED_SIZE == 88 and BINARY_FIXED_SIZE == 13
# Where the fixed part keeps its fields (IPv4 hosts): TOTALSIZE, MAGICCODE, QUEUEID,
# QUEUEOFFSET, PHYSICALOFFSET, BORNHOST, STOREHOST, BODYLEN.
cdef int AT_MAGIC = 4, AT_QUEUE_ID = 12, AT_QUEUE_OFFSET = 20, AT_PHY = 28
cdef int AT_BORN_HOST = 48, AT_STORE_HOST = 64, AT_BODY_LEN = 84


cdef inline unsigned int get32(const unsigned char* p) noexcept:
    return (<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3]


cdef inline void put32(unsigned char* p, unsigned int v) noexcept:
    p[0] = v >> 24
    p[1] = (v >> 16) & 255
    p[2] = (v >> 8) & 255
    p[3] = v & 255


cdef inline void put64(unsigned char* p, unsigned long long v) noexcept:
    put32(p, <unsigned int>(v >> 32))
    put32(p + 4, <unsigned int>(v & 0xFFFFFFFF))


cdef long long decimal(const unsigned char* p, Py_ssize_t n) noexcept:
    """The decimal number in p[:n], or -1 when it is not one."""
    cdef long long v = 0
    cdef Py_ssize_t i
    if n <= 0 or n > 18:
        return -1
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return -1
        v = v * 10 + (p[i] - 48)
    return v


cdef bytes answer_frame(int opaque, int code, const unsigned char* body, Py_ssize_t size):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 8 + ANSWER_HEADER + size)
    cdef unsigned char* p = <unsigned char*>PyBytes_AS_STRING(out)
    memset(p, 0, 8 + ANSWER_HEADER)
    put32(p, 4 + ANSWER_HEADER + size)
    put32(p + 4, (BINARY << 24) | ANSWER_HEADER)
    p[8] = (code >> 8) & 255
    p[9] = code & 255
    put32(p + 13, opaque)
    put32(p + 17, 1)
    if size:
        memcpy(p + 8 + ANSWER_HEADER, body, size)
    return out


cdef class FloorState:
    cdef public dict data
    cdef public dict starts
    cdef public dict first
    cdef public dict parked
    cdef public long long phy

    def __init__(self):
        self.data = {}
        self.starts = {}
        self.first = {}
        self.parked = {}
        self.phy = 0

    def max_offset(self, long long queue_id):
        return self._max_offset(queue_id)

    cdef long long _max_offset(self, long long queue_id) except -1:
        starts = self.starts.get(queue_id)
        return 0 if starts is None else self.first[queue_id] + len(starts)

    def serve_read(self, transport, bytearray buf):
        cdef const unsigned char* p = buf
        cdef Py_ssize_t end = len(buf), pos = 0, length, header_len, at, stop, body_len
        cdef int code, opaque, key_len, value_len
        cdef unsigned int type_and_len
        cdef long long queue_id, offset, most, value
        cdef const unsigned char* h
        acks = []
        touched = set()
        while end - pos >= 8:
            length = get32(p + pos)
            type_and_len = get32(p + pos + 4)
            if end - pos - 4 < length or <int>(type_and_len >> 24) != BINARY:
                break
            h = p + pos + 8
            code = (h[0] << 8) | h[1]
            if code != SEND and code != SEND_V2 and code != PULL:
                break
            opaque = <int>get32(h + 5)
            at = BINARY_FIXED_SIZE + 4 + get32(h + BINARY_FIXED_SIZE)  # past the remark
            stop = at + 4 + get32(h + at)
            at += 4
            queue_id, offset, most = 0, 0, 32
            while at < stop:
                key_len = (h[at] << 8) | h[at + 1]
                value_len = <int>get32(h + at + 2 + key_len)
                value = decimal(h + at + 6 + key_len, value_len)
                if value >= 0:
                    if (key_len == 1 and h[at + 2] == 101) or (
                        key_len == 7 and memcmp(h + at + 2, b"queueId", 7) == 0
                    ):
                        queue_id = value
                    elif key_len == 11 and memcmp(h + at + 2, b"queueOffset", 11) == 0:
                        offset = value
                    elif key_len == 10 and memcmp(h + at + 2, b"maxMsgNums", 10) == 0:
                        most = value
                at += 6 + key_len + value_len
            header_len = type_and_len & 0xFFFFFF
            if code == PULL:
                self._pull(transport, opaque, queue_id, offset, most)
            else:
                body_len = length - 4 - header_len
                self._store(h + header_len, body_len, queue_id)
                acks.append(answer_frame(opaque, SUCCESS, NULL, 0))
                touched.add(queue_id)
            pos += 4 + length
        if acks:
            transport.write(b"".join(acks))
        for queue_id in touched:
            parked = self.parked.get(queue_id)
            if parked is not None and self._max_offset(queue_id) > parked[2]:
                del self.parked[queue_id]
                parked[0].write(self._pull_answer(parked[1], parked[2], parked[3], queue_id))
        return pos

    def expired(self, double now):
        due = [q for q, p in self.parked.items() if p[4] <= now]
        return [self.parked.pop(q)[:2] for q in due]

    cdef void _store(self, const unsigned char* body, Py_ssize_t size, long long queue_id) except *:
        data = self.data.get(queue_id)
        if data is None:
            data = self.data[queue_id] = bytearray()
            self.starts[queue_id] = []
            self.first[queue_id] = 0
        cdef long long queue_offset = self._max_offset(queue_id)
        cdef list starts = self.starts[queue_id]
        cdef bytearray out = data
        cdef Py_ssize_t total = FIXED_SIZE + size + 1 + len(TOPIC) + 2
        cdef Py_ssize_t at = len(out)
        starts.append(at)
        out.extend(bytes(total))
        cdef unsigned char* base = out
        cdef unsigned char* r = base + at
        put32(r, <unsigned int>total)
        put32(r + AT_MAGIC, MAGIC)
        put32(r + AT_QUEUE_ID, <unsigned int>queue_id)
        put64(r + AT_QUEUE_OFFSET, queue_offset)
        put64(r + AT_PHY, self.phy)
        r[AT_BORN_HOST] = 127
        r[AT_BORN_HOST + 3] = 1
        r[AT_STORE_HOST] = 127
        r[AT_STORE_HOST + 3] = 1
        put32(r + AT_BODY_LEN, <unsigned int>size)
        memcpy(r + FIXED_SIZE, body, size)
        r[FIXED_SIZE + size] = len(TOPIC)
        memcpy(r + FIXED_SIZE + size + 1, <const char*>TOPIC, len(TOPIC))
        self.phy += total

    cdef _pull(self, transport, int opaque, long long queue_id, long long offset, long long most):
        if self._max_offset(queue_id) > offset:
            transport.write(self._pull_answer(opaque, offset, most, queue_id))
        else:
            self.parked[queue_id] = (transport, opaque, offset, most, time.monotonic() + SUSPEND_S)

    cdef bytes _pull_answer(self, int opaque, long long offset, long long most, long long queue_id):
        cdef list starts = self.starts[queue_id]
        cdef bytearray data = self.data[queue_id]
        cdef long long skip = offset - <long long>self.first[queue_id]
        cdef Py_ssize_t cut
        if skip > 0:
            cut = starts[skip]
            del data[:cut]
            self.starts[queue_id] = starts = [at - cut for at in starts[skip:]]
            self.first[queue_id] = offset
        cdef Py_ssize_t stop = starts[most] if most < len(starts) else len(data)
        cdef const unsigned char* d = data
        return answer_frame(opaque, SUCCESS, d, stop)
