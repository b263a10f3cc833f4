# cython: language_level=3, boundscheck=False, wraparound=False
"""`store.hot_read.gather` and `read_hot`, compiled: one pass over the consume-queue entries,
records copied straight from the mapping into the body. The same stops, skips and limits as
the reference."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy

from rmqpy.store._big_endian cimport get32, get64

from rmqpy.store.layout import (
    BLANK, CQ_PLACEHOLDER, CQ_STORE_UNIT_SIZE, MESSAGE_MAGIC_V1, GetMessageStatus,
)
from rmqpy.store.mapped_file import StoreFileError

cdef int32_t MAGIC_V1 = MESSAGE_MAGIC_V1
cdef int32_t PLACEHOLDER_SIZE = CQ_PLACEHOLDER[1]
cdef int32_t HEAD = BLANK.size
cdef Py_ssize_t UNIT = CQ_STORE_UNIT_SIZE
cdef object FOUND = int(GetMessageStatus.FOUND)
cdef object AT_END = int(GetMessageStatus.OFFSET_OVERFLOW_ONE)


cdef bytes _gather(const uint8_t* src, Py_ssize_t mapped_len, int64_t base, int64_t written,
                   const uint8_t* cq, Py_ssize_t n, tag_codes, int64_t low,
                   Py_ssize_t max_count, int64_t max_bytes, list sizes, Py_ssize_t* scanned_out):
    """The records of `n` entries at `cq` (see `gather`); their sizes appended to `sizes`."""
    cdef Py_ssize_t i, taken = 0, scanned = 0
    cdef int64_t phy, tags, total = 0, end = base + written, at
    cdef int32_t size
    cdef list starts = []
    cdef bint filtered = tag_codes is not None
    if low < base:
        low = base
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
        if at + size > mapped_len:
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
    scanned_out[0] = scanned
    return body


def gather(mapping, int64_t base, int64_t written, bytes entries, tag_codes, int64_t low,
           Py_ssize_t max_count, int64_t max_bytes):
    """`store.hot_read.gather`."""
    cdef const uint8_t[::1] view
    cdef list sizes = []
    cdef Py_ssize_t scanned = 0
    try:
        view = mapping
    except ValueError:  # closed by expiry
        return b"", sizes, 0
    if view.shape[0] == 0:
        return b"", sizes, 0
    body = _gather(&view[0], view.shape[0], base, written,
                   <const uint8_t*>PyBytes_AS_STRING(entries), PyBytes_GET_SIZE(entries) // UNIT,
                   tag_codes, low, max_count, max_bytes, sizes, &scanned)
    return body, sizes, scanned


def read_hot(cq, commitlog, int64_t offset, Py_ssize_t entries_max, tag_codes,
             Py_ssize_t max_count, int64_t max_bytes, bint memory_only):
    """`store.hot_read.read_hot`."""
    cdef list files = cq.queue.files
    if not files:
        return None
    last = files[len(files) - 1]  # (wraparound is off)
    cdef int64_t max_off = (<int64_t>last.file_from_offset + <int64_t>last.wrote_position) // UNIT
    cdef int64_t min_off = <int64_t>cq.min_logic_offset // UNIT
    if max_off == 0 or not min_off <= offset <= max_off:
        return None
    if offset == max_off:
        return AT_END, offset, min_off, max_off, b"", []
    cdef int64_t position = offset * UNIT
    cq_file = _file_at(cq.queue, files, position)
    if cq_file is None:
        return None
    cdef int64_t local = position - <int64_t>cq_file.file_from_offset
    cdef int64_t count = (<int64_t>cq_file.wrote_position - local) // UNIT
    if count > entries_max:
        count = entries_max
    if count <= 0:
        return None
    if memory_only and not _in_memory(cq_file, local):
        return False
    cdef bytes entries
    cdef Py_buffer records
    cdef list log_files = commitlog.queue.files
    if not log_files:
        return None
    try:
        entries = _recent_or_read(cq_file, local, count * UNIT)
        if PyBytes_GET_SIZE(entries) < count * UNIT:
            return None
        first = get64(<const uint8_t*>PyBytes_AS_STRING(entries))
        mapped = _file_at(commitlog.queue, log_files, first)
        if mapped is None:
            return None
        if memory_only and not _in_memory(mapped, first - <int64_t>mapped.file_from_offset):
            return False
        mm = mapped._mm  # `mapped.mapping`, without the call where there is one
        PyObject_GetBuffer(mapped.mapping if mm is None else mm, &records, PyBUF_SIMPLE)
    except (ValueError, StoreFileError):  # a file closed by expiry, or read without a mapping
        return None
    cdef list sizes = []
    cdef Py_ssize_t scanned = 0
    cdef int64_t low, log_min
    try:
        if records.len == 0:
            return None
        log_last = log_files[len(log_files) - 1]
        low = (<int64_t>log_last.file_from_offset + <int64_t>log_last.wrote_position
               - <int64_t>commitlog.hot_bytes)
        log_min = log_files[0].file_from_offset
        if low < log_min:
            low = log_min
        body = _gather(<const uint8_t*>records.buf, records.len, mapped.file_from_offset,
                       mapped.wrote_position, <const uint8_t*>PyBytes_AS_STRING(entries), count,
                       tag_codes, low, max_count, max_bytes, sizes, &scanned)
    finally:
        PyBuffer_Release(&records)
    if not sizes:
        return None
    return FOUND, offset + scanned, min_off, max_off, body, sizes


cdef bytes _recent_or_read(mapped_file, int64_t position, int64_t size):
    """`mapped_file.read(position, size)`, without the call for a file read without a
    mapping whose newest bytes hold the range (a consume queue's tail: what pulls read)."""
    cdef tuple recent
    cdef bytearray kept
    cdef int64_t at
    if mapped_file._mm is None:
        recent = mapped_file._recent
        kept = recent[1]
        at = position - <int64_t>recent[0]
        if at >= 0 and at + size <= len(kept):
            return PyBytes_FromStringAndSize(PyByteArray_AS_STRING(kept) + at, size)
    return mapped_file.read(position, size)


cdef object _file_at(queue, list files, int64_t offset):
    """`queue.find_mapped_file_by_offset(offset)` (`files` being `queue.files`)."""
    if not files:
        return None
    cdef int64_t start = files[0].file_from_offset
    if offset < start:
        return None
    cdef int64_t index = (offset - start) // <int64_t>queue.mapped_file_size
    if index >= len(files):
        return None
    return files[index]


cdef bint _in_memory(mapped_file, int64_t position) except -1:
    """`mapped_file.in_memory(position)`, without the call for what is not flushed yet."""
    if position >= <int64_t>mapped_file.flushed_position:
        return True
    return mapped_file.in_memory(position)
