# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of `broker.metrics`' `tally_sizes`, `tally_staged`, `tally_latencies`,
`tally_pull` and `tally_answered`: the per-message and per-answer work of the broker's metrics, one call per
batch (or per pull, from the pull lane), updating the same tables the same way (a
differential test holds them equal)."""

from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython cimport array
from cpython.object cimport PyObject

from rmqpy.store._arrays cimport ints

from rmqpy.store.layout import MARK_DELAY, MARK_SHARDING_KEY, PutMessageStatus, SysFlag

cdef object PUT_OK = PutMessageStatus.PUT_OK
cdef long TRANSACTION_MASK = SysFlag.TRANSACTION_MASK
cdef long PREPARED = SysFlag.TRANSACTION_PREPARED_TYPE
cdef long DELAY_MARK = MARK_DELAY
cdef long SHARDING_MARK = MARK_SHARDING_KEY
cdef enum:
    MOST_BOUNDS = 32
cdef array.array LONGS = array.array("q")
cdef double size_bounds[MOST_BOUNDS]
cdef double latency_bounds[MOST_BOUNDS]
cdef Py_ssize_t size_count = 0, latency_count = 0
# `broker.metrics`' names, taken at the first tally (that module imports this one).
cdef tuple SIZE_BOUNDS = None, LATENCY_BOUNDS = None
cdef str NORMAL, FIFO, DELAY, TRANSACTION
cdef object Histogram = None


cdef int _take_names() except -1:
    global SIZE_BOUNDS, LATENCY_BOUNDS, NORMAL, FIFO, DELAY, TRANSACTION, Histogram
    global size_count, latency_count
    from rmqpy.broker import metrics
    if (len(metrics.MESSAGE_SIZE_BUCKETS) > MOST_BOUNDS
            or len(metrics.RPC_LATENCY_BUCKETS) > MOST_BOUNDS):
        raise ValueError("broker._metrics holds at most 32 bucket bounds")
    for i, bound in enumerate(metrics.MESSAGE_SIZE_BUCKETS):
        size_bounds[i] = bound
    for i, bound in enumerate(metrics.RPC_LATENCY_BUCKETS):
        latency_bounds[i] = bound
    size_count = len(metrics.MESSAGE_SIZE_BUCKETS)
    latency_count = len(metrics.RPC_LATENCY_BUCKETS)
    NORMAL, FIFO, DELAY, TRANSACTION = (
        metrics.NORMAL, metrics.FIFO, metrics.DELAY, metrics.TRANSACTION
    )
    Histogram = metrics.Histogram
    SIZE_BOUNDS = metrics.MESSAGE_SIZE_BUCKETS
    LATENCY_BOUNDS = metrics.RPC_LATENCY_BUCKETS
    return 0


cdef inline Py_ssize_t _bucket(const double* bounds, Py_ssize_t count, double value) noexcept:
    """`bisect_left(bounds, value)`."""
    cdef Py_ssize_t low = 0, high = count, mid
    while low < high:
        mid = (low + high) >> 1
        if bounds[mid] < value:
            low = mid + 1
        else:
            high = mid
    return low


cdef str _message_type(msg):
    """`broker.metrics.message_type`."""
    cdef long sys_flag = msg.sys_flag
    if sys_flag & TRANSACTION_MASK == PREPARED:
        return TRANSACTION
    cdef long marks = msg.marks
    if marks & DELAY_MARK:
        return DELAY
    if marks & SHARDING_MARK:
        return FIFO
    return NORMAL


cdef object _histogram(dict table, key, tuple bounds):
    cdef PyObject* found = PyDict_GetItem(table, key)
    if found != NULL and <object>found:
        return <object>found
    hist = Histogram(bounds)
    PyDict_SetItem(table, key, hist)
    return hist


def tally_sizes(dict sizes, groups, results):
    """`broker.metrics.tally_sizes`."""
    cdef Py_ssize_t n = len(groups), i, bucket
    cdef list counts
    cdef long long size, total
    if Histogram is None:
        _take_names()
    if len(results) != n:
        raise ValueError("zip() arguments differ in length")
    for i in range(n):
        result = results[i]
        if result.status is not PUT_OK:
            continue
        msgs = groups[i]
        first = msgs[0]
        hist = _histogram(sizes, (first.topic, _message_type(first)), SIZE_BOUNDS)
        counts = hist.counts
        total = 0
        for msg in msgs:
            size = len(msg.body)
            bucket = _bucket(size_bounds, size_count, <double>size)
            counts[bucket] = counts[bucket] + 1
            total += size
        hist.total = hist.total + total


def tally_staged(dict sizes, staged):
    """`broker.metrics.tally_staged`: counted per template and message type first, then
    added to each histogram once."""
    if Histogram is None:
        _take_names()
    if staged.status is not PUT_OK:
        return
    cdef list templates = staged.templates
    cdef array.array slot_column = ints(staged.slots)
    cdef int* slots = slot_column.data.as_ints
    cdef int* marks = ints(staged.marks).data.as_ints
    cdef int* body_sizes = ints(staged.body_sizes).data.as_ints
    cdef Py_ssize_t n = len(slot_column), i, bucket, slot, count = len(templates), k
    if len(staged.marks) != n or len(staged.body_sizes) != n:
        raise ValueError("zip() arguments differ in length")
    for i in range(n):
        if not 0 <= slots[i] < count:
            raise IndexError("list index out of range")
    # Kind k of template t at 2t + k (k: 1 for FIFO); its bucket counts, then its total.
    cdef Py_ssize_t buckets = size_count + 1, kinds = 2 * count
    cdef array.array tally = array.clone(LONGS, kinds * (buckets + 1), zero=True)
    cdef long long* at = tally.data.as_longlongs
    cdef int size
    for i in range(n):
        k = 2 * slots[i] + (1 if marks[i] & SHARDING_MARK else 0)
        size = body_sizes[i]
        at[k * (buckets + 1) + _bucket(size_bounds, size_count, <double>size)] += 1
        at[k * (buckets + 1) + buckets] += size
    cdef list counts
    cdef long long* row
    for k in range(kinds):
        row = at + k * (buckets + 1)
        for bucket in range(buckets):
            if row[bucket]:
                break
        else:  # no record of this template and type
            continue
        hist = _histogram(sizes, (templates[k >> 1].topic, FIFO if k & 1 else NORMAL),
                          SIZE_BOUNDS)
        counts = hist.counts
        for bucket in range(buckets):
            if row[bucket]:
                counts[bucket] = counts[bucket] + row[bucket]
        hist.total = hist.total + row[buckets]


def tally_latencies(dict rpc, answers, double now):
    """`broker.metrics.tally_latencies`."""
    cdef double latency
    cdef Py_ssize_t bucket
    cdef list counts
    if Histogram is None:
        _take_names()
    for ctx, response in answers:
        hist = _histogram(rpc, (ctx.request.code, response.code, ctx.resumed), LATENCY_BOUNDS)
        latency = now - <double>ctx.received_s + <double>ctx.held_s
        bucket = _bucket(latency_bounds, latency_count, latency)
        counts = hist.counts
        counts[bucket] = counts[bucket] + 1
        hist.total = hist.total + latency


cdef int _add_latency(dict rpc, tuple key, double latency, Py_ssize_t count) except -1:
    """`count` answers of `latency` added to `key`'s histogram (as
    `BrokerMetrics._count_latency`)."""
    hist = _histogram(rpc, key, LATENCY_BOUNDS)
    cdef list counts = hist.counts
    cdef Py_ssize_t bucket = _bucket(latency_bounds, latency_count, latency)
    counts[bucket] = counts[bucket] + count
    hist.total = hist.total + latency * count
    return 0


def tally_pull(metrics, tuple key, double latency, group, topic, queue_id, next_offset,
               Py_ssize_t messages, Py_ssize_t size):
    """`broker.metrics.tally_pull`."""
    cdef dict table
    cdef PyObject* found
    if Histogram is None:
        _take_names()
    lock = metrics._lock
    lock.acquire()
    try:
        _add_latency(metrics.rpc, key, latency, 1)
        table = metrics.pulled
        PyDict_SetItem(table, (group, topic, queue_id), next_offset)
        if messages:
            out = (topic, group)
            table = metrics.messages_out
            found = PyDict_GetItem(table, out)
            PyDict_SetItem(table, out, messages + (0 if found == NULL else <object>found))
            table = metrics.bytes_out
            found = PyDict_GetItem(table, out)
            PyDict_SetItem(table, out, size + (0 if found == NULL else <object>found))
    finally:
        lock.release()


def tally_answered(metrics, request_code, Py_ssize_t count, response_code, double latency,
                   staged):
    """`broker.metrics.tally_answered`."""
    if Histogram is None:
        _take_names()
    lock = metrics._lock
    lock.acquire()
    try:
        tally_staged(metrics.sizes, staged)
        _add_latency(metrics.rpc, (request_code, response_code, False), latency, count)
    finally:
        lock.release()

