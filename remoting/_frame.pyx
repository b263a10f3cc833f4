# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of `rmqpy.remoting.frame`'s `decode_frames` and `encode_frames`, with the
ROCKETMQ binary header (`remoting.header_codec._decode_binary` / `_encode_binary`) in C.
JSON and msgpack headers go through the reference's `decode_header` / `encode_header`.
Every result, error and message is the reference's: a differential test holds them equal.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, uint8_t, uint16_t, uint32_t
from libc.string cimport memcmp, memcpy

from rmqpy.remoting._json_text cimport (
    J_CODE, J_EXT, J_FLAG, J_LANGUAGE, J_OPAQUE, J_REMARK, J_SERIALIZE, J_VERSION,
    blank as _blank, header_field, json_int as _json_int, json_unescape,
)
from rmqpy.remoting._wire cimport put_binary_fixed, put_frame_prefix

from rmqpy.remoting.codes import SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import LocalProtocolError, RemoteProtocolError
from orjson import dumps as orjson_dumps, loads as orjson_loads

from rmqpy.remoting.header_codec import (
    _BINARY_KEYS,
    _LANGUAGE_BY_CODE,
    _LANGUAGE_BY_NAME,
    _binary_key,
    _language,
    decode_header,
)
from rmqpy.remoting.wire import BINARY_FIXED, FRAME_PREFIX, MAX_FRAME_LENGTH, MAX_HEADER_LENGTH

# The layout is `remoting.wire`'s; these are checked against it at import.
cdef enum:
    PREFIX_SIZE = 8
    FIXED_SIZE = 13
if FRAME_PREFIX.size != PREFIX_SIZE or BINARY_FIXED.size != FIXED_SIZE:
    raise ImportError("remoting._frame does not match remoting.wire")

cdef dict BINARY_KEYS = _BINARY_KEYS  # the reference's cache of encoded keys, shared
cdef object ROCKETMQ = SerializeType.ROCKETMQ
cdef int ROCKETMQ_KIND = int(SerializeType.ROCKETMQ)
cdef int JSON_KIND = int(SerializeType.JSON)
cdef long long MAX_FRAME = MAX_FRAME_LENGTH
cdef uint32_t HEADER_MASK = MAX_HEADER_LENGTH


cdef object _frame = None


cdef object reference():
    """`rmqpy.remoting.frame`, imported on first use: it imports this module when it loads, so
    importing it here at load would leave one of the two half made."""
    global _frame
    if _frame is None:
        import rmqpy.remoting.frame
        _frame = rmqpy.remoting.frame
    return _frame


