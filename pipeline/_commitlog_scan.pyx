# cython: language_level=3, boundscheck=False, wraparound=False
"""`pipeline.commitlog_scan.scan`, compiled: the walk from record to record in C. It takes
the walks that meet no damage (records with a known magic and a sane size, up to the end,
zeros or the BLANK filler); for any other, and for a walk that checks CRCs, it returns None
and the reference walks again, to say where and why it stopped."""

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

import numpy as np

from rmqpy.store._big_endian cimport get32

from rmqpy.store.layout import BLANK, BLANK_MAGIC, MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2, RECORD_HEAD

if BLANK.format != ">ii":
    raise ImportError("pipeline._commitlog_scan does not match store.layout's BLANK")
cdef int32_t MAGIC_V1 = MESSAGE_MAGIC_V1, MAGIC_V2 = MESSAGE_MAGIC_V2, FILLER = BLANK_MAGIC
cdef Py_ssize_t HEAD = BLANK.size, SMALLEST = RECORD_HEAD.size


def scan(buf, Py_ssize_t start, Py_ssize_t stop):
    """Record starts from `start` while a record's head fits before `stop`, or None where
    the reference is to walk (damage on the way)."""
    cdef const uint8_t[::1] view = buf
    cdef const uint8_t* src = &view[0] if view.shape[0] > 0 else NULL
    cdef Py_ssize_t size = view.shape[0], pos = start, n = 0, room = 0
    cdef int32_t total, magic
    cdef int64_t* found = NULL
    cdef int64_t* grown
    cdef int64_t[::1] out
    try:
        while pos + HEAD <= stop:
            total = get32(src + pos)
            magic = get32(src + pos + 4)
            if (magic == MAGIC_V1 or magic == MAGIC_V2) and SMALLEST < total <= size - pos:
                if n == room:
                    room = 2 * room + 1024
                    grown = <int64_t*>realloc(found, room * sizeof(int64_t))
                    if grown == NULL:
                        raise MemoryError()
                    found = grown
                found[n] = pos
                n += 1
                pos += total
                continue
            if magic == FILLER or (total == 0 and magic == 0):
                break
            return None
        positions = np.empty(n, dtype=np.int64)
        out = positions
        if n:
            memcpy(&out[0], found, n * sizeof(int64_t))
        return positions
    finally:
        free(found)
