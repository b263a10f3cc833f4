# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twins of `store.consume_queue.encode_entries`: consume-queue entries (the
layout of `store.layout.CQ_ENTRY`, checked at import) written field by field in C; and of
`MessageStore.get_max_offset_in_queue` (`max_offset_in`), which a parked pull asks."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint32_t, uint64_t

from rmqpy.store._big_endian cimport put32, put64
from rmqpy.store._file_queue cimport files_end

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


def max_offset_in(dict table, str topic, int queue_id):
    """`MessageStore.get_max_offset_in_queue(topic, queue_id)` from the consume queues' table
    (`ConsumeQueueStore.table`): the queue's last file's end in entries, 0 for a queue not
    there."""
    cdef PyObject* queues = PyDict_GetItem(table, topic)
    if queues is NULL:
        return 0
    cdef PyObject* cq = PyDict_GetItem(<dict>queues, queue_id)
    if cq is NULL:
        return 0
    return files_end((<object>cq).queue.files) // 20