cdef inline int32_t be_i32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16)
                     | (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline uint16_t be_u16(const uint8_t* p) noexcept nogil:
    return <uint16_t>((p[0] << 8) | p[1])


cdef inline void put_i32(uint8_t* p, int32_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = (u >> 24) & 0xFF
    p[1] = (u >> 16) & 0xFF
    p[2] = (u >> 8) & 0xFF
    p[3] = u & 0xFF


def decode_frames(buf, Py_ssize_t pos, long long max_frame_length, bint first):
    """`rmqpy.remoting.frame.decode_frames`, compiled."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return _decode_frames(buf, <const uint8_t*>view.buf, view.len, pos, max_frame_length,
                              first)
    finally:
        PyBuffer_Release(&view)


cdef tuple _decode_frames(buf, const uint8_t* data, Py_ssize_t n, Py_ssize_t pos,
                          long long max_frame_length, bint first):
    cdef list commands = []
    cdef Py_ssize_t end, start
    cdef long long total
    cdef uint32_t type_and_len, header_len
    cdef int kind
    cdef bytes header, body
    try:
        while True:
            if n - pos < 4:
                break
            total = be_i32(data + pos)
            if total < 4:
                raise RemoteProtocolError(
                    f"frame length {total} is shorter than its header length"
                )
            if total > max_frame_length:
                head = bytes(buf[pos : pos + 8])
                foreign = reference().foreign_protocol(head) if first and not commands else None
                if foreign is not None:
                    raise foreign
                raise RemoteProtocolError(
                    f"frame length {total} exceeds the limit of {max_frame_length} bytes"
                )
            end = pos + 4 + total
            if n < end:
                break
            type_and_len = <uint32_t>be_i32(data + pos + 4)
            kind = (type_and_len >> 24) & 0xFF
            header_len = type_and_len & HEADER_MASK
            start = pos + PREFIX_SIZE
            if header_len > end - start:
                raise RemoteProtocolError(
                    f"header length {header_len} is larger than the frame ({total} bytes)"
                )
            header = PyBytes_FromStringAndSize(<char*>data + start, header_len)
            body = PyBytes_FromStringAndSize(<char*>data + start + header_len,
                                             end - start - header_len)
            pos = end
            if kind == ROCKETMQ_KIND:
                commands.append(_decode_binary(header, body))
            elif kind == JSON_KIND:
                commands.append(_decode_json(header, body))
            else:
                commands.append(decode_header(kind, header, body))
    except RemoteProtocolError as exc:
        return commands, pos, exc
    return commands, pos, None


cdef object JSON = SerializeType.JSON


cdef inline bint _small_int(object value, long long low, long long high):
    """An int in [low, high]: exactly an int, or an int enum (a `ResponseCode`), which both
    JSON encoders write as its number; never a bool."""
    return (
        (type(value) is int or (isinstance(value, int) and type(value) is not bool))
        and low <= value <= high
    )


cdef object _decode_json(bytes header, bytes body):
    """A JSON header as clients write it read in one pass here (`_scan_json`); any other
    parsed by orjson, and the command made at once when every field has the type the
    reference would keep as it is; anything else (a parse error, a number as a string, a
    field to coerce, non-text ext values) is decoded again by the reference, so its result
    and its errors are the reference's exactly."""
    made = _scan_json(header, body)
    if made is not None:
        return made
    try:
        fields = orjson_loads(header)
    except ValueError:
        return decode_header(JSON_KIND, header, body)
    if type(fields) is not dict:
        return decode_header(JSON_KIND, header, body)
    cdef dict f = <dict>fields
    code = f.get("code")
    opaque = f.get("opaque", 0)
    flag = f.get("flag", 0)
    version = f.get("version", 0)
    remark = f.get("remark")
    ext = f.get("extFields")
    if ext is None:
        ext = {}
    if not _plain(code, opaque, flag, version, remark, ext):
        # parsed again by the reference: orjson reads some numbers otherwise (-2**63-1)
        return decode_header(JSON_KIND, header, body)
    return _command(code, opaque, flag, remark, ext, body, f.get("language"), version, JSON)


# What `_scan_json` reads: a header object of these fields, each at most once, ints that
# fit 32 bits, text, and an extFields object of text values (or null), any JSON whitespace.
# A field's bit is 1 << its place here.
cdef object _json_text(const uint8_t* p, Py_ssize_t* at, Py_ssize_t end):
    """The JSON string whose opening quote is at `at[0]`, `at[0]` moved past its closing
    quote; None where this reader gives up (bad UTF-8, a raw control character, a lone
    surrogate, no closing quote), for the general readers to decide."""
    cdef Py_ssize_t start = at[0] + 1, i = start
    cdef uint8_t c
    while i < end:
        c = p[i]
        if c == 34:
            try:
                text = PyUnicode_DecodeUTF8(<const char*>p + start, i - start, NULL)
            except UnicodeDecodeError:
                return None
            at[0] = i + 1
            return text
        if c == 92 or c < 32:
            break
        i += 1
    if i >= end or p[i] < 32:
        return None
    # Escapes: the text rebuilt as UTF-8, never longer than its escaped form.
    cdef uint8_t* out = <uint8_t*>PyMem_Malloc(end - start + 1)
    if out == NULL:
        raise MemoryError()
    cdef Py_ssize_t n
    try:
        n = json_unescape(p, at, end, out)
        if n < 0:
            return None
        try:
            return PyUnicode_DecodeUTF8(<const char*>out, n, NULL)
        except UnicodeDecodeError:
            return None
    finally:
        PyMem_Free(out)


cdef object _json_ext(const uint8_t* p, Py_ssize_t* at, Py_ssize_t end):
    """The extFields object at `at[0]` as a dict of text, or None to give up."""
    cdef Py_ssize_t pos = _blank(p, at[0] + 1, end)
    cdef dict ext = {}
    if pos < end and p[pos] == 125:
        at[0] = pos + 1
        return ext
    while pos < end and p[pos] == 34:
        key = _json_text(p, &pos, end)
        if key is None:
            return None
        pos = _blank(p, pos, end)
        if pos >= end or p[pos] != 58:
            return None
        pos = _blank(p, pos + 1, end)
        if pos >= end or p[pos] != 34:
            return None
        value = _json_text(p, &pos, end)
        if value is None:
            return None
        ext[key] = value
        pos = _blank(p, pos, end)
        if pos < end and p[pos] == 44:
            pos = _blank(p, pos + 1, end)
            continue
        if pos < end and p[pos] == 125:
            at[0] = pos + 1
            return ext
        return None
    return None


cdef object _scan_json(bytes header, bytes body):
    """The command of a JSON header of the usual shape, read in one pass; None for
    `_decode_json`'s general path (any other shape, type or text, and every error)."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(header)
    cdef Py_ssize_t end = len(header), name_at
    cdef Py_ssize_t pos = _blank(p, 0, end)
    cdef int seen = 0, field
    cdef long long code = 0, opaque = 0, flag = 0, version = 0, number
    remark = None
    language = None
    ext = None
    if pos >= end or p[pos] != 123:
        return None
    pos = _blank(p, pos + 1, end)
    while pos < end and p[pos] == 34:
        name_at = pos + 1
        while pos + 1 < end and p[pos + 1] != 34 and p[pos + 1] != 92:
            pos += 1
        if pos + 1 >= end or p[pos + 1] != 34:
            return None
        field = header_field(p + name_at, pos + 1 - name_at)
        if field == 0 or seen & field:
            return None
        seen |= field
        pos = _blank(p, pos + 2, end)
        if pos >= end or p[pos] != 58:
            return None
        pos = _blank(p, pos + 1, end)
        if pos >= end:
            return None
        if field & (J_CODE | J_OPAQUE | J_FLAG | J_VERSION):
            if not _json_int(p, &pos, end, &number):
                return None
            if field == J_CODE:
                code = number
            elif field == J_OPAQUE:
                opaque = number
            elif field == J_FLAG:
                flag = number
            else:
                version = number
        elif field == J_EXT and p[pos] == 123:
            ext = _json_ext(p, &pos, end)
            if ext is None:
                return None
        elif (field == J_EXT or field == J_REMARK) and end - pos >= 4 and (
            memcmp(p + pos, b"null", 4) == 0
        ):
            pos += 4
        elif p[pos] == 34 and field & (J_LANGUAGE | J_REMARK | J_SERIALIZE):
            text = _json_text(p, &pos, end)
            if text is None:
                return None
            if field == J_LANGUAGE:
                language = text
            elif field == J_REMARK:
                remark = text
        else:
            return None
        pos = _blank(p, pos, end)
        if pos < end and p[pos] == 44:
            pos = _blank(p, pos + 1, end)
            continue
        if pos < end and p[pos] == 125:
            if _blank(p, pos + 1, end) != end or not seen & J_CODE:
                return None
            return _command(code, opaque, flag, remark, {} if ext is None else ext, body,
                            language, version, JSON)
        return None
    return None


cdef bint _plain(code, opaque, flag, version, remark, ext):
    """Fields the reference keeps as they are: 32-bit ints, a text remark, text ext."""
    return (
        _small_int(code, -2147483648, 2147483647)
        and _small_int(opaque, -2147483648, 2147483647)
        and _small_int(flag, -2147483648, 2147483647)
        and _small_int(version, -2147483648, 2147483647)
        and (remark is None or type(remark) is str)
        and type(ext) is dict
        and _all_text(<dict>ext)
    )


cdef bint _all_text(dict ext):
    for key, value in ext.items():
        if type(key) is not str or type(value) is not str:
            return False
    return True


cdef str _utf8(const char* p, Py_ssize_t size):
    return PyUnicode_DecodeUTF8(p, size, NULL)


cdef object _decode_binary(bytes header, bytes body):
    cdef Py_ssize_t end = len(header)
    cdef const uint8_t* h = <const uint8_t*>PyBytes_AS_STRING(header)
    cdef Py_ssize_t pos, key_end, value_end
    cdef int32_t remark_len, ext_len, value_len
    if end < FIXED_SIZE + 8:
        raise RemoteProtocolError(f"binary header of {end} bytes is too short")
    cdef int16_t code = <int16_t>be_u16(h)
    cdef int8_t language = <int8_t>h[2]
    cdef int16_t version = <int16_t>be_u16(h + 3)
    cdef int32_t opaque = be_i32(h + 5)
    cdef int32_t flag = be_i32(h + 9)
    pos = FIXED_SIZE
    remark_len = be_i32(h + pos)
    pos += 4
    if remark_len < 0 or pos + remark_len + 4 > end:
        raise RemoteProtocolError(f"binary header remark length {remark_len} is out of bounds")
    cdef dict ext = {}
    remark = None
    try:
        if remark_len:
            remark = _utf8(<const char*>h + pos, remark_len)
        pos += remark_len
        ext_len = be_i32(h + pos)
        pos += 4
        if ext_len < 0 or pos + ext_len != end:
            raise RemoteProtocolError(
                f"binary header ext length {ext_len} does not fill the header"
            )
        while pos < end:
            if pos + 2 > end:
                raise RemoteProtocolError("binary header ext entry is cut short")
            key_end = pos + 2 + be_u16(h + pos)
            if key_end + 4 > end:
                raise RemoteProtocolError("binary header ext key is cut short")
            value_len = be_i32(h + key_end)
            value_end = key_end + 4 + value_len
            if value_len < 0 or value_end > end:
                raise RemoteProtocolError("binary header ext value is cut short")
            ext[_utf8(<const char*>h + pos + 2, key_end - pos - 2)] = _utf8(
                <const char*>h + key_end + 4, value_len
            )
            pos = value_end
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"binary header text is not UTF-8: {exc}") from exc
    return _command(code, opaque, flag, remark, ext, body, language, version, ROCKETMQ)


cdef dict LANGUAGE_BY_NAME = _LANGUAGE_BY_NAME
cdef dict LANGUAGE_BY_CODE = _LANGUAGE_BY_CODE
cdef object new = object.__new__


cdef object _command(code, opaque, flag, remark, ext, body, language, version, kind):
    """The command the reference's decoders make from these fields, its slots set here
    (the dataclass's `__init__` takes keywords in Python)."""
    cdef object known = None
    if type(language) is str:
        known = LANGUAGE_BY_NAME.get(language)
    elif type(language) is int:
        known = LANGUAGE_BY_CODE.get(language)
    cmd = new(RemotingCommand)
    cmd.code = code
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = remark
    cmd.ext_fields = ext
    cmd.body = body
    cmd.language = known if known is not None else _language(language)
    cmd.version = version
    cmd.serialize_type = kind
    cmd.wire = None
    return cmd


def encode_frames(cmds):
    """`rmqpy.remoting.frame.encode_frames`, compiled: binary headers in C, the others (and any
    field out of its range, to raise the reference's error) by `encode_frame_parts`."""
    cdef list parts = []
    for cmd in cmds:
        wire = cmd.wire
        if wire is not None:
            parts.append(wire)
        elif cmd.serialize_type is ROCKETMQ and _fits_binary(cmd):
            parts.append(_encode_binary_frame(cmd, cmd.body))
            parts.append(cmd.body)
        elif cmd.serialize_type is JSON and _plain_json(cmd):
            parts.append(_encode_json_frame(cmd))
            parts.append(cmd.body)
        else:
            parts.extend(reference().encode_frame_parts(cmd))
    return parts


cdef bint _fits_binary(object cmd):
    return (
        type(cmd.body) is bytes
        and -32768 <= cmd.code < 32768
        and -32768 <= cmd.version < 32768
        and -2147483648 <= cmd.opaque < 2147483648
        and -2147483648 <= cmd.flag < 2147483648
        and (cmd.remark is None or type(cmd.remark) is str)
    )


cdef bint _plain_json(object cmd):
    """Fields orjson writes byte for byte as the reference's `json` encoder does: ints
    that fit, text remark and ext fields, a bytes body."""
    return type(cmd.body) is bytes and _plain(
        cmd.code, cmd.opaque, cmd.flag, cmd.version, cmd.remark, cmd.ext_fields
    )


cdef bytes _encode_json_frame(object cmd):
    """Length prefix + the JSON header `_encode_json` makes, written by orjson; where orjson
    refuses (a lone surrogate), the reference raises its own error."""
    fields = {
        "code": int(cmd.code),
        "extFields": cmd.ext_fields,
        "flag": int(cmd.flag),
        "language": cmd.language.name,
        "opaque": int(cmd.opaque),
        "serializeTypeCurrentRPC": "JSON",
        "version": int(cmd.version),
    }
    if cmd.remark is not None:
        fields["remark"] = cmd.remark
    cdef bytes header
    try:
        header = orjson_dumps(fields)
    except TypeError:  # orjson.JSONEncodeError
        return reference().encode_frame_parts(cmd)[0]
    cdef Py_ssize_t header_len = len(header)
    cdef long long total = 4 + header_len + len(cmd.body)
    if total > MAX_FRAME:
        raise LocalProtocolError(f"a frame of {total} bytes exceeds {MAX_FRAME_LENGTH}")
    cdef bytes head = PyBytes_FromStringAndSize(NULL, PREFIX_SIZE + header_len)
    cdef uint8_t* out = <uint8_t*>PyBytes_AS_STRING(head)
    put_frame_prefix(out, header_len, len(cmd.body), JSON_KIND)
    memcpy(out + PREFIX_SIZE, PyBytes_AS_STRING(header), header_len)
    return head


cdef bytes _encode_binary_frame(object cmd, bytes body):
    """Length prefix + binary header, as `_encode_binary` and `encode_frame_parts` make."""
    cdef long code = cmd.code
    remark = cmd.remark
    cdef bytes remark_b = remark.encode("utf-8") if remark else b""
    cdef list entries = []
    cdef Py_ssize_t ext_len = 0
    cdef bytes k, v
    for key, value in cmd.ext_fields.items():
        k = BINARY_KEYS.get(key)
        if k is None:
            k = _binary_key(key)
        v = value.encode("utf-8")
        entries.append(k)
        entries.append(v)
        ext_len += len(k) + 4 + len(v)
    cdef Py_ssize_t header_len = FIXED_SIZE + 4 + len(remark_b) + 4 + ext_len
    cdef long long total = 4 + header_len + len(body)
    if total > MAX_FRAME:
        raise LocalProtocolError(f"a frame of {total} bytes exceeds {MAX_FRAME_LENGTH}")
    cdef bytes head = PyBytes_FromStringAndSize(NULL, PREFIX_SIZE + header_len)
    cdef uint8_t* out = <uint8_t*>PyBytes_AS_STRING(head)
    out = put_frame_prefix(out, header_len, len(body), ROCKETMQ_KIND)
    out = put_binary_fixed(out, code, <int8_t>int(cmd.language), cmd.version,
                           <int32_t>cmd.opaque, <int32_t>cmd.flag)
    put_i32(out, <int32_t>len(remark_b))
    memcpy(out + 4, PyBytes_AS_STRING(remark_b), len(remark_b))
    out += 4 + len(remark_b)
    put_i32(out, <int32_t>ext_len)
    out += 4
    cdef Py_ssize_t i
    for i in range(0, len(entries), 2):
        k = entries[i]
        v = entries[i + 1]
        memcpy(out, PyBytes_AS_STRING(k), len(k))
        out += len(k)
        put_i32(out, <int32_t>len(v))
        memcpy(out + 4, PyBytes_AS_STRING(v), len(v))
        out += 4 + len(v)
    return head
