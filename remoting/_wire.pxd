# The frame's prefix and the binary header's fixed fields as `remoting.wire` lays them out,
# written by the compiled modules that build frames (each checks `remoting.wire` at import).
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from rmqpy.store._big_endian cimport put32


cdef inline unsigned char* put_frame_prefix(unsigned char* at, Py_ssize_t header_len,
                                            Py_ssize_t body_len, uint32_t kind) noexcept:
    """totalLen, then typeAndLen; returns where the header starts."""
    at = put32(at, <uint32_t>(4 + header_len + body_len))
    return put32(at, (kind << 24) | <uint32_t>header_len)


cdef inline unsigned char* put_binary_fixed(unsigned char* at, int code, int language,
                                            int version, int32_t opaque,
                                            int32_t flag) noexcept:
    """i16 code, i8 language, i16 version, i32 opaque, i32 flag; returns what follows."""
    at[0] = <unsigned char>(<uint16_t>code >> 8)
    at[1] = <unsigned char>code
    at[2] = <unsigned char>language
    at[3] = <unsigned char>(<uint16_t>version >> 8)
    at[4] = <unsigned char>version
    at = put32(at + 5, <uint32_t>opaque)
    return put32(at, <uint32_t>flag)


cdef inline Py_ssize_t binary_ext_len(tuple keys, const Py_ssize_t* lengths,
                                      Py_ssize_t n) noexcept:
    """The bytes `put_binary_ext` writes for `n` values of these lengths."""
    cdef Py_ssize_t total = 0, i
    for i in range(n):
        total += PyBytes_GET_SIZE(<bytes>keys[i]) + 4 + lengths[i]
    return total


cdef inline unsigned char* put_binary_ext(unsigned char* at, tuple keys,
                                          const char** values, const Py_ssize_t* lengths,
                                          Py_ssize_t n) noexcept:
    """The binary header's ext fields: each key as written once (its u16 length and bytes),
    then its value's i32 length and bytes; returns what follows."""
    cdef Py_ssize_t i, key_len
    cdef bytes key
    for i in range(n):
        key = <bytes>keys[i]
        key_len = PyBytes_GET_SIZE(key)
        memcpy(at, PyBytes_AS_STRING(key), key_len)
        at = put32(at + key_len, <uint32_t>lengths[i])
        memcpy(at, values[i], lengths[i])
        at += lengths[i]
    return at


cdef inline bint is_utf8(const char* text, Py_ssize_t size) except -1:
    """`text` is UTF-8 as Python decodes it (strictly), as the frame decoder takes a
    header's text; read by the lanes that take requests straight from a read's bytes."""
    cdef Py_ssize_t i = 0
    cdef uint64_t word
    while i + 8 <= size:  # ASCII, eight bytes at a time
        memcpy(&word, text + i, 8)
        if word & 0x8080808080808080ULL:
            break
        i += 8
    while i < size:
        if <unsigned char>text[i] >= 0x80:
            break
        i += 1
    else:
        return True
    try:
        PyUnicode_DecodeUTF8(text, size, NULL)
    except UnicodeDecodeError:
        return False
    return True
