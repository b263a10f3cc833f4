# The frame's prefix and the binary header's fixed fields as `remoting.wire` lays them out,
# written by the compiled modules that build frames (each checks `remoting.wire` at import).
from libc.stdint cimport int32_t, uint16_t, uint32_t

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
