# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twins of the load generator's per-request work (`bench.load`):
`Patchable.render` (a frame's per-send fields written in C), `split_responses` (answers
cut out of the read buffer, a binary header's opaque and code read in C, and a JSON
header's found in C as the reference's `json_ids` finds them; one that C cannot read goes
to `json_ids`) and `count_records` (a pull's records counted, their stamps read, in C).
The generator must not be what a benchmark measures."""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int16_t, int32_t, uint16_t, uint32_t
from libc.stdio cimport snprintf
from libc.string cimport memcmp, memcpy, memset

from cpython cimport array

from rmqpy.store._big_endian cimport get32

from time import time_ns

from rmqpy.remoting.codes import SerializeType
from rmqpy.store.layout import HOST_V4, HOST_V6, OFF_SYS_FLAG, RECORD_FIXED, SysFlag

cdef unsigned char JSON = SerializeType.JSON
# Where a binary header's opaque and code are, and how a JSON header's are read: the
# reference's, taken when first needed (`bench.load` imports this module).
cdef Py_ssize_t OPAQUE = -1, CODE = -1
cdef object json_ids = None


cdef int _ensure() except -1:
    global OPAQUE, CODE, json_ids
    if OPAQUE < 0:
        from rmqpy.bench import load

        OPAQUE, CODE, json_ids = load.OPAQUE_AT, load.CODE_AT, load.json_ids
    return 0


cdef inline void _digits(char* at, const char* fmt, long long value, int width) noexcept:
    cdef char text[48]
    snprintf(text, sizeof(text), fmt, value)
    memcpy(at, text, width)


def render(patchable, long long opaque, bytes born, long long key_base, bytes stamp):
    """`Patchable.render(patchable, opaque, born, key_base, stamp)`."""
    _ensure()
    cdef bytearray frame = patchable.frame
    cdef char* data = PyByteArray_AS_STRING(frame)
    cdef Py_ssize_t at, i
    cdef uint32_t value
    if PyBytes_GET_SIZE(born) != 13:
        raise ValueError("a born timestamp is 13 digits")
    if patchable.json:
        _digits(data + <Py_ssize_t>patchable.opaque_at, b"%010lld", opaque, 10)
    else:
        value = <uint32_t><int32_t>opaque
        data[OPAQUE] = <char>(value >> 24)
        data[OPAQUE + 1] = <char>(value >> 16)
        data[OPAQUE + 2] = <char>(value >> 8)
        data[OPAQUE + 3] = <char>value
    for at in patchable.born:
        memcpy(data + at, PyBytes_AS_STRING(born), 13)
    i = 0
    for at in patchable.keys:
        _digits(data + at, b"%016lld", key_base + i, 16)
        i += 1
    i = 0
    for at in patchable.uniqs:
        _digits(data + at, b"%032llX", key_base + i, 32)
        i += 1
    cdef Py_ssize_t n = min(PyBytes_GET_SIZE(stamp), 16)
    for at in patchable.stamps:
        memset(data + at, 0, 16)
        memcpy(data + at, PyBytes_AS_STRING(stamp), n)
    return PyBytes_FromStringAndSize(data, PyByteArray_GET_SIZE(frame))


cdef bint _json_number(const unsigned char* data, Py_ssize_t start, Py_ssize_t end,
                       const char* name, Py_ssize_t name_len, long long* out) noexcept:
    """The first `name` (`"code":`, say) in [start, end) followed by an optional minus and
    digits, as `JSON_FIELDS` finds it, with its number; False where there is none, or its
    number has more than 18 digits."""
    cdef Py_ssize_t i = start, j, digits
    cdef bint negative
    cdef long long value
    while i + name_len <= end:
        if memcmp(data + i, name, name_len) == 0:
            j = i + name_len
            negative = j < end and data[j] == 45  # '-'
            if negative:
                j += 1
            if j < end and 48 <= data[j] <= 57:
                value = 0
                digits = 0
                while j < end and 48 <= data[j] <= 57:
                    if digits == 18:
                        return False
                    value = value * 10 + (data[j] - 48)
                    digits += 1
                    j += 1
                out[0] = -value if negative else value
                return True
        i += 1
    return False


cdef tuple _answer_ids(bytearray buf, const unsigned char* data, Py_ssize_t pos,
                       Py_ssize_t end):
    """(opaque, code) of the whole answer frame at `pos`: a binary header's read in C, a
    JSON header's found in C as `json_ids` finds them, else by `json_ids` itself."""
    cdef long long opaque, code
    cdef Py_ssize_t header_end
    if data[pos + 4] != JSON:
        return (get32(data + pos + OPAQUE),
                <int16_t>((<uint16_t>data[pos + CODE] << 8) | data[pos + CODE + 1]))
    header_end = pos + 8 + (get32(data + pos + 4) & 0xFFFFFF)
    if header_end <= end and _json_number(
        data, pos + 8, header_end, b'"opaque":', 9, &opaque
    ) and _json_number(data, pos + 8, header_end, b'"code":', 7, &code):
        return opaque, code
    return json_ids(buf, pos)


cdef inline Py_ssize_t _frame_end(const unsigned char* data, Py_ssize_t pos,
                                  Py_ssize_t end) noexcept:
    """Where the frame at `pos` ends (its length prefix read), or -1 while it is not all in
    the buffer."""
    if end - pos < 4:
        return -1
    cdef int32_t length = get32(data + pos)
    return pos + 4 + length if end - pos - 4 >= length else -1


def split_responses(bytearray buf, on_response, bint frames=True):
    """`bench.load.split_responses(buf, on_response, frames)`."""
    _ensure()
    cdef Py_ssize_t pos = 0, end = PyByteArray_GET_SIZE(buf), frame_end
    cdef const unsigned char* data
    while True:
        data = <const unsigned char*>PyByteArray_AS_STRING(buf)
        frame_end = _frame_end(data, pos, end)
        if frame_end < 0:
            break
        frame = (PyBytes_FromStringAndSize(<const char*>data + pos, frame_end - pos)
                 if frames else b"")
        opaque, code = _answer_ids(buf, data, pos, end)
        on_response(opaque, code, frame)
        pos = frame_end
    del buf[:pos]


def tally_answers(bytearray buf, dict sent_at, array.array samples, ok_codes, double now):
    """`bench.load.tally_answers(buf, sent_at, samples, ok_codes, now)`."""
    _ensure()
    cdef Py_ssize_t pos = 0, end = PyByteArray_GET_SIZE(buf), ok = 0, errors = 0, frame_end
    cdef const unsigned char* data
    while True:
        data = <const unsigned char*>PyByteArray_AS_STRING(buf)
        frame_end = _frame_end(data, pos, end)
        if frame_end < 0:
            break
        opaque, code = _answer_ids(buf, data, pos, end)
        start = sent_at.pop(opaque, None)
        if start is not None:
            samples.append((now - <double>start) * 1000)
            if ok_codes is None or code in ok_codes:
                ok += 1
            else:
                errors += 1
        pos = frame_end
    del buf[:pos]
    return ok, errors


# A record's layout, for `count_records` (the store's own, read once at import).
cdef Py_ssize_t SYS_FLAG_AT = OFF_SYS_FLAG
cdef Py_ssize_t FIXED_V4 = RECORD_FIXED[(False, False)].size
cdef Py_ssize_t HOST_GROWTH = HOST_V6.size - HOST_V4.size
cdef int32_t BORN_V6 = SysFlag.BORNHOST_V6, STORE_V6 = SysFlag.STOREHOST_V6


cdef long long _stamp(const unsigned char* head, Py_ssize_t length) noexcept:
    """The 16 ASCII digits at `head` as a number; 0 when there are not 16 of them."""
    cdef long long value = 0
    cdef Py_ssize_t i
    if length != 16:
        return 0
    for i in range(16):
        if head[i] < 48 or head[i] > 57:
            return 0
        value = value * 10 + (head[i] - 48)
    return value


def count_records(bytes frame, bint stamp, array.array e2e):
    """`bench.load.count_records(frame, stamp, e2e)`."""
    cdef const unsigned char* data = <const unsigned char*>PyBytes_AS_STRING(frame)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(frame), start, n, pos = 0, count = 0, fixed, at
    cdef int32_t record_size, sys_flag, body_len
    cdef long long now_us = 0, sent_us
    if size < 8:
        raise ValueError("a frame is at least 8 bytes")
    start = 8 + (get32(data + 4) & 0xFFFFFF)
    if start > size:
        start = size
    data += start
    n = size - start
    if stamp:
        now_us = time_ns() // 1000
    while pos < n:
        if stamp:
            if pos + SYS_FLAG_AT + 4 > n:
                raise ValueError("a record's head is cut short")
            sys_flag = <int32_t>get32(data + pos + SYS_FLAG_AT)
            fixed = FIXED_V4 + (HOST_GROWTH if sys_flag & BORN_V6 else 0) + (
                HOST_GROWTH if sys_flag & STORE_V6 else 0
            )
            if pos + fixed > n:
                raise ValueError("a record's head is cut short")
            body_len = <int32_t>get32(data + pos + fixed - 4)
            at = pos + fixed
            sent_us = _stamp(data + at, max(0, min(body_len, 16, n - at)))
            if sent_us:
                e2e.append((now_us - sent_us) / 1000)
        if pos + 4 > n:
            raise ValueError("a record's size is cut short")
        record_size = <int32_t>get32(data + pos)
        if record_size <= 0:
            break  # not a record: what was counted stands
        pos += record_size
        count += 1
    return count, n
