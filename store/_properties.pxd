# Reading a record's properties text in C: the value spans of the names the store looks for
# (TAGS, KEYS, UNIQ_KEY, the legacy UNIQ_KEY, DELAY, WAIT, SHARDING_KEY, in that order: see
# `scanned_names`), split as `store.message.decode_properties` splits, and the TAGS hash code.
# Shared by the compiled modules that read properties.
from libc.string cimport memcmp

cdef enum:
    NAMES = 7
    TAGS_AT = 0
    KEYS_AT = 1
    UNIQ_KEY_AT = 2
    LEGACY_UNIQ_KEY_AT = 3
    DELAY_AT = 4
    WAIT_AT = 5
    SHARDING_KEY_AT = 6


cdef struct Span:
    Py_ssize_t start
    Py_ssize_t end  # -1: not found


cdef inline tuple scanned_names(MessageConst):
    """The names `scan` looks for, encoded, in the order of its spans."""
    return (
        MessageConst.TAGS.encode(), MessageConst.KEYS.encode(), MessageConst.UNIQ_KEY.encode(),
        MessageConst.LEGACY_UNIQ_KEY.encode(), MessageConst.DELAY.encode(),
        MessageConst.WAIT.encode(), MessageConst.SHARDING_KEY.encode(),
    )


cdef inline bint _named(const char* item, Py_ssize_t length, bytes name) noexcept:
    """The item (from its start to its name's end) is called `name`."""
    cdef Py_ssize_t n = len(name)
    return length == n and memcmp(item, <const char*>name, n) == 0


cdef inline void scan(const char* text, Py_ssize_t size, tuple wanted, char item_end,
                      char name_end, Span* found) noexcept:
    """The value span of the last item of each wanted name: items end at `item_end`, a name
    ends at the first `name_end`, items of fewer than three bytes are skipped."""
    cdef Py_ssize_t start = 0, end, cut, which
    for which in range(NAMES):
        found[which].start = 0
        found[which].end = -1
    while start < size:
        end = start
        while end < size and text[end] != item_end:
            end += 1
        if end - start >= 3:
            cut = start
            while cut < end and text[cut] != name_end:
                cut += 1
            if cut < end:
                for which in range(NAMES):
                    if _named(text + start, cut - start, <bytes>wanted[which]):
                        found[which].start = cut + 1
                        found[which].end = end
                        break
        start = end + 1


cdef inline bint ascii_tags_code(const char* text, Span span, int* out) noexcept:
    """Java's String.hashCode of the span (0 when empty or missing) when it is ASCII; False
    for anything else (the caller asks `store.message.tags_code`)."""
    cdef Py_ssize_t i
    cdef unsigned int h = 0
    cdef unsigned char c
    if span.end > span.start:
        for i in range(span.start, span.end):
            c = <unsigned char>text[i]
            if c >= 0x80:
                return False
            h = h * 31 + c
    out[0] = <int>h
    return True


cdef inline bint is_false(const char* text, Span span) noexcept:
    """The span is exactly `false` (WAIT false: the sender does not wait for the flush)."""
    return span.end - span.start == 5 and memcmp(text + span.start, b"false", 5) == 0
