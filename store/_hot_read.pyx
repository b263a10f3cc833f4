# cython: language_level=3, boundscheck=False, wraparound=False
"""`store.hot_read.gather`, compiled: one pass over the consume-queue entries, records copied
straight from the mapping into the body. The same stops, skips and limits as the reference."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy

from rmqpy.store._big_endian cimport get32, get64

from rmqpy.store.layout import BLANK, CQ_PLACEHOLDER, CQ_STORE_UNIT_SIZE, MESSAGE_MAGIC_V1

cdef int32_t MAGIC_V1 = MESSAGE_MAGIC_V1
cdef int32_t PLACEHOLDER_SIZE = CQ_PLACEHOLDER[1]
cdef int32_t HEAD = BLANK.size
cdef Py_ssize_t UNIT = CQ_STORE_UNIT_SIZE


def gather(mapping, int64_t base, int64_t written, bytes entries, tag_codes, int64_t low,
           Py_ssize_t max_count, int64_t max_bytes):
    """`store.hot_read.gather`."""
    cdef const uint8_t[::1] view
    cdef const uint8_t* cq = <const uint8_t*>PyBytes_AS_STRING(entries)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(entries) // UNIT, i, taken = 0, scanned = 0
    cdef int64_t phy, tags, total = 0, end = base + written, at
    cdef int32_t size
    cdef const uint8_t* src
    cdef list sizes = []
    cdef list starts = []
    cdef bint filtered = tag_codes is not None
    if low < base:
        low = base
    try:
        view = mapping
    except ValueError:  # closed by expiry
        return b"", sizes, 0
    src = &view[0] if view.shape[0] > 0 else NULL
    for i in range(n):
        phy = get64(cq + i * UNIT)
        size = get32(cq + i * UNIT + 8)
        if taken and (taken >= max_count or total + size > max_bytes):
            break
        if phy < low or phy + size > end or size == PLACEHOLDER_SIZE or size < HEAD:
            break
        if filtered:
            tags = get64(cq + i * UNIT + 12)
            if tags not in tag_codes:
                scanned += 1
                continue
        at = phy - base
        if at + size > view.shape[0]:
            break
        if get32(src + at) != size or get32(src + at + 4) != MAGIC_V1:
            break
        starts.append(at)
        sizes.append(size)
        total += size
        taken += 1
        scanned += 1
        if taken >= max_count:
            break
    body = PyBytes_FromStringAndSize(NULL, total)
    cdef char* out = PyBytes_AS_STRING(body)
    cdef int64_t put = 0
    for i in range(taken):
        at = starts[i]
        size = sizes[i]
        memcpy(out + put, src + at, size)
        put += size
    return body, sizes, scanned
