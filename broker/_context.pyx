# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of `broker.context`'s `runs_of` and `by_connection`: the per-request
work between a connection's read and its processors, and between the answers and their
connections, one call per batch (a differential test holds both equal)."""

from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject

from rmqpy.broker._request_context cimport new_context

cdef object RequestContext = None  # `broker.context`'s, taken at the first call


cdef object _context_class():
    global RequestContext
    if RequestContext is None:
        from rmqpy.broker.context import RequestContext as made

        RequestContext = made
    return RequestContext


def runs_of(dict table, conn, requests, loop, double received_s):
    """`broker.context.runs_of(table, conn, requests, loop, received_s)`."""
    cls = _context_class()
    cdef list runs = []
    cdef list run = []
    cdef object entry = False  # no run yet
    cdef PyObject* found
    received = received_s
    for request in requests:
        found = PyDict_GetItem(table, request.code)
        item = None if found == NULL else <object>found
        if item is not entry:
            if run:
                runs.append((entry, run))
            entry = item
            run = []
        if item is None:
            run.append(request)
        else:
            run.append(new_context(cls, conn, request, loop, received))
    if run:
        runs.append((entry, run))
    return runs


def by_connection(items):
    """`broker.context.by_connection(items)`."""
    cdef dict by_conn = {}
    cdef PyObject* found
    cdef list pairs
    last_conn = None
    pairs = None
    for ctx, response in items:
        conn = ctx.conn
        if conn is not last_conn:
            found = PyDict_GetItem(by_conn, conn)
            if found == NULL:
                pairs = []
                PyDict_SetItem(by_conn, conn, pairs)
            else:
                pairs = <list>found
            last_conn = conn
        pairs.append((ctx.request, response))
    return by_conn
