# JSON text read in C, as clients write request headers: shared by the compiled frame
# decoder and the send lane, which reads a send's JSON header straight from the read.
from libc.stdint cimport uint8_t
from libc.string cimport memcmp


cdef inline Py_ssize_t blank(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end) noexcept:
    """`pos` moved past JSON whitespace."""
    while pos < end and (p[pos] == 32 or p[pos] == 10 or p[pos] == 13 or p[pos] == 9):
        pos += 1
    return pos


cdef inline int hex_digit(uint8_t c) noexcept:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef inline long escaped_unit(const uint8_t* p, Py_ssize_t at, Py_ssize_t end) noexcept:
    """The UTF-16 unit of the `\\uXXXX` at `at` (its backslash), or -1."""
    cdef long unit = 0
    cdef int digit, i
    if at + 6 > end or p[at] != 92 or p[at + 1] != 117:
        return -1
    for i in range(2, 6):
        digit = hex_digit(p[at + i])
        if digit < 0:
            return -1
        unit = unit * 16 + digit
    return unit


cdef inline Py_ssize_t put_utf8(uint8_t* out, long cp) noexcept:
    if cp < 0x80:
        out[0] = <uint8_t>cp
        return 1
    if cp < 0x800:
        out[0] = <uint8_t>(0xC0 | (cp >> 6))
        out[1] = <uint8_t>(0x80 | (cp & 0x3F))
        return 2
    if cp < 0x10000:
        out[0] = <uint8_t>(0xE0 | (cp >> 12))
        out[1] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
        out[2] = <uint8_t>(0x80 | (cp & 0x3F))
        return 3
    out[0] = <uint8_t>(0xF0 | (cp >> 18))
    out[1] = <uint8_t>(0x80 | ((cp >> 12) & 0x3F))
    out[2] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
    out[3] = <uint8_t>(0x80 | (cp & 0x3F))
    return 4


cdef inline Py_ssize_t json_unescape(const uint8_t* p, Py_ssize_t* at, Py_ssize_t end,
                                     uint8_t* out) noexcept:
    """The JSON string whose opening quote is at `at[0]`, its escapes undone, written to
    `out` (room for as many bytes as the escaped form, never more): its length, `at[0]`
    moved past the closing quote; -1 where this reader gives up (a raw control character,
    an unknown escape, a lone surrogate, no closing quote). The bytes are not checked to be
    UTF-8."""
    cdef Py_ssize_t i = at[0] + 1, n = 0
    cdef uint8_t c
    cdef long unit, low
    while i < end:
        c = p[i]
        if c == 34:
            at[0] = i + 1
            return n
        if c < 32:
            return -1
        if c != 92:
            out[n] = c
            n += 1
            i += 1
            continue
        if i + 1 >= end:
            return -1
        c = p[i + 1]
        if c == 117:  # \uXXXX, a surrogate pair as two
            unit = escaped_unit(p, i, end)
            if unit < 0:
                return -1
            i += 6
            if 0xD800 <= unit < 0xDC00:
                low = escaped_unit(p, i, end)
                if not 0xDC00 <= low < 0xE000:
                    return -1
                unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                i += 6
            elif 0xDC00 <= unit < 0xE000:
                return -1
            n += put_utf8(out + n, unit)
            continue
        if c == 34 or c == 92 or c == 47:
            out[n] = c
        elif c == 98:
            out[n] = 8
        elif c == 102:
            out[n] = 12
        elif c == 110:
            out[n] = 10
        elif c == 114:
            out[n] = 13
        elif c == 116:
            out[n] = 9
        else:
            return -1
        n += 1
        i += 2
    return -1


cdef inline bint json_int(const uint8_t* p, Py_ssize_t* at, Py_ssize_t end,
                          long long* out) noexcept:
    """A JSON integer in 32 bits at `at[0]` (moved past it); False for anything else
    (a fraction, an exponent, a leading zero, too many digits)."""
    cdef Py_ssize_t i = at[0], digits = 0
    cdef bint negative = False
    cdef long long value = 0
    if i < end and p[i] == 45:
        negative = True
        i += 1
    while i < end and 48 <= p[i] <= 57:
        if digits == 11:
            return False
        value = value * 10 + (p[i] - 48)
        digits += 1
        i += 1
    if digits == 0 or (digits > 1 and p[at[0] + negative] == 48):
        return False
    if i < end and (p[i] == 46 or p[i] == 101 or p[i] == 69):
        return False
    if negative:
        value = -value
    if not -2147483648 <= value <= 2147483647:
        return False
    out[0] = value
    at[0] = i
    return True


# The fields of a request's JSON header, as `header_field` names them.
cdef enum:
    J_CODE = 1
    J_OPAQUE = 2
    J_FLAG = 4
    J_VERSION = 8
    J_LANGUAGE = 16
    J_REMARK = 32
    J_EXT = 64
    J_SERIALIZE = 128


cdef inline int header_field(const uint8_t* name, Py_ssize_t size) noexcept:
    """The bit of the JSON header field called `name` (as written, no escapes); 0 for any
    other name."""
    if size == 4 and memcmp(name, b"code", 4) == 0:
        return J_CODE
    if size == 6 and memcmp(name, b"opaque", 6) == 0:
        return J_OPAQUE
    if size == 4 and memcmp(name, b"flag", 4) == 0:
        return J_FLAG
    if size == 7 and memcmp(name, b"version", 7) == 0:
        return J_VERSION
    if size == 8 and memcmp(name, b"language", 8) == 0:
        return J_LANGUAGE
    if size == 6 and memcmp(name, b"remark", 6) == 0:
        return J_REMARK
    if size == 9 and memcmp(name, b"extFields", 9) == 0:
        return J_EXT
    if size == 23 and memcmp(name, b"serializeTypeCurrentRPC", 23) == 0:
        return J_SERIALIZE
    return 0
