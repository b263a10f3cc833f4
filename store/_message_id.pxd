# offsetMsgIds written in C: the store host's part (`store.message_id.offset_msg_id_prefix`)
# and the commitlog offset as 16 upper-case hex digits; shared by the compiled modules.
from cpython.unicode cimport PyUnicode_DecodeASCII


cdef inline void hex16(char* at, long long offset) noexcept:
    """`offset` (in [0, 2^63)) as 16 upper-case hex digits at `at`."""
    cdef int k
    for k in range(15, -1, -1):
        at[k] = b"0123456789ABCDEF"[offset & 15]
        offset >>= 4


cdef inline str offset_msg_id(str prefix, long long offset):
    """`prefix` and `offset` (in [0, 2^63)) as 16 hex digits: one offsetMsgId."""
    cdef char digits[16]
    hex16(digits, offset)
    return prefix + PyUnicode_DecodeASCII(digits, 16, NULL)
