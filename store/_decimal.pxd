# Unsigned integers in decimal ASCII, as the compiled modules print them into frames and
# columns.
from libc.stdint cimport uint64_t


cdef inline Py_ssize_t put_decimal(uint64_t u, unsigned char* out) noexcept:
    """`u` in decimal ASCII at `out` (room for 20 characters); its length."""
    cdef char digits[20]
    cdef Py_ssize_t n = 0, i = 0
    while True:
        digits[n] = <char>(48 + u % 10)
        n += 1
        u //= 10
        if u == 0:
            break
    while n:
        n -= 1
        out[i] = digits[n]
        i += 1
    return i


cdef inline Py_ssize_t put_signed_decimal(long long v, unsigned char* out) noexcept:
    """`v` in decimal ASCII at `out`, a minus first when negative (room for 20 characters);
    its length."""
    if v < 0:
        out[0] = 45  # '-'
        return 1 + put_decimal(<uint64_t>(-(v + 1)) + 1, out + 1)
    return put_decimal(<uint64_t>v, out)
