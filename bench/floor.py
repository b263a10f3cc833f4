"""The floor a broker stands on: a minimal server that speaks just enough of the remoting
protocol for `rmqpy bench e2e` and writes nothing to disk. `make bench` runs the end-to-end
and the steady flows against it as well, as it sets latencies against the echo server: what
the same load generator, loopback TCP and event loop give on this machine when the server
does nothing beyond handing messages on.

    python -m rmqpy.bench.floor --port P

It is its own name server (every topic is routed to it, with 8 queues). A send becomes a v1
record kept in memory (topic `floor`, no properties: the load generator reads the body
only), until a pull of its queue is past it; a pull is answered at once with what its queue
holds from its offset on, else parked until a send reaches that queue or for its suspend
time (then PULL_NOT_FOUND), the waking send's read answering it in the same callback. Sends
and pulls with binary (ROCKETMQ) headers are served by `FloorState.serve_read` (compiled in
`bench._floor` when the compiled core is built); anything else, one frame at a time, by
`answer_other`. Nothing is checked: this is a probe, not a broker.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

from rmqpy.bench.processes import serve_on_port
from rmqpy.config.compiled import twin
from rmqpy.remoting.codes import RequestCode, ResponseCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.frame import FrameDecoder, encode_frames
from rmqpy.remoting.header_codec import decode_header
from rmqpy.remoting.wire import BINARY_FIXED, FRAME_PREFIX, I32, RPC_RESPONSE
from rmqpy.store.layout import MESSAGE_MAGIC_V1, RECORD_FIXED

QUEUES = 8
BROKER_NAME = "floor"
SUSPEND_S = 1.0
CHECK_INTERVAL_S = 0.2
SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)
PULL_CODE = RequestCode.PULL_MESSAGE
FIXED = RECORD_FIXED[(False, False)]  # IPv4 born and store hosts
LOOPBACK = socket.inet_aton("127.0.0.1")
NO_REMARK_NO_FIELDS = I32.pack(0) * 2
RECORD_TOPIC = b"floor"  # every record's, whatever the send said


def answer_frame(opaque: int, code: int, body: bytes = b"") -> bytes:
    """A response frame with a binary header and no fields."""
    header = BINARY_FIXED.pack(code, 0, 0, opaque, RPC_RESPONSE) + NO_REMARK_NO_FIELDS
    return (
        FRAME_PREFIX.pack(4 + len(header) + len(body), SerializeType.ROCKETMQ << 24 | len(header))
        + header
        + body
    )


def record(topic: bytes, queue_id: int, queue_offset: int, phy: int, body: bytes) -> bytes:
    tail = bytes([len(topic)]) + topic + b"\x00\x00"
    total = FIXED.size + len(body) + len(tail)
    head = FIXED.pack(total, MESSAGE_MAGIC_V1, 0, queue_id, 0, queue_offset, phy, 0, 0,
                      LOOPBACK, 0, 0, LOOPBACK, 0, 0, 0, len(body))  # fmt: skip
    return head + body + tail


class FloorState:
    """The queues, their parked pulls, and the sends and pulls of a read served at once."""

    def __init__(self) -> None:
        # Per queue: its records from queue offset `first` on, and where each starts in
        # `data`; one parked pull. What a pull is past is dropped: the bench has one
        # consumer a queue, with one pull of it out at a time.
        self.data: dict[int, bytearray] = {}
        self.starts: dict[int, list[int]] = {}
        self.first: dict[int, int] = {}
        self.parked: dict[int, tuple[Any, int, int, int, float]] = {}
        self.phy = 0

    def max_offset(self, queue_id: int) -> int:
        return self.first.get(queue_id, 0) + len(self.starts.get(queue_id, ()))

    def serve_read(self, transport: Any, buf: bytearray) -> int:
        """Serve the whole frames at the start of `buf` up to the first that is not a send or
        a pull with a binary header (or is cut); returns how many bytes were served. A read's
        sends are answered with one write, then the pulls they fill."""
        pos, end = 0, len(buf)
        acks: list[bytes] = []
        touched: set[int] = set()
        while end - pos >= 8:
            (length, type_and_len) = FRAME_PREFIX.unpack_from(buf, pos)
            if end - pos - 4 < length or type_and_len >> 24 != SerializeType.ROCKETMQ:
                break
            h = pos + 8
            code, _lang, _version, opaque, _flag = BINARY_FIXED.unpack_from(buf, h)
            if code not in SEND_CODES and code != PULL_CODE:
                break
            body_at = h + (type_and_len & 0xFFFFFF)
            fields = decode_header(SerializeType.ROCKETMQ, bytes(buf[h:body_at]), b"").ext_fields
            queue_id = _number(fields, "queueId", _number(fields, "e", 0))
            if code == PULL_CODE:
                self._pull(transport, opaque, queue_id, _number(fields, "queueOffset", 0),
                           _number(fields, "maxMsgNums", 32))  # fmt: skip
            else:
                self._store(bytes(buf[body_at : pos + 4 + length]), queue_id)
                acks.append(answer_frame(opaque, ResponseCode.SUCCESS))
                touched.add(queue_id)
            pos += 4 + length
        if acks:
            transport.write(b"".join(acks))
        for queue_id in touched:
            parked = self.parked.get(queue_id)
            if parked is not None and self.max_offset(queue_id) > parked[2]:
                del self.parked[queue_id]
                parked[0].write(self._pull_answer(*parked[1:4], queue_id))
        return pos

    def expired(self, now: float) -> list[tuple[Any, int]]:
        """(transport, opaque) of the parked pulls whose suspend time is up, no longer parked."""
        due = [q for q, p in self.parked.items() if p[4] <= now]
        return [self.parked.pop(q)[:2] for q in due]

    def _store(self, body: bytes, queue_id: int) -> None:
        data = self.data.setdefault(queue_id, bytearray())
        starts = self.starts.setdefault(queue_id, [])
        rec = record(RECORD_TOPIC, queue_id, self.max_offset(queue_id), self.phy, body)
        starts.append(len(data))
        data += rec
        self.phy += len(rec)

    def _pull(self, transport: Any, opaque: int, queue_id: int, offset: int, most: int) -> None:
        if self.max_offset(queue_id) > offset:
            transport.write(self._pull_answer(opaque, offset, most, queue_id))
        else:
            self.parked[queue_id] = (transport, opaque, offset, most, time.monotonic() + SUSPEND_S)

    def _pull_answer(self, opaque: int, offset: int, most: int, queue_id: int) -> bytes:
        """Up to `most` records from `offset` (from the first kept one, for an offset
        dropped already), those before `offset` dropped."""
        starts, data = self.starts[queue_id], self.data[queue_id]
        skip = max(offset - self.first.get(queue_id, 0), 0)
        if skip:
            cut = starts[skip]
            del data[:cut]
            self.starts[queue_id] = starts = [at - cut for at in starts[skip:]]
            self.first[queue_id] = offset
        stop = starts[most] if most < len(starts) else len(data)
        return answer_frame(opaque, ResponseCode.SUCCESS, bytes(data[:stop]))


def _number(fields: dict[str, str], key: str, default: int) -> int:
    """A header field that is a decimal number (as the compiled twin reads them), else
    `default`."""
    value = fields.get(key, "")
    return int(value) if value.isascii() and value.isdigit() else default


_compiled = twin("rmqpy.bench._floor")
State: type[FloorState] = FloorState if _compiled is None else _compiled.FloorState


def answer_other(state: FloorState, request: RemotingCommand, port: int) -> RemotingCommand:
    """The name-server and admin requests `rmqpy bench` makes; any other is just acknowledged."""
    ext = request.ext_fields
    if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
        route = {
            "brokerDatas": [{"brokerName": BROKER_NAME, "cluster": "floor",
                             "brokerAddrs": {"0": f"127.0.0.1:{port}"}}],
            "filterServerTable": {},
            "queueDatas": [{"brokerName": BROKER_NAME, "perm": 6, "readQueueNums": QUEUES,
                            "writeQueueNums": QUEUES, "topicSysFlag": 0}],
        }  # fmt: skip
        return request.response(body=json.dumps(route).encode())
    if request.code == RequestCode.GET_MAX_OFFSET:
        return request.response(ext_fields={"offset": str(state.max_offset(int(ext["queueId"])))})
    if request.code == RequestCode.GET_MIN_OFFSET:
        return request.response(ext_fields={"offset": "0"})
    if request.code == RequestCode.QUERY_CONSUMER_OFFSET:
        return request.response(ResponseCode.QUERY_NOT_FOUND, "no offset committed")
    return request.response()


class FloorProtocol(asyncio.Protocol):
    def __init__(self, state: FloorState, port: int) -> None:
        self.state, self.port = state, port
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while buf:
            served = self.state.serve_read(self.transport, buf)
            del buf[:served]
            if len(buf) < 4 or len(buf) - 4 < I32.unpack_from(buf, 0)[0]:
                return  # a cut frame: wait for the rest
            length = 4 + I32.unpack_from(buf, 0)[0]
            decoder = FrameDecoder()
            decoder.receive_data(bytes(buf[:length]))
            del buf[:length]
            request = decoder.next_command()
            if request is not None and self.transport is not None:
                answer = answer_other(self.state, request, self.port)
                self.transport.writelines(encode_frames([answer]))


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    state = State()
    server = await loop.create_server(lambda: FloorProtocol(state, port), "127.0.0.1", port)
    async with server:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            for transport, opaque in state.expired(time.monotonic()):
                transport.write(answer_frame(opaque, ResponseCode.PULL_NOT_FOUND))


def main(argv: list[str] | None = None) -> int:
    return serve_on_port("rmqpy.bench.floor", __doc__, serve, argv)


if __name__ == "__main__":
    raise SystemExit(main())
