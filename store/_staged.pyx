# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of `place_staged` (`store.staged`): the same places, the same bytes
written into the records, the same columns and the same old offsets, with the queue table
read and written once per queue instead of once per record."""

from cpython cimport array
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from libc.stdint cimport uint64_t

from rmqpy.store._arrays cimport ints, longs
from rmqpy.store._big_endian cimport put64

from rmqpy.store.layout import HOST_V4, HOST_V6, RECORD_HEAD, RECORD_HEAD_OFFSETS

cdef Py_ssize_t QUEUE_OFFSET_AT = RECORD_HEAD_OFFSETS["queue_offset"]
cdef Py_ssize_t PHY_AT = RECORD_HEAD_OFFSETS["phy"]
cdef Py_ssize_t STORE_TS_V4_AT = RECORD_HEAD.size + HOST_V4.size
cdef Py_ssize_t STORE_TS_V6_AT = RECORD_HEAD.size + HOST_V6.size
cdef Py_ssize_t RECORD_MIN = STORE_TS_V6_AT + 8
cdef array.array LONGS = array.array("q")


def place_staged(dict table, staged, long long start, long long store_timestamp):
    """`place_staged(table, staged, start, store_timestamp)`."""
    cdef bytearray data = staged.data
    cdef list templates = staged.templates
    cdef int* slots = ints(staged.slots).data.as_ints
    cdef array.array size_column = ints(staged.sizes)
    cdef int* sizes = size_column.data.as_ints
    cdef Py_ssize_t n = len(size_column), count = len(templates), i, pos = 0, slot
    cdef Py_ssize_t total = len(data)
    cdef long long sum_sizes = 0
    cdef bint fits = len(staged.slots) == n
    if fits:
        for i in range(n):
            sum_sizes += sizes[i]
            if not 0 <= slots[i] < count or sizes[i] < RECORD_MIN:
                fits = False
    if not fits or sum_sizes != total:
        raise ValueError("staged records do not match their columns")
    # Each template's queue (templates may share one) and where its store time goes.
    cdef dict queue_index = {}
    cdef list keys = []
    cdef array.array queue_of = array.clone(array.array("i"), count, zero=True)
    cdef array.array ts_at = array.clone(array.array("i"), count, zero=True)
    cdef PyObject* raw
    for slot in range(count):
        template = templates[slot]
        key = template.queue_key
        raw = PyDict_GetItem(queue_index, key)
        if raw == NULL:
            queue_index[key] = len(keys)
            queue_of.data.as_ints[slot] = len(keys)
            keys.append(key)
        else:
            queue_of.data.as_ints[slot] = <object>raw
        ts_at.data.as_ints[slot] = STORE_TS_V6_AT if template.born_host.is_v6 else STORE_TS_V4_AT
    cdef Py_ssize_t queues = len(keys), q
    cdef array.array next_offset = array.clone(LONGS, queues, zero=True)
    cdef list before = []
    cdef array.array used = array.clone(array.array("i"), queues, zero=True)
    for q in range(queues):
        current = table.get(keys[q])
        before.append(current)
        next_offset.data.as_longlongs[q] = current or 0
    cdef array.array phys = array.clone(LONGS, n, zero=False)
    cdef array.array queue_offsets = array.clone(LONGS, n, zero=False)
    cdef unsigned char* at = <unsigned char*><char*>data
    cdef long long queue_offset, phy
    for i in range(n):
        slot = slots[i]
        q = queue_of.data.as_ints[slot]
        used.data.as_ints[q] = 1
        queue_offset = next_offset.data.as_longlongs[q]
        next_offset.data.as_longlongs[q] = queue_offset + 1
        phy = start + pos
        put64(at + pos + QUEUE_OFFSET_AT, <uint64_t>queue_offset)
        put64(at + pos + PHY_AT, <uint64_t>phy)
        put64(at + pos + ts_at.data.as_ints[slot], <uint64_t>store_timestamp)
        phys.data.as_longlongs[i] = phy
        queue_offsets.data.as_longlongs[i] = queue_offset
        pos += sizes[i]
    cdef dict old = {}
    for q in range(queues):
        if used.data.as_ints[q]:
            old[keys[q]] = before[q]
            table[keys[q]] = next_offset.data.as_longlongs[q]
    staged.phys = phys
    staged.queue_offsets = queue_offsets
    staged.store_timestamp = store_timestamp
    return old


def add_staged(work, staged):
    """`add_staged(work, staged)`."""
    cdef list templates = staged.templates
    cdef array.array slot_column = ints(staged.slots)
    cdef int* slots = slot_column.data.as_ints
    cdef int* sizes = ints(staged.sizes).data.as_ints
    cdef long long* tags = longs(staged.tags).data.as_longlongs
    cdef long long* phys = longs(staged.phys).data.as_longlongs
    cdef long long* queue_offsets = longs(staged.queue_offsets).data.as_longlongs
    cdef list uniq_keys = staged.uniq_keys
    cdef list keys = staged.keys
    cdef Py_ssize_t n = len(slot_column), i, slot, count = len(templates)
    if not (len(staged.sizes) == len(staged.tags) == len(staged.phys)
            == len(staged.queue_offsets) == len(uniq_keys) == len(keys) == n):
        raise ValueError("zip() arguments differ in length")
    cdef list offset_lists = [], phy_lists = [], size_lists = [], tag_lists = [], topics = []
    for template in templates:
        cols = work.queue(template.queue_key, template.topic, template.queue_id)
        offset_lists.append(cols.queue_offsets)
        phy_lists.append(cols.phys)
        size_lists.append(cols.sizes)
        tag_lists.append(cols.tags)
        topics.append(template.topic)
    cdef list key_topics = work.key_topics, key_names = work.key_names
    cdef list key_phys = work.key_phys, key_stamps = work.key_stamps
    stamp = staged.store_timestamp
    for i in range(n):
        slot = slots[i]
        if not 0 <= slot < count:
            raise IndexError("list index out of range")
        phy = phys[i]
        (<list>offset_lists[slot]).append(queue_offsets[i])
        (<list>phy_lists[slot]).append(phy)
        (<list>size_lists[slot]).append(sizes[i])
        (<list>tag_lists[slot]).append(tags[i])
        topic = topics[slot]
        uniq = uniq_keys[i]
        if uniq:
            key_names.append(uniq)
            key_topics.append(topic)
            key_phys.append(phy)
            key_stamps.append(stamp)
        text = keys[i]
        if text:
            for name in (<str>text).split(" "):
                if name:
                    key_names.append(name)
                    key_topics.append(topic)
                    key_phys.append(phy)
                    key_stamps.append(stamp)
    work.records = work.records + n
    work.last_store_timestamp = stamp
