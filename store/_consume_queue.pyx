# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of `store.consume_queue.encode_entries`: consume-queue entries (the
layout of `store.layout.CQ_ENTRY`, checked at import) written field by field in C."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint32_t, uint64_t

from rmqpy.store._big_endian cimport put32, put64

from rmqpy.store.layout import CQ_ENTRY

if CQ_ENTRY.format != ">qiq" or CQ_ENTRY.size != 20:
    raise ImportError("store._consume_queue does not match store.layout")


def encode_entries(list phys, list sizes, list tags):
    """`store.consume_queue.encode_entries(phys, sizes, tags)`."""
    cdef Py_ssize_t n = len(phys), i
    if len(sizes) != n or len(tags) != n:
        raise ValueError("the entry columns differ in length")
    out = PyBytes_FromStringAndSize(NULL, n * 20)
    cdef unsigned char* at = <unsigned char*>PyBytes_AS_STRING(out)
    for i in range(n):
        at = put64(at, <uint64_t><int64_t>phys[i])
        at = put32(at, <uint32_t><int>sizes[i])
        at = put64(at, <uint64_t><int64_t>tags[i])
    return out
