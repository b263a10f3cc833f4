# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twins of `broker.long_polling`: `ParkedPull` (the same fields, made without a
Python `__init__` each) and `PullRequestHoldService.park` and `.on_arrivals` (the same pulls
parked, woken and kept, in the same order; a differential test holds them equal). A pull
parks and is woken once for every message a consumer keeping up receives."""

from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject


cdef class ParkedPull:
    """`long_polling.ParkedPull` (its fields declared in `_long_polling.pxd`)."""

    def __init__(self, ctx, topic, queue_id, offset, subscription, deadline_s, header,
                 frame=None, conn=None, received_s=0.0, loop=None):
        self.ctx = ctx
        self.topic = topic
        self.queue_id = queue_id
        self.offset = offset
        self.subscription = subscription
        self.deadline_s = deadline_s
        self.header = header
        self.frame = frame
        self.conn = conn
        self.received_s = received_s
        self.loop = loop

    def __repr__(self):
        return (f"ParkedPull(ctx={self.ctx!r}, topic={self.topic!r}, "
                f"queue_id={self.queue_id!r}, offset={self.offset!r}, "
                f"subscription={self.subscription!r}, deadline_s={self.deadline_s!r}, "
                f"header={self.header!r}, frame={self.frame!r}, conn={self.conn!r}, "
                f"received_s={self.received_s!r}, loop={self.loop!r})")


def park(hold, pull):
    """`PullRequestHoldService.park`."""
    topic, queue_id = pull.topic, pull.queue_id
    key = (topic, queue_id)
    cdef dict table = hold._parked
    cdef PyObject* found
    lock = hold._lock
    lock.acquire()
    try:
        found = PyDict_GetItem(table, key)
        if found == NULL:
            table[key] = [pull]
        else:
            (<list>found).append(pull)
    finally:
        lock.release()
    if hold.max_offset(topic, queue_id) > pull.offset:
        hold._wake(hold._take_where(key, lambda p: p is pull))


def on_arrivals(hold, arrivals):
    """`PullRequestHoldService.on_arrivals`."""
    cdef list woken = [], parked, rest
    cdef dict table = hold._parked
    cdef PyObject* found
    cdef Py_ssize_t i, n
    lock = hold._lock
    for arrival in arrivals:
        key = (arrival.topic, arrival.queue_id)
        if PyDict_GetItem(table, key) == NULL:
            continue
        codes, next_offset = arrival.tags_codes, arrival.next_offset
        lock.acquire()
        try:
            found = PyDict_GetItem(table, key)
            if found == NULL:
                continue
            parked = <list>found
            n = PyList_GET_SIZE(parked)
            if n == 0:
                continue
            rest = []
            for i in range(n):
                pull = <object>PyList_GET_ITEM(parked, i)
                wanted = pull.subscription.codes
                offset = pull.offset
                if next_offset < offset or (
                    next_offset > offset
                    and (wanted is None or not codes or not codes.isdisjoint(wanted))
                ):
                    woken.append(pull)
                else:
                    rest.append(pull)
            if len(rest) < n:  # (`_keep_locked`)
                if rest:
                    table[key] = rest
                else:
                    del table[key]
        finally:
            lock.release()
    if woken:
        hold.wake(woken)
