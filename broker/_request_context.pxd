# A request's context (`broker.context.RequestContext`) made in C, for the compiled modules
# that make one per request: without its `__init__`, every field set here.


cdef inline object new_context(object cls, object conn, object request, object loop,
                               object received_s):
    """`cls(conn, request, loop, received_s)`, `cls` being `RequestContext`."""
    ctx = cls.__new__(cls)
    ctx.conn = conn
    ctx.request = request
    ctx.loop = loop
    ctx.received_s = received_s
    ctx.resumed = False
    ctx.held_s = 0.0
    return ctx
