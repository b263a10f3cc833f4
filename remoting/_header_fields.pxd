# A request's header read straight from its frame, for the lanes that take requests from a
# read's bytes before the decoder makes commands of them (`broker.processors._send`,
# `_pull`): where the ext fields a lane wants lie, and the opaque, for a request of one code
# in a header of the shape the frame decoder reads in one pass. Anything else is the
# decoder's to read (or refuse), so these readers say False to it.
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int32_t
from libc.string cimport memcmp

from rmqpy.remoting._json_text cimport (
    J_CODE, J_EXT, J_FLAG, J_LANGUAGE, J_OPAQUE, J_REMARK, J_SERIALIZE, J_VERSION, blank,
    header_field, json_int, json_unescape,
)
from rmqpy.remoting._wire cimport is_utf8
from rmqpy.remoting.headers._numbers cimport ascii_integer_at
from rmqpy.store._big_endian cimport get32


cdef inline bint field_number(const unsigned char* base, Py_ssize_t at, Py_ssize_t size,
                              long long low, long long high, long long* out) noexcept:
    """A field's value written plainly in decimal (an optional minus sign, 1 to 18 digits)
    within [low, high], `size` bytes at `base + at` (`at` -1: the field is missing)."""
    return at >= 0 and ascii_integer_at(base + at, size, out) and low <= out[0] <= high


cdef inline bint same_bytes(bytes known, const unsigned char* at, Py_ssize_t size) noexcept:
    """Whether `known` (None: never) holds the `size` bytes at `at`: a key a lane wants, or
    the text the last frame gave a field (made again only when it differs)."""
    return known is not None and _same_text(<PyObject*>known, at, size)


cdef inline bint _same_text(PyObject* known, const unsigned char* at, Py_ssize_t size) noexcept:
    """`same_bytes` for a bytes object held without a reference (a tuple's item): the
    length first, then the first byte (most keys differ there), then the rest."""
    cdef const char* text
    if PyBytes_GET_SIZE(<object>known) != size:
        return False
    if size == 0:
        return True
    text = PyBytes_AS_STRING(<object>known)
    return <unsigned char>text[0] == at[0] and (
        size == 1 or memcmp(text + 1, at + 1, size - 1) == 0
    )


cdef inline void found(tuple keys, const unsigned char* key, Py_ssize_t key_len,
                       Py_ssize_t value_at, Py_ssize_t value_len, Py_ssize_t* at,
                       Py_ssize_t* lengths) noexcept:
    """An ext field's value located, where its key is one of `keys` (UTF-8 bytes; a key
    given twice: the last, as a dict keeps it)."""
    cdef Py_ssize_t which
    for which in range(PyTuple_GET_SIZE(keys)):
        if _same_text(PyTuple_GET_ITEM(keys, which), key, key_len):
            at[which] = value_at
            lengths[which] = value_len
            return


cdef inline bint binary_fields(const unsigned char* h, Py_ssize_t header_len,
                               Py_ssize_t fixed_size, int code, tuple keys, Py_ssize_t* at,
                               Py_ssize_t* lengths, int* opaque) except -1:
    """A request of `code` with a binary header (its fixed part `fixed_size` bytes, flag 0,
    no remark): the spans of its fields named in `keys` in `at`/`lengths` (within `h`; the
    caller set `at` to -1) and its opaque; False for anything else, or anything the decoder
    would refuse (a bad length, text that is not UTF-8)."""
    cdef Py_ssize_t pos, end, key_len, value_len
    if header_len < fixed_size + 8:
        return False
    # code, language, version, opaque, flag; then no remark, and the ext fields
    if ((<int>h[0] << 8) | h[1]) != code or get32(h + 9) != 0:
        return False
    if get32(h + fixed_size) != 0 or get32(h + fixed_size + 4) != header_len - fixed_size - 8:
        return False
    opaque[0] = <int32_t>get32(h + 5)
    pos = fixed_size + 8
    end = header_len
    while pos < end:
        if pos + 2 > end:
            return False
        key_len = (<Py_ssize_t>h[pos] << 8) | h[pos + 1]
        if pos + 2 + key_len + 4 > end:
            return False
        value_len = <int32_t>get32(h + pos + 2 + key_len)
        if value_len < 0 or pos + 6 + key_len + value_len > end:
            return False
        if not is_utf8(<const char*>h + pos + 2, key_len) or not is_utf8(
            <const char*>h + pos + 6 + key_len, value_len
        ):
            return False
        found(keys, h + pos + 2, key_len, pos + 6 + key_len, value_len, at, lengths)
        pos += 6 + key_len + value_len
    return True


