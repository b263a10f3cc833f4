# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of `PullProcessor.answer` for the pull every consumer keeping up sends
(`broker.processors.pull`): a readable topic and group, a tag subscription, and records hot
in one commitlog file or none yet. Its store read is one call (`store.hot_read.read_hot`,
reading the page cache only), and its answer is written as a whole frame from pieces made
once, in its request's serialize type (binary or JSON).

Anything else is declined before any effect the reference would not have had too (a group
seen for the first time is created by either), for the reference to answer with its own code
and remark: a refusal, an SQL filter, a oneway request, msgpack headers, a read the store's
full way must make (records cold, removed, in two files, an offset out of range).

`answer_read` serves the pulls of one read the same way straight from their header fields,
each pull's context made here and its header parsed only where it parks (`ParkedPull` keeps
it for its second run); a field the compiled reading does not take as plainly written (absent,
not decimal, out of its Java type's range, more than 18 digits) leaves that pull declined.
`answer_frames` serves the PULL_MESSAGE frames at the start of a read straight from its
bytes, before the decoder makes commands of them (binary headers, and JSON ones as clients
write them): a pull's fields are read where they lie; one that parks keeps its frame
(`ParkedPull.frame`) and is served from it again once woken, and its request, context and
header are made only for a pull a pull thread or the reference takes over."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcpy

from rmqpy.broker._long_polling cimport ParkedPull
from rmqpy.broker._request_context cimport new_context
from rmqpy.remoting.headers._numbers cimport ascii_integer
from rmqpy.remoting._header_fields cimport (
    binary_fields, field_number, json_fields, same_bytes,
)
from rmqpy.remoting._wire cimport (
    binary_ext_len, put_binary_ext, put_binary_fixed, put_frame_prefix,
)
from rmqpy.store._big_endian cimport get32, put32
from rmqpy.store._decimal cimport put_signed_decimal

cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char* text, Py_ssize_t size, const char* errors)

import time

import structlog

