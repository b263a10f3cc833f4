# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twins of `CommitLog.validate_groups` and `CommitLog.place_singles`
(`store.commitlog`): the same groups found valid (the reference's own `_refused` says why
one is not), and the same sends of one message placed in the same segment, with the same
queue offsets, results and SYNC_FLUSH waits; the general loop of `_append_locked` takes over
where the reference's would."""

from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject

from rmqpy.store.layout import END_FILE_MIN_BLANK_LENGTH, MARK_NO_WAIT as _MARK_NO_WAIT
from rmqpy.store.layout import MAX_PROPERTIES_LENGTH, PutMessageStatus

cdef object PUT_OK = PutMessageStatus.PUT_OK
cdef int MARK_NO_WAIT = _MARK_NO_WAIT
cdef long long BLANK_MIN = END_FILE_MIN_BLANK_LENGTH
cdef object new = object.__new__
cdef object result_class = None


cdef object _result_class():
    global result_class
    if result_class is None:
        from rmqpy.store.commitlog import PutMessageResult

        result_class = PutMessageResult
    return result_class


cdef Py_ssize_t MAX_PROPS = MAX_PROPERTIES_LENGTH


def validate_groups(commitlog, groups):
    """`CommitLog.validate_groups(commitlog, groups)`."""
    cdef list results = []
    valid_topics = commitlog._valid_topics
    cdef Py_ssize_t max_size = commitlog.config.max_message_size
    cdef bint ok
    for group in groups:
        if not group:
            results.append(commitlog._validate(group))
            continue
        queue_key = group[0].queue_key
        ok = True
        for msg in group:
            if (
                msg.topic not in valid_topics
                or msg.queue_key != queue_key
                or msg.queue_id < 0
                or len(msg.body) > max_size
                or len(msg.props_bytes) > MAX_PROPS
            ):
                ok = False
                break
        results.append(None if ok else commitlog._refused(group))
    return results


def place_singles(commitlog, groups, Py_ssize_t index, list results, seg,
                  long long store_ts, bint sync):
    """`CommitLog.place_singles(commitlog, groups, index, results, seg, store_ts, sync)`."""
    host = commitlog.store_host
    cdef bint store_v6 = host.is_v6
    cdef long long limit = commitlog.file_size - BLANK_MIN
    cdef dict table = commitlog.topic_queue_table
    cdef Py_ssize_t count = len(groups)
    cdef long long size = seg.size, capacity = seg.capacity, start = seg.start
    cdef long long total, queue_offset
    cdef dict old_offsets = seg.old_offsets
    cdef list queue_offsets = seg.queue_offsets
    cdef list seg_results = seg.results
    cdef list seg_groups = seg.groups
    cdef list waiting = seg.waiting
    cdef PyObject* raw
    cdef bint queued
    Result = _result_class()
    try:
        while index < count:
            if <object>PyList_GET_ITEM(results, index) is not None:
                index += 1
                continue
            group = groups[index]
            if len(group) != 1:
                return index
            first = group[0]
            total = first.lengths[store_v6]
            if total > limit or size + total > capacity:
                return index
            key = first.queue_key
            raw = PyDict_GetItem(table, key)
            if key not in old_offsets:
                old_offsets[key] = <object>raw if raw != NULL else None
            queue_offset = <long long><object>raw if raw != NULL and <object>raw else 0
            queued = first.queued
            queue_offsets.append(queue_offset if queued else 0)
            table[key] = queue_offset + queued
            phy = start + size
            size += total
            result = new(Result)
            result.status = PUT_OK
            result.wrote_offset = phy
            result.wrote_bytes = total
            result.queue_offset = queue_offset
            result.msg_num = 1
            result.store_timestamp = store_ts
            result.record_offsets = [phy]
            result.store_host = host
            result.remark = ""
            results[index] = result
            seg_results.append(result)
            seg_groups.append(group)
            if sync and not (<int>first.marks & MARK_NO_WAIT):
                waiting.append(result)
            index += 1
        return index
    finally:
        seg.size = size
