# Big-endian integers in and out of buffers, as the store's files and the wire lay them
# out (Java's DataOutput order); shared by the compiled modules.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t


cdef inline unsigned char* put32(unsigned char* at, uint32_t v) noexcept:
    at[0] = <unsigned char>(v >> 24)
    at[1] = <unsigned char>(v >> 16)
    at[2] = <unsigned char>(v >> 8)
    at[3] = <unsigned char>v
    return at + 4


cdef inline unsigned char* put64(unsigned char* at, uint64_t v) noexcept:
    return put32(put32(at, <uint32_t>(v >> 32)), <uint32_t>v)


cdef inline int32_t get32(const unsigned char* at) noexcept:
    return <int32_t>((<uint32_t>at[0] << 24) | (<uint32_t>at[1] << 16)
                     | (<uint32_t>at[2] << 8) | <uint32_t>at[3])


cdef inline int64_t get64(const unsigned char* at) noexcept:
    return <int64_t>((<uint64_t><uint32_t>get32(at) << 32) | <uint64_t><uint32_t>get32(at + 4))
