# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of `store.consume_queue.encode_entries`: consume-queue entries (the
layout of `store.layout.CQ_ENTRY`, checked at import) written field by field in C."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint32_t, uint64_t

from store.layout import CQ_ENTRY

if CQ_ENTRY.format != ">qiq" or CQ_ENTRY.size != 20:
    raise ImportError("store._consume_queue does not match store.layout")


cdef inline unsigned char* _put32(unsigned char* at, uint32_t v) noexcept:
    at[0] = <unsigned char>(v >> 24)
    at[1] = <unsigned char>(v >> 16)
    at[2] = <unsigned char>(v >> 8)
    at[3] = <unsigned char>v
    return at + 4


cdef inline unsigned char* _put64(unsigned char* at, uint64_t v) noexcept:
    return _put32(_put32(at, <uint32_t>(v >> 32)), <uint32_t>v)


def encode_entries(list phys, list sizes, list tags):
    """`store.consume_queue.encode_entries(phys, sizes, tags)`."""
    cdef Py_ssize_t n = len(phys), i
    if len(sizes) != n or len(tags) != n:
        raise ValueError("the entry columns differ in length")
    out = PyBytes_FromStringAndSize(NULL, n * 20)
    cdef unsigned char* at = <unsigned char*>PyBytes_AS_STRING(out)
    for i in range(n):
        at = _put64(at, <uint64_t><int64_t>phys[i])
        at = _put32(at, <uint32_t><int>sizes[i])
        at = _put64(at, <uint64_t><int64_t>tags[i])
    return out
