# The compiled `ParkedPull`, for the pull lane (`broker.processors._pull`) to make and read
# without a Python call or attribute lookup.
cdef class ParkedPull:
    cdef public object ctx, topic, queue_id, offset, subscription, deadline_s, header
    cdef public object frame, conn, received_s, loop
