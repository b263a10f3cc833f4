# Decimal text read in C, shared by the compiled header parser and the send and pull lanes.


cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object text)
    const void* PyUnicode_DATA(object text)


cdef inline bint ascii_integer_at(const unsigned char* at, Py_ssize_t n, long long* out) noexcept:
    """`ascii_integer` for the `n` bytes at `at` (text as UTF-8, or a header's own bytes)."""
    cdef Py_ssize_t i = 0
    cdef bint negative = False
    cdef long long value = 0
    if n == 0 or n > 19:
        return False
    if at[0] == 45:  # "-"
        negative = True
        i = 1
        if n == 1:
            return False
    if n - i > 18:
        return False
    while i < n:
        if at[i] < 48 or at[i] > 57:
            return False
        value = value * 10 + (at[i] - 48)
        i += 1
    out[0] = -value if negative else value
    return True


cdef inline bint ascii_integer(str text, long long* out) except -1:
    """`text` is an optional minus and 1 to 18 ASCII digits: its value in `out`."""
    return PyUnicode_IS_ASCII(text) and ascii_integer_at(
        <const unsigned char*>PyUnicode_DATA(text), len(text), out
    )