from rmqpy.broker._metrics import tally_pull
from rmqpy.broker.clients import Subscription
from rmqpy.broker.offsets import TOPIC_GROUP_SEPARATOR
from rmqpy.remoting.codes import (
    BROKER_VERSION, PERM_READ, LanguageCode, RequestCode, ResponseCode, SerializeType,
)
from rmqpy.remoting.frame import decode_frames
from rmqpy.remoting.header_codec import compact_json
from rmqpy.remoting.headers.pull import (
    FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION, FLAG_SUSPEND, PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from rmqpy.remoting.wire import BINARY_FIXED, FRAME_PREFIX, I32, RPC_ONEWAY, RPC_RESPONSE, U16
from rmqpy.store.hot_read import AT_END, FOUND
from rmqpy.store.layout import GetMessageStatus

if (FRAME_PREFIX.format, BINARY_FIXED.format, U16.format, I32.format) != (
    ">ii", ">hbhii", ">H", ">i"
):
    raise ImportError("broker.processors._pull does not match remoting.wire")

DECLINED = object()  # `answer`'s word for a pull the reference answers
cdef object _DECLINED = DECLINED
cdef object _NOT_PULL = object()  # `_take_frame`: a frame the lane does not read
cdef object log = structlog.get_logger("rmqpy.broker.processors.pull")
cdef object ROCKETMQ = SerializeType.ROCKETMQ
cdef object JSON = SerializeType.JSON
cdef uint32_t ROCKETMQ_KIND = int(SerializeType.ROCKETMQ)
cdef uint32_t JSON_KIND = int(SerializeType.JSON)
cdef Py_ssize_t PREFIX_SIZE = FRAME_PREFIX.size
cdef Py_ssize_t FIXED_SIZE = BINARY_FIXED.size
cdef int RESPONSE = RPC_RESPONSE, ONEWAY = RPC_ONEWAY
cdef long long READ = PERM_READ
cdef long long COMMIT = FLAG_COMMIT_OFFSET, SUSPEND = FLAG_SUSPEND
cdef long long WITH_SUBSCRIPTION = FLAG_SUBSCRIPTION
cdef long long STATUS_FOUND = FOUND, STATUS_AT_END = AT_END
cdef int SUCCESS = ResponseCode.SUCCESS, NOT_FOUND = ResponseCode.PULL_NOT_FOUND
cdef bytes FOUND_REMARK = GetMessageStatus.FOUND.name.encode()
cdef bytes AT_END_REMARK = GetMessageStatus.OFFSET_OVERFLOW_ONE.name.encode()
cdef object parse_subscription = Subscription.parse
cdef str SEPARATOR = TOPIC_GROUP_SEPARATOR
cdef Py_ssize_t MOST_SUBSCRIPTIONS = 4096  # the lane's cache of parsed ones, as `parse`'s
cdef object monotonic = time.monotonic
cdef object read_hot = None  # `store.hot_read.read_hot`, taken at the first lane
cdef object RequestContext = None  # `broker.context`'s, taken at the first lane
cdef object from_ext = None  # `PullMessageRequestHeader.from_ext`'s parser, at the first lane
# The request header's ext keys, in `answer_read`'s order (the first nine are required).
cdef dict _KEYS = PullMessageRequestHeader.ext_keys()
cdef tuple PULL_KEYS = tuple(_KEYS[attr] for attr in (
    "consumer_group", "topic", "queue_id", "queue_offset", "max_msg_nums", "sys_flag",
    "commit_offset", "suspend_timeout_millis", "sub_version", "subscription",
    "expression_type", "max_msg_bytes",
))
cdef long long INT_MIN = -2147483648, INT_MAX = 2147483647
# The same keys as a frame writes them, for `answer_frames`.
cdef tuple PULL_KEY_BYTES = tuple(key.encode() for key in PULL_KEYS)
cdef enum:
    PULL_FIELDS = 12
if len(PULL_KEYS) != PULL_FIELDS:
    raise ImportError("broker.processors._pull does not match PullMessageRequestHeader")
cdef int PULL_MESSAGE = RequestCode.PULL_MESSAGE
cdef long long LONG_LIMIT = 999999999999999999  # 18 digits: longer ones are declined


cdef bint _decimal(object text, long long low, long long high, long long* out):
    """`text` as written plainly in decimal (an optional minus sign, 1 to 18 digits) within
    [low, high] into `out`; False for anything else (the header parser's to judge)."""
    return type(text) is str and ascii_integer(<str>text, out) and low <= out[0] <= high


cdef object _field(dict ext, object key):
    cdef PyObject* found = PyDict_GetItem(ext, key)
    return None if found == NULL else <object>found


cdef inline int _add_answer(list parts, tuple out) except -1:
    """A pull's answer (its frame's head and body, none for an empty body) added to the
    frames a connection is written."""
    head, body = out
    parts.append(head)
    if PyBytes_GET_SIZE(<bytes>body):
        parts.append(body)
    return 0


cdef class LastText:
    """A field's text as the frames give it one after another: made again only when its
    UTF-8 differs from the last frame's (a consumer's pulls name one group and topic)."""
    cdef str text
    cdef bytes raw

    cdef str of(self, const unsigned char* at, Py_ssize_t size):
        if not same_bytes(self.raw, at, size):
            self.text = PyUnicode_DecodeUTF8(<const char*>at, size, NULL)
            self.raw = PyBytes_FromStringAndSize(<const char*>at, size)
        return self.text


cdef class PullFrames:
    """A pull's answer header, written whole as `encode_frames` writes it: code, the status
    name as remark, and the four numbers of `PullMessageResponseHeader` (suggestWhichBrokerId
    0 from a master)."""
    cdef tuple binary_keys  # each key as the binary header writes it
    cdef bytes json_head, json_after_code, json_after_next, json_after_min, json_after_max
    cdef bytes json_after_opaque, json_tail
    cdef int language, version

    def __init__(self):
        keys = tuple(PullMessageResponseHeader.wire_fields())
        if len(keys) != 4:
            raise ImportError("broker.processors._pull does not match PullMessageResponseHeader")
        self.binary_keys = tuple(U16.pack(len(k.encode())) + k.encode() for k in keys)
        self.language = int(LanguageCode.PYTHON)
        self.version = int(BROKER_VERSION)
        self.json_head = b'{"code":'
        self.json_after_code = (
            b',"extFields":{' + compact_json(keys[0]) + b':"0",' + compact_json(keys[1]) + b':"'
        )
        self.json_after_next = b'",' + compact_json(keys[2]) + b':"'
        self.json_after_min = b'",' + compact_json(keys[3]) + b':"'
        self.json_after_max = (
            b'"},"flag":' + str(RESPONSE).encode() + b',"language":'
            + compact_json(LanguageCode.PYTHON.name) + b',"opaque":'
        )
        self.json_after_opaque = (
            b',"serializeTypeCurrentRPC":"JSON","version":' + str(self.version).encode()
            + b',"remark":"'
        )
        self.json_tail = b'"}'

    def head(self, kind, int code, opaque, bytes remark, long long next_offset,
             long long min_offset, long long max_offset, Py_ssize_t body_len):
        """The frame's length prefix and header, for a body of `body_len` bytes; None for
        a serialize type or an opaque it does not write."""
        if type(opaque) is not int or not (-2147483648 <= opaque < 2147483648):
            return None
        cdef unsigned char numbers[72]  # the three offsets' digits, 24 bytes apart
        cdef Py_ssize_t lengths[3]
        lengths[0] = put_signed_decimal(next_offset, numbers)
        lengths[1] = put_signed_decimal(min_offset, numbers + 24)
        lengths[2] = put_signed_decimal(max_offset, numbers + 48)
        if kind is ROCKETMQ:
            return self._binary(code, <int32_t>opaque, remark, numbers, lengths, body_len)
        if kind is JSON:
            return self._json(code, <int32_t>opaque, remark, numbers, lengths, body_len)
        return None

    cdef bytes _binary(self, int code, int32_t opaque, bytes remark,
                       const unsigned char* numbers, Py_ssize_t* lengths, Py_ssize_t body_len):
        cdef Py_ssize_t i, remark_len = PyBytes_GET_SIZE(remark)
        cdef const char* values[4]
        cdef Py_ssize_t value_lengths[4]
        values[0], value_lengths[0] = b"0", 1  # suggestWhichBrokerId: the master
        for i in range(3):
            values[i + 1] = <const char*>numbers + 24 * i
            value_lengths[i + 1] = lengths[i]
        cdef Py_ssize_t ext_len = binary_ext_len(self.binary_keys, value_lengths, 4)
        cdef Py_ssize_t header_len = FIXED_SIZE + 4 + remark_len + 4 + ext_len
        cdef bytes out = PyBytes_FromStringAndSize(NULL, PREFIX_SIZE + header_len)
        cdef unsigned char* at = <unsigned char*>PyBytes_AS_STRING(out)
        at = put_frame_prefix(at, header_len, body_len, ROCKETMQ_KIND)
        at = put_binary_fixed(at, code, self.language, self.version, opaque, RESPONSE)
        at = put32(at, <uint32_t>remark_len)
        memcpy(at, PyBytes_AS_STRING(remark), remark_len)
        at = put32(at + remark_len, <uint32_t>ext_len)
        put_binary_ext(at, self.binary_keys, values, value_lengths, 4)
        return out

    cdef bytes _json(self, int code, int32_t opaque, bytes remark,
                     const unsigned char* numbers, Py_ssize_t* lengths, Py_ssize_t body_len):
        cdef unsigned char code_digits[24]
        cdef unsigned char opaque_digits[24]
        cdef const unsigned char* pieces[13]
        cdef Py_ssize_t sizes[13]
        cdef Py_ssize_t header_len = 0, i
        cdef tuple texts = (self.json_head, None, self.json_after_code, None,
                            self.json_after_next, None, self.json_after_min, None,
                            self.json_after_max, None, self.json_after_opaque, remark,
                            self.json_tail)
        for i in range(13):
            if texts[i] is not None:
                pieces[i] = <const unsigned char*>PyBytes_AS_STRING(texts[i])
                sizes[i] = PyBytes_GET_SIZE(texts[i])
        pieces[1], sizes[1] = code_digits, put_signed_decimal(code, code_digits)
        for i in range(3):
            pieces[3 + 2 * i], sizes[3 + 2 * i] = numbers + 24 * i, lengths[i]
        pieces[9], sizes[9] = opaque_digits, put_signed_decimal(opaque, opaque_digits)
        for i in range(13):
            header_len += sizes[i]
        cdef bytes out = PyBytes_FromStringAndSize(NULL, PREFIX_SIZE + header_len)
        cdef unsigned char* at = <unsigned char*>PyBytes_AS_STRING(out)
        at = put_frame_prefix(at, header_len, body_len, JSON_KIND)
        for i in range(13):
            memcpy(at, pieces[i], sizes[i])
            at += sizes[i]
        return out


cdef class PullLane:
    """`answer(ctx, header)`: the pull answered (its frame's head and body) or parked (None)
    as `PullProcessor.answer` would, False where it would read the disk (for a pull thread),
    or DECLINED for the reference to run. `answer_read(conn, requests, received_s, loop)`:
    the same for each pull of a read, from its header fields; `answer_parked(pulls, now)`:
    for woken pulls."""
    cdef object owner  # the PullProcessor: its permission and long-polling settings
    cdef object groups, topics, clients, offsets, hold, metrics, parked
    cdef object commitlog, queues, config
    cdef PullFrames frames
    cdef LastText frame_group, frame_topic  # the last ones a pull's frame gave
    cdef dict subscriptions  # (topic, expression, version) -> `Subscription.parse`'s
    cdef bint frame_parks  # a pull taken from its frame parks as that frame (`ParkedPull`)

    def __init__(self, owner, parked):
        global read_hot, RequestContext, from_ext
        if from_ext is None:  # (the parser itself: `from_ext` is a Python call around it)
            from_ext = PullMessageRequestHeader._parser(False)
        if read_hot is None:
            from rmqpy.store.hot_read import read_hot as found
            read_hot = found
        if RequestContext is None:
            from rmqpy.broker.context import RequestContext as made
            RequestContext = made
        self.owner = owner
        self.groups, self.topics, self.clients = owner.groups, owner.topics, owner.clients
        self.offsets, self.hold, self.metrics = owner.offsets, owner.hold, owner.metrics
        self.parked = parked
        self.frame_parks = parked is ParkedPull
        store = owner.store
        self.commitlog, self.queues, self.config = (
            store.commitlog, store.consume_queues.table, store.config
        )
        self.frames = PullFrames()
        self.frame_group, self.frame_topic = LastText(), LastText()
        self.subscriptions = {}

    def answer(self, ctx, h):
        return self._serve_header(ctx, h)

    def answer_read(self, conn, list requests, double received_s, loop):
        """The pulls of one read of `conn`, each answered (the answers written together),
        parked, or returned: (those that would read the disk, those declined), as contexts
        made for them here."""
        cdef list cold = [], declined = [], parts = []
        cdef Py_ssize_t i, handled = 0
        cdef long long values[8]
        cdef tuple keys = PULL_KEYS
        cdef dict ext
        received = received_s
        for i in range(PyList_GET_SIZE(requests)):
            request = <object>PyList_GET_ITEM(requests, i)
            ctx = new_context(RequestContext, conn, request, loop, received)
            out = _DECLINED
            fields = request.ext_fields
            if type(fields) is dict:
                ext = <dict>fields
                try:
                    out = self._serve_ext(ctx, ext, keys, values)
                except Exception:
                    out = _DECLINED  # the reference answers it, or says what failed
            if out is _DECLINED:
                declined.append(ctx)
            elif out is False:
                cold.append(ctx)
            elif out is not None:
                _add_answer(parts, <tuple>out)
                handled += 1
        if handled:
            conn.answer_frames(parts, handled)
        return cold, declined

    def answer_frames(self, conn, buf, long long max_frame_length, double received_s, loop,
                      Py_ssize_t room):
        """The pulls at the start of a read of `conn` (`buf`, its bytes) served straight from
        their frames, as `answer_read` serves them decoded: the whole frames from the first
        on that are PULL_MESSAGE requests (not oneway; binary headers without a remark, or
        JSON ones as clients write them), their fields written plainly, at most `room` of
        them; each answered (the answers written together), parked, or returned for the
        pull threads (it would read the disk), and counted as taken on `conn`. (The bytes
        they took, 0 for none; the contexts of those for the pull threads.) A pull the lane
        declines ends the run before it, untouched: the decoder reads it and what follows,
        and `answer_read` serves it. Nothing is made for a pull but its answer, its frame's
        copy if it parks, and its request and context if it goes to a pull thread."""
        cdef Py_buffer view
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        cdef const unsigned char* data = <const unsigned char*>view.buf
        cdef Py_ssize_t n = view.len, pos = 0, total, taken = 0, handled = 0
        cdef list parts = [], cold = []
        received = received_s
        try:
            while taken < room and n - pos >= PREFIX_SIZE:
                total = <int32_t>get32(data + pos)
                if total < 4 or total > max_frame_length or n - pos - 4 < total:
                    break
                out = self._take_frame(conn, data + pos, 4 + total, received, loop, True)
                if out is _NOT_PULL:
                    break
                if out is False:  # for a pull thread, asked once (see `read_hot`)
                    out = self._frame_context(conn, data + pos, 4 + total, received, loop)
                    if out is None:
                        break
                    cold.append(out)
                elif out is _DECLINED:
                    break
                elif out is not None:
                    _add_answer(parts, <tuple>out)
                    handled += 1
                taken += 1
                pos += 4 + total
        finally:
            PyBuffer_Release(&view)
        if taken:
            conn.in_flight = <Py_ssize_t>conn.in_flight + taken  # (`conn.taken`, inline)
            if handled:
                conn.answer_frames(parts, handled)
        return pos, cold

    cdef object _frame_context(self, conn, const unsigned char* frame, Py_ssize_t frame_len,
                               received, loop):
        """The request of a pull taken from its `frame` and its context, decoded for what
        needs them (a pull that parks, or one for a pull thread); None if it will not
        decode."""
        commands, _, error = decode_frames(
            PyBytes_FromStringAndSize(<const char*>frame, frame_len), 0, frame_len, False
        )
        if error is not None or len(commands) != 1:
            return None
        return new_context(RequestContext, conn, commands[0], loop, received)

    cdef object _take_frame(self, conn, const unsigned char* frame, Py_ssize_t frame_len,
                            received, loop, bint first_pass):
        """A whole frame (`frame_len` bytes) of a read of `conn` served from its bytes:
        `_NOT_PULL` where it is not a pull the lane reads so (see `answer_frames`), else
        `_serve_frame`'s answer (DECLINED where that raised). `first_pass`: not a parked
        pull's second run."""
        cdef Py_ssize_t at[PULL_FIELDS]
        cdef Py_ssize_t lengths[PULL_FIELDS]
        cdef Py_ssize_t i
        cdef uint32_t type_and_len = <uint32_t>get32(frame + 4)
        cdef uint32_t kind = type_and_len >> 24
        cdef Py_ssize_t header_len = type_and_len & 0xFFFFFF
        cdef int opaque
        cdef const unsigned char* h = frame + PREFIX_SIZE
        cdef unsigned char* scratch = NULL  # a JSON header's values, unescaped
        if header_len > frame_len - PREFIX_SIZE:
            return _NOT_PULL
        for i in range(PULL_FIELDS):
            at[i] = -1
        if kind == JSON_KIND:
            scratch = <unsigned char*>PyMem_Malloc(header_len)
            if scratch == NULL:
                raise MemoryError()
        try:
            if kind == ROCKETMQ_KIND:
                if not binary_fields(h, header_len, FIXED_SIZE, PULL_MESSAGE, PULL_KEY_BYTES,
                                     at, lengths, &opaque):
                    return _NOT_PULL
            elif kind == JSON_KIND:
                if not json_fields(h, header_len, PULL_MESSAGE, PULL_KEY_BYTES, at, lengths,
                                   &opaque, scratch):
                    return _NOT_PULL
                h = scratch  # where the values lie
            else:
                return _NOT_PULL
            try:
                return self._serve_frame(conn, frame, frame_len,
                                         ROCKETMQ if kind == ROCKETMQ_KIND else JSON, opaque,
                                         h, at, lengths, received, loop, first_pass)
            except Exception:
                return _DECLINED  # the decoder's way answers it, or says what failed
        finally:
            PyMem_Free(scratch)

    cdef object _serve_frame(self, conn, const unsigned char* frame, Py_ssize_t frame_len,
                             kind, int opaque, const unsigned char* values_at,
                             Py_ssize_t* at, Py_ssize_t* lengths, received, loop,
                             bint first_pass):
        """`_serve_ext` for a pull whose fields' values lie at `values_at` (`at`, `lengths`:
        where, within it), the request's `frame` being `frame_len` bytes of a read of
        `conn`."""
        cdef long long values[8]
        cdef const unsigned char* v = values_at
        if at[0] < 0 or at[1] < 0:
            return _DECLINED
        group_name = self.frame_group.of(v + at[0], lengths[0])
        topic = self.frame_topic.of(v + at[1], lengths[1])
        if not (field_number(v, at[2], lengths[2], INT_MIN, INT_MAX, &values[0])
                and field_number(v, at[3], lengths[3], -LONG_LIMIT, LONG_LIMIT, &values[1])
                and field_number(v, at[4], lengths[4], INT_MIN, INT_MAX, &values[2])
                and field_number(v, at[5], lengths[5], INT_MIN, INT_MAX, &values[3])
                and field_number(v, at[6], lengths[6], -LONG_LIMIT, LONG_LIMIT, &values[4])
                and field_number(v, at[7], lengths[7], -LONG_LIMIT, LONG_LIMIT, &values[5])
                and field_number(v, at[8], lengths[8], -LONG_LIMIT, LONG_LIMIT, &values[6])):
            return _DECLINED
        subscription = expression = max_bytes = None
        if at[9] >= 0:
            subscription = PyUnicode_DecodeUTF8(<const char*>v + at[9], lengths[9], NULL)
        if at[10] >= 0:
            expression = PyUnicode_DecodeUTF8(<const char*>v + at[10], lengths[10], NULL)
        if at[11] >= 0:
            if not field_number(v, at[11], lengths[11], INT_MIN, INT_MAX, &values[7]):
                return _DECLINED
            max_bytes = values[7]
        return self._serve_checked(None, kind, opaque, first_pass, group_name, topic, values[0],
                                   values[1], values[2], values[3], values[4], values[5],
                                   subscription, values[6], expression, max_bytes, None, None,
                                   conn, frame, frame_len, received, loop)

    def answer_parked(self, list pulls, double now):
        """Woken pulls (`ParkedPull`s) run again, their hold ending `now`: each answered
        (each connection's answers written together), parked no more, or returned: (those
        that would read the disk, (context, header) of those declined). One whose consumer
        has hung up meanwhile is dropped: nothing is read for nobody. A pull parked as its
        frame is served from it again; the ones handed on get their request, context and
        header here."""
        cdef dict by_conn = {}
        cdef list cold = [], declined = []
        cdef Py_ssize_t i
        cdef PyObject* found
        cdef ParkedPull parked
        for i in range(PyList_GET_SIZE(pulls)):
            pull = <object>PyList_GET_ITEM(pulls, i)
            if type(pull) is ParkedPull and (<ParkedPull>pull).frame is not None:
                parked = <ParkedPull>pull
                conn = parked.conn
                if conn.closed.done():
                    continue
                out = self._serve_parked_frame(parked)
                if out is False or out is _DECLINED or out is _NOT_PULL:
                    if not self._unpark_frame(parked, now):
                        continue
                    if out is False:
                        cold.append(pull)
                    else:
                        declined.append((parked.ctx, parked.header))
                    continue
            else:
                ctx = pull.ctx
                ctx.held_s = now - <double>ctx.received_s
                ctx.received_s = now
                conn = ctx.conn
                if conn.closed.done():
                    continue
                h = pull.header
                try:
                    out = self._serve_header(ctx, h)
                except Exception:
                    out = _DECLINED  # the reference answers it, or says what failed
                if out is _DECLINED:
                    declined.append((ctx, h))
                    continue
                if out is False:
                    cold.append(pull)
                    continue
            if out is not None:
                found = PyDict_GetItem(by_conn, conn)
                if found == NULL:
                    entry = [[], 0]  # the connection's frames, and how many pulls they answer
                    by_conn[conn] = entry
                else:
                    entry = <list>found
                _add_answer(<list>entry[0], <tuple>out)
                entry[1] = <Py_ssize_t>entry[1] + 1
        for conn, entry in by_conn.items():
            conn.answer_frames(entry[0], entry[1])
        return cold, declined

    cdef object _serve_parked_frame(self, ParkedPull parked):
        """The second run of a pull parked as its frame, served from it as `answer_frames`
        served the first."""
        cdef bytes frame = parked.frame
        return self._take_frame(parked.conn, <const unsigned char*>PyBytes_AS_STRING(frame),
                                PyBytes_GET_SIZE(frame), parked.received_s, parked.loop, False)

    cdef bint _unpark_frame(self, ParkedPull parked, double now) except -1:
        """A pull parked as its frame, handed on (to a pull thread, or declined for the
        reference): its request and context made, as held until `now`, and its header
        parsed, as parking them would have. The lane parks only frames the decoder and the
        header parser take; should one not be, its connection is closed (False)."""
        frame = parked.frame
        conn = parked.conn
        ctx = self._frame_context(conn, <const unsigned char*>PyBytes_AS_STRING(frame),
                                  PyBytes_GET_SIZE(frame), parked.received_s, parked.loop)
        h = None
        if ctx is not None:
            try:
                h = from_ext(ctx.request.ext_fields)
            except Exception:
                h = None
        if h is None:
            log.warning("closing connection: a held pull no longer decodes", peer=conn.peer)
            conn.answer_frames([], 1)
            conn.abort()
            return False
        ctx.resumed = True
        ctx.held_s = now - <double>parked.received_s
        ctx.received_s = now
        parked.ctx, parked.header = ctx, h
        return True

    cdef object _serve_header(self, ctx, h):
        """`_serve` with the fields of `h`, a parsed header."""
        return self._serve(ctx, h.consumer_group, h.topic, h.queue_id, h.queue_offset,
                           h.max_msg_nums, h.sys_flag, h.commit_offset,
                           h.suspend_timeout_millis, h.subscription, h.sub_version,
                           h.expression_type, h.max_msg_bytes, h, None)

    cdef object _serve_ext(self, ctx, dict ext, tuple keys, long long* values):
        """`_serve` with the header's fields read from `ext`: DECLINED where one is not
        written plainly."""
        group_name = _field(ext, keys[0])
        topic = _field(ext, keys[1])
        if type(group_name) is not str or type(topic) is not str:
            return _DECLINED
        if not (_decimal(_field(ext, keys[2]), INT_MIN, INT_MAX, &values[0])
                and _decimal(_field(ext, keys[3]), -LONG_LIMIT, LONG_LIMIT, &values[1])
                and _decimal(_field(ext, keys[4]), INT_MIN, INT_MAX, &values[2])
                and _decimal(_field(ext, keys[5]), INT_MIN, INT_MAX, &values[3])
                and _decimal(_field(ext, keys[6]), -LONG_LIMIT, LONG_LIMIT, &values[4])
                and _decimal(_field(ext, keys[7]), -LONG_LIMIT, LONG_LIMIT, &values[5])
                and _decimal(_field(ext, keys[8]), -LONG_LIMIT, LONG_LIMIT, &values[6])):
            return _DECLINED
        subscription = _field(ext, keys[9])
        expression = _field(ext, keys[10])
        if (subscription is not None and type(subscription) is not str) or (
            expression is not None and type(expression) is not str
        ):
            return _DECLINED
        max_bytes = _field(ext, keys[11])
        if max_bytes is not None:
            if not _decimal(max_bytes, INT_MIN, INT_MAX, &values[7]):
                return _DECLINED
            max_bytes = values[7]
        return self._serve(ctx, group_name, topic, values[0], values[1], values[2], values[3],
                           values[4], values[5], subscription, values[6], expression,
                           max_bytes, None, ext)

    cdef object _serve(self, ctx, group_name, topic, long long queue_id, long long offset,
                       long long max_nums, long long sys_flag, long long commit_offset,
                       suspend_ms, subscription, sub_version, expression, max_bytes, h,
                       dict ext):
        """`PullProcessor.answer` for the pull of `ctx` with these header fields; `h` its
        parsed header, or None for one parsed from `ext` only if it parks."""
        request = ctx.request
        kind = request.serialize_type
        opaque = request.opaque
        if (kind is not ROCKETMQ and kind is not JSON) or request.flag & ONEWAY:
            return _DECLINED
        if type(opaque) is not int or not (-2147483648 <= opaque < 2147483648):
            return _DECLINED  # the reference raises its error
        return self._serve_checked(ctx, kind, opaque, not ctx.resumed, group_name, topic,
                                   queue_id, offset, max_nums, sys_flag, commit_offset,
                                   suspend_ms, subscription, sub_version, expression,
                                   max_bytes, h, ext, None, NULL, 0, None, None)

    cdef object _serve_checked(self, ctx, kind, opaque, bint first_pass, group_name, topic,
                               long long queue_id, long long offset, long long max_nums,
                               long long sys_flag, long long commit_offset, suspend_ms,
                               subscription, sub_version, expression, max_bytes, h,
                               dict ext, conn, const unsigned char* frame,
                               Py_ssize_t frame_len, received, loop):
        """`_serve` past its request's checks: `kind` and `opaque` its request's, on its
        first run or not. Without `ctx` (a pull taken straight from `frame`, a read of
        `conn` received at `received`), the request and its context are made only if it
        parks."""
        if not <long long>self.owner.broker_permission & READ:
            return _DECLINED
        # The managers' tables read as `find` and `get` read them (a group not there yet
        # is `find`'s to create), without a Python call per pull.
        group = self.groups.table.get(group_name)
        if group is None:
            group = self.groups.find(group_name)
        if group is None or not group.consumeEnable:
            return _DECLINED
        config = self.topics.table.get(topic)
        if config is None or not <long long>config.perm & READ:
            return _DECLINED
        if not 0 <= queue_id < <long long>config.readQueueNums:
            return _DECLINED
        if expression is not None and expression != "" and expression != "TAG":
            return _DECLINED
        if sys_flag & WITH_SUBSCRIPTION:
            sub = self._subscription(topic, subscription, sub_version)
        else:
            sub = self.clients.subscription(group_name, topic) or parse_subscription(topic, "*")
        queues = self.queues.get(topic)
        cq = None if queues is None else queues.get(queue_id)
        if cq is None:
            return _DECLINED
        # The limits `MessageStore.hot_limits` sets: entries to scan, records and bytes.
        if max_nums < 1:
            max_nums = 1
        codes = sub.codes
        cdef long long entries = max_nums if max_nums > 800 else 800  # 16000 B of entries
        if codes is None and entries > (max_nums if max_nums > 16 else 16):
            entries = max_nums if max_nums > 16 else 16
        store_config = self.config
        cdef long long count = store_config.max_transfer_count_on_message_in_memory
        cdef long long size = store_config.max_transfer_bytes_on_message_in_memory
        if max_bytes is not None and <long long>max_bytes < size:
            size = max_bytes
        hot = read_hot(cq, self.commitlog, offset, entries, codes,
                       max_nums if max_nums < count else count, size, True)
        if hot is None:
            return _DECLINED
        if hot is False:
            return False  # it would read the disk
        status, next_offset, min_offset, max_offset, body, sizes = hot
        cdef bint parks = <long long>status == STATUS_AT_END and first_pass and sys_flag & SUSPEND
        # A pull taken from its frame parks as that frame (its second run reads it again).
        cdef bint as_frame = parks and ctx is None and self.frame_parks
        cdef ParkedPull pull
        if parks and ctx is None and not as_frame:  # its request and context, decoded
            ctx = self._frame_context(conn, frame, frame_len, received, loop)
            if ctx is None:
                return _DECLINED
            ext = ctx.request.ext_fields
        if parks and h is None and not as_frame:
            try:  # what `ParkedPull` keeps for the second run, before anything changes
                h = from_ext(ext)
            except Exception:
                return _DECLINED
        if first_pass and sys_flag & COMMIT and self.owner.is_master and commit_offset >= 0:
            self._commit(group_name, topic, queue_id, commit_offset)
        cdef int code = SUCCESS
        cdef bytes remark = FOUND_REMARK
        if parks:
            owner = self.owner
            hold_ms = suspend_ms if owner.long_polling_enable else owner.short_polling_ms
            deadline_s = monotonic() + hold_ms / 1000
            if as_frame:
                pull = ParkedPull.__new__(ParkedPull)
                pull.topic, pull.queue_id, pull.offset = topic, queue_id, offset
                pull.subscription, pull.deadline_s = sub, deadline_s
                pull.frame = PyBytes_FromStringAndSize(<const char*>frame, frame_len)
                pull.conn, pull.received_s, pull.loop = conn, received, loop
                self.hold.park(pull)
            else:
                ctx.resumed = True
                self.hold.park(self.parked(ctx, topic, queue_id, offset, sub, deadline_s, h))
            return None
        if <long long>status == STATUS_AT_END:
            code, remark = NOT_FOUND, AT_END_REMARK
        head = self.frames.head(kind, code, opaque, remark, next_offset, min_offset,
                                max_offset, PyBytes_GET_SIZE(body))
        metrics = self.metrics
        if metrics is not None:  # `record_first_pull` / `record_pull_answer`, without the call
            if ctx is None:  # (a parked frame's `received` is when it was first read)
                key = (PULL_MESSAGE, code, not first_pass)
                latency = <double>monotonic() - <double>received
            else:
                key = (ctx.request.code, code, ctx.resumed)
                latency = <double>monotonic() - <double>ctx.received_s + <double>ctx.held_s
            tally_pull(metrics, key, latency, group_name, topic, queue_id, next_offset,
                       len(sizes), PyBytes_GET_SIZE(body))
        return head, body

    cdef object _subscription(self, topic, expression, sub_version):
        """`Subscription.parse(topic, expression, sub_version)`, kept by the lane: a push
        consumer sends the same subscription with every pull."""
        key = (topic, expression, sub_version)
        cdef PyObject* found = PyDict_GetItem(self.subscriptions, key)
        if found != NULL:
            return <object>found
        sub = parse_subscription(topic, expression, sub_version)
        if len(self.subscriptions) >= MOST_SUBSCRIPTIONS:
            self.subscriptions.clear()
        PyDict_SetItem(self.subscriptions, key, sub)
        return sub

    cdef int _commit(self, group_name, topic, long long queue_id, long long offset) except -1:
        """`ConsumerOffsetManager.commit`, without the call for a queue the group has an
        offset for already: the one that changes is set under the manager's lock, and the
        manager told to write it. A group's first offset for a queue goes through `commit`
        (which arranges its prompt write)."""
        offsets = self.offsets
        queues = offsets.table.get(topic + SEPARATOR + group_name)
        cdef PyObject* found = NULL
        if queues is not None:
            found = PyDict_GetItem(queues, queue_id)
        if found == NULL:
            offsets.commit(group_name, topic, queue_id, offset)
            return 0
        if <long long><object>found == offset:
            return 0
        lock = offsets._lock
        lock.acquire()
        try:
            queues[queue_id] = offset
            offsets._dirty = True
        finally:
            lock.release()
        return 0
