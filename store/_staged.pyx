# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twins of `store.staged`: `place_staged` (the same places, the same bytes
written into the records, the same columns and the same old offsets, with the queue table
read and written once per queue instead of once per record), `add_staged`,
`dispatch_staged` (a dispatch round of staged puts in one call: the same consume-queue
bytes, index keys, arrivals and counts as the reference's round through columns), and
`run_rounds` (`ReputService._rounds`, its usual rounds taken without a Python call)."""

from cpython cimport array
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy

from rmqpy.store._arrays cimport ints, longs
from rmqpy.store._big_endian cimport get32, get64, put32, put64
from rmqpy.store._file_queue cimport files_end

from rmqpy.store.layout import (
    CQ_STORE_UNIT_SIZE, HOST_V4, HOST_V6, RECORD_HEAD, RECORD_HEAD_OFFSETS,
)
from rmqpy.store.mapped_file import RECENT_BYTES, RECENT_SLACK

if CQ_STORE_UNIT_SIZE != 20:
    raise ImportError("store._staged writes consume-queue entries of 20 bytes")

cdef Py_ssize_t QUEUE_OFFSET_AT = RECORD_HEAD_OFFSETS["queue_offset"]
cdef Py_ssize_t PHY_AT = RECORD_HEAD_OFFSETS["phy"]
cdef Py_ssize_t STORE_TS_V4_AT = RECORD_HEAD.size + HOST_V4.size
cdef Py_ssize_t STORE_TS_V6_AT = RECORD_HEAD.size + HOST_V6.size
cdef Py_ssize_t RECORD_MIN = STORE_TS_V6_AT + 8
cdef Py_ssize_t RECENT = RECENT_BYTES, SLACK = RECENT_SLACK
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
        _add_keys(key_topics, key_names, key_phys, key_stamps, topics[slot], phy, stamp,
                  uniq_keys[i], keys[i])
    work.records = work.records + n
    work.last_store_timestamp = stamp


cdef int _add_keys(list topics, list names, list phys, list stamps, topic, phy, stamp,
                   uniq, text) except -1:
    """A record's index keys (`DispatchColumns.add_keys`): its UNIQ_KEY, then each of its
    space-separated KEYS."""
    if uniq:
        names.append(uniq)
        topics.append(topic)
        phys.append(phy)
        stamps.append(stamp)
    if text:
        for name in (<str>text).split(" "):
            if name:
                names.append(name)
                topics.append(topic)
                phys.append(phy)
                stamps.append(stamp)
    return 0


cdef object _arrival = None  # store.dispatch.Arrival, looked up on first use


def dispatch_staged(reput, list segments):
    """`dispatch_staged(reput, segments)`: the round in one call. Entries are gathered per
    queue straight into their encoded bytes (no columns object); a queue whose entries
    continue its last file and fit it is appended in one write, anything else goes
    through `ConsumeQueue.put_entries` (`append_run` says which), as the reference's round
    does."""
    global _arrival
    cdef Py_ssize_t n_seg = len(segments), s, i, n, q, nq = 0, total = 0, slot, at
    cdef Py_ssize_t count_templates
    cdef list per_segment = []  # each segment's template -> queue index
    cdef dict queue_index = {}
    cdef list q_topic = [], q_id = []
    cdef array.array slot_queue
    cdef PyObject* raw
    for s in range(n_seg):
        staged = (<object>segments[s]).staged
        templates = staged.templates
        slot_queue = array.clone(array.array("i"), len(templates), zero=True)
        for slot in range(len(templates)):
            template = templates[slot]
            key = template.queue_key
            raw = PyDict_GetItem(queue_index, key)
            if raw == NULL:
                queue_index[key] = nq
                slot_queue.data.as_ints[slot] = nq
                q_topic.append(template.topic)
                q_id.append(template.queue_id)
                nq += 1
            else:
                slot_queue.data.as_ints[slot] = <object>raw
        per_segment.append(slot_queue)
        total += len(staged.sizes)
    # Per queue: where its entries start in `entries`, how many so far, its first and
    # last queue offsets, the end of its first record, the last tag code put in its set.
    cdef array.array state = array.clone(LONGS, 6 * nq, zero=True)
    cdef long long* start = state.data.as_longlongs
    cdef long long* count = start + nq
    cdef long long* first_qo = start + 2 * nq
    cdef long long* last_qo = start + 3 * nq
    cdef long long* first_end = start + 4 * nq
    cdef long long* last_tag = start + 5 * nq
    cdef array.array qos = array.clone(LONGS, total, zero=False)
    entries = PyBytes_FromStringAndSize(NULL, total * 20)
    cdef unsigned char* out = <unsigned char*>PyBytes_AS_STRING(entries)
    # Entries per queue in record order: first count them.
    cdef int* slots
    cdef int* sizes
    cdef long long* tags
    cdef long long* phys
    cdef long long* queue_offsets
    cdef int* queue_of
    for s in range(n_seg):  # (a segment's columns are checked as the reference does)
        staged = (<object>segments[s]).staged
        slot_column = ints(staged.slots)
        slots = (<array.array>slot_column).data.as_ints
        queue_of = (<array.array>per_segment[s]).data.as_ints
        n = len(slot_column)
        if not (len(staged.sizes) == len(staged.tags) == len(staged.phys)
                == len(staged.queue_offsets) == len(staged.uniq_keys) == len(staged.keys) == n):
            raise ValueError("zip() arguments differ in length")
        count_templates = len(staged.templates)
        for i in range(n):
            if not 0 <= slots[i] < count_templates:
                raise IndexError("list index out of range")
            count[queue_of[slots[i]]] += 1
    at = 0
    for q in range(nq):
        start[q] = at
        at += count[q]
        count[q] = 0
    listeners = reput.listeners
    cdef list q_tags = [set() for q in range(nq)] if listeners else None
    index = reput.index
    cdef list key_topics = [], key_names = [], key_phys = [], key_stamps = []
    cdef list uniq_keys, keys
    cdef long long phy, k
    stamp = reput.last_store_timestamp
    records = 0
    for s in range(n_seg):
        staged = (<object>segments[s]).staged
        slot_column = ints(staged.slots)
        slots = (<array.array>slot_column).data.as_ints
        sizes = ints(staged.sizes).data.as_ints
        tags = longs(staged.tags).data.as_longlongs
        phys = longs(staged.phys).data.as_longlongs
        queue_offsets = longs(staged.queue_offsets).data.as_longlongs
        uniq_keys = staged.uniq_keys
        keys = staged.keys
        n = len(slot_column)
        queue_of = (<array.array>per_segment[s]).data.as_ints
        stamp = staged.store_timestamp
        for i in range(n):
            q = queue_of[slots[i]]
            k = start[q] + count[q]
            if count[q] == 0:
                first_qo[q] = queue_offsets[i]
                first_end[q] = phys[i] + sizes[i]
            last_qo[q] = queue_offsets[i]
            count[q] += 1
            qos.data.as_longlongs[k] = queue_offsets[i]
            phy = phys[i]
            put64(put32(put64(out + k * 20, <uint64_t>phy), <uint32_t>sizes[i]),
                  <uint64_t>tags[i])
            if q_tags is not None and (count[q] == 1 or tags[i] != last_tag[q]):
                (<set>q_tags[q]).add(tags[i])  # (a queue's records mostly share one tag)
                last_tag[q] = tags[i]
            if index is not None:
                _add_keys(key_topics, key_names, key_phys, key_stamps, q_topic[q], phy, stamp,
                          uniq_keys[i], keys[i])
        records += n
    # The queues, as `ConsumeQueue.put_columns` writes them.
    consume_queues = reput.consume_queues
    cdef list arrivals = []
    cdef long long c
    dispatched = 0
    if listeners and _arrival is None:
        from rmqpy.store.dispatch import Arrival
        _arrival = Arrival
    table = consume_queues.table
    for q in range(nq):
        c = count[q]
        if c == 0:
            continue  # a template none of the records was made from
        queues = table.get(q_topic[q])  # `find`, without the call
        cq = None if queues is None else queues.get(q_id[q])
        if cq is None:
            cq = consume_queues.find_or_create(q_topic[q], q_id[q])
        k = start[q] + c - 1  # the queue's newest entry
        if _append_run(cq, first_qo[q], last_qo[q], c, first_end[q],
                       get64(out + k * 20) + get32(out + k * 20 + 8),
                       entries[start[q] * 20:(start[q] + c) * 20]):
            dispatched += c
        else:
            dispatched += cq.put_entries(_entries(entries, qos, start[q], c))
        if listeners:
            arrivals.append(_arrival(q_topic[q], q_id[q], _max_offset_in_queue(cq),
                                     frozenset(q_tags[q]), stamp))
    reput.dispatched_entries += dispatched
    reput.end_round((key_topics, key_names, key_phys, key_stamps), stamp,
                    (<object>segments[n_seg - 1]).end, arrivals)
    return records


def run_rounds(reput, long long chunk_bytes):
    """`reput._rounds()`: rounds until dispatch is caught up, the records dispatched. The
    usual round (segments the commitlog handed over from where dispatch is, their bytes
    written, all of staged puts) is taken here as `_dispatch_written` takes it; any other
    through `reput._reput_once`, and so is a round of segments not all staged
    (`_dispatch_segments`)."""
    commitlog = reput.commitlog
    cdef long long total = 0, n, start
    while True:
        written = commitlog.written
        start = commitlog.dispatched_offset
        if written and <long long>(<object>written[0]).start == start:
            n = _dispatch_written(reput, written, start, chunk_bytes)
        else:
            # Caught up, as `_reput_once` finds it (nothing handed over, none past the end).
            if not written and start >= files_end(commitlog.queue.files):
                return total
            n = reput._reput_once()
        if n < 0:
            return total
        total += n


cdef long long _dispatch_written(reput, written, long long cursor,
                                 long long budget) except -2:
    """`reput._dispatch_written()`, `cursor` where dispatch is."""
    cdef list segments = []
    cdef bint staged = True
    while written and budget > 0:
        seg = written[0]
        if <long long>seg.start != cursor or not seg.done:
            break
        written.popleft()
        segments.append(seg)
        budget -= <long long>seg.end - <long long>seg.start
        cursor = seg.end
        if seg.staged is None:
            staged = False
    if not segments:
        return -1
    if not staged:
        return reput._dispatch_segments(segments, cursor)
    records = dispatch_staged(reput, segments)
    reput.records_handed_over += records
    return records


cdef bint _append_run(cq, long long first_offset, long long last_offset, long long count,
                      long long first_end, long long last_end, bytes entries) except -1:
    """`cq.append_run(...)`: its tests made on the queue's last file without a call each."""
    cdef list files = cq.queue.files
    if not files:
        return False
    last = files[len(files) - 1]
    cdef long long wrote = last.wrote_position
    if (last_offset - first_offset != count - 1
            or first_offset * 20 != <long long>last.file_from_offset + wrote
            or <long long>last.file_size - wrote < count * 20
            or first_end <= <long long>cq.max_physic_offset):
        return False
    if last._append_at:
        _append_mapped(last, wrote, entries)
    else:
        last.append(entries)  # (the first append maps the file, where it can be)
    cq.max_physic_offset = last_end
    return True


cdef int _append_mapped(last, long long wrote, bytes entries) except -1:
    """`last.append(entries)` for a file mapped for appends: the same bytes stored, the
    same newest bytes kept, the same positions."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(entries), size
    memcpy(<char*><uintptr_t>last._append_at + wrote, PyBytes_AS_STRING(entries), n)
    cdef tuple recent
    cdef bint follows
    if last._mm is None:  # (`_keep_recent`)
        recent = last._recent
        kept = recent[1]
        size = len(kept)
        follows = <long long>recent[0] + size == wrote
        if follows and size + n <= RECENT + SLACK:
            PyByteArray_Resize(kept, size + n)  # (`kept += entries`, in place)
            memcpy(PyByteArray_AS_STRING(kept) + size, PyBytes_AS_STRING(entries), n)
        else:
            kept = (kept if follows else b"") + entries
            size = len(kept)
            kept = bytearray(kept[size - RECENT:] if size > RECENT else kept)
            last._recent = (wrote + n - len(kept), kept)
    last.wrote_position = wrote + n
    if wrote + n == <long long>last.file_size:
        last._unmap_appends()  # full: no more appends
    return 0


cdef object _max_offset_in_queue(cq):
    """`cq.max_offset_in_queue()`."""
    return files_end(cq.queue.files) // 20


cdef list _entries(bytes entries, array.array qos, long long first, long long count):
    """One queue's gathered entries as `ConsumeQueue.put_entries` takes them."""
    cdef const unsigned char* at = <const unsigned char*>PyBytes_AS_STRING(entries)
    cdef long long k
    cdef list out = []
    for k in range(first, first + count):
        out.append((qos.data.as_longlongs[k], get64(at + k * 20), get32(at + k * 20 + 8),
                    get64(at + k * 20 + 12)))
    return out