cdef inline bint json_fields(const unsigned char* h, Py_ssize_t end, int code, tuple keys,
                             Py_ssize_t* at, Py_ssize_t* lengths, int* opaque,
                             unsigned char* out) except -1:
    """A request of `code` with a JSON header of the shape the frame decoder reads in one
    pass (as Java's and our clients write it: the header's fields once each, text ext
    fields), with flag 0: its ext fields' values unescaped into `out` (room for `end`
    bytes), the spans of those named in `keys` in `at`/`lengths` (within `out`; the caller
    set `at` to -1), and its opaque (0 where it has none, as the decoder reads it); False
    for anything else (which the decoder then reads, or refuses)."""
    cdef Py_ssize_t pos = blank(h, 0, end), name_at, value_len, key_len, key_at, used = 0
    cdef int seen = 0, field
    cdef long long number
    opaque[0] = 0
    if pos >= end or h[pos] != 123:  # "{"
        return False
    pos = blank(h, pos + 1, end)
    while pos < end and h[pos] == 34:
        name_at = pos + 1
        while pos + 1 < end and h[pos + 1] != 34 and h[pos + 1] != 92:
            pos += 1
        if pos + 1 >= end or h[pos + 1] != 34:
            return False
        field = header_field(h + name_at, pos + 1 - name_at)
        if field == 0 or seen & field:
            return False
        seen |= field
        pos = blank(h, pos + 2, end)
        if pos >= end or h[pos] != 58:  # ":"
            return False
        pos = blank(h, pos + 1, end)
        if pos >= end:
            return False
        if field & (J_CODE | J_OPAQUE | J_FLAG | J_VERSION):
            if not json_int(h, &pos, end, &number):
                return False
            if (field == J_CODE and number != code) or (
                field == J_FLAG and number != 0
            ):
                return False
            if field == J_OPAQUE:
                opaque[0] = <int>number
        elif field == J_EXT and h[pos] == 123:
            pos = blank(h, pos + 1, end)
            if pos < end and h[pos] == 125:  # "}"
                pos += 1
            else:
                while True:
                    if pos >= end or h[pos] != 34:
                        return False
                    key_len = json_unescape(h, &pos, end, out + used)
                    if key_len < 0 or not is_utf8(<const char*>out + used, key_len):
                        return False
                    key_at = used
                    used += key_len
                    pos = blank(h, pos, end)
                    if pos >= end or h[pos] != 58:
                        return False
                    pos = blank(h, pos + 1, end)
                    if pos >= end or h[pos] != 34:
                        return False
                    value_len = json_unescape(h, &pos, end, out + used)
                    if value_len < 0 or not is_utf8(<const char*>out + used, value_len):
                        return False
                    found(keys, out + key_at, key_len, used, value_len, at, lengths)
                    used += value_len
                    pos = blank(h, pos, end)
                    if pos < end and h[pos] == 44:  # ","
                        pos = blank(h, pos + 1, end)
                        continue
                    if pos < end and h[pos] == 125:
                        pos += 1
                        break
                    return False
        elif field == J_REMARK and end - pos >= 4 and memcmp(h + pos, b"null", 4) == 0:
            pos += 4
        elif h[pos] == 34 and field & (J_LANGUAGE | J_REMARK | J_SERIALIZE):
            value_len = json_unescape(h, &pos, end, out + used)  # read, then left
            if value_len < 0 or not is_utf8(<const char*>out + used, value_len):
                return False
        else:
            return False  # (extFields null: no fields; the lanes want some)
        pos = blank(h, pos, end)
        if pos < end and h[pos] == 44:
            pos = blank(h, pos + 1, end)
            continue
        if pos < end and h[pos] == 125:
            return blank(h, pos + 1, end) == end and seen & J_CODE != 0
        return False
    return False
