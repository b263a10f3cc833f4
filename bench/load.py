"""The load generator: one process, uvloop, an asyncio `Protocol`, requests encoded once and
patched in place per send, many requests per write.

Headers use RocketMQ's binary form (serialize type 1): the opaque sits at a fixed offset of
every frame, so matching a response to its send time costs two `unpack_from`s and the
generator stays far cheaper per message than the broker. The born timestamp, a UNIQ_KEY per
message (what every stock producer sends, and the broker indexes), a per-message KEYS value
(`--keys`) and an end-to-end stamp at the start of each body (`--stamp`) are fixed-width
placeholders found once in the encoded frame and overwritten per send.

    python -m rmqpy.bench.load producer --addr H:P --topic T --queues 0,1,2,3 [--size 1024]
        [--inflight 64] [--batch 1] [--keys] [--wait] [--stamp] [--duration 10] [--rate 0]
    python -m rmqpy.bench.load consumer --addr H:P --topic T --group G --queues 0:OFFSET,1:OFFSET
        [--pull 32] [--stamp] [--duration 10] [--max 0]
    python -m rmqpy.bench.load echo --addr H:P [--size 1024] [--inflight 1]  (a `bench.echo` peer)

`--tls` connects over TLS without checking the server's certificate (a benchmark's own
self-signed one), in the closed loop only. With RMQPY_ACCESS_KEY and RMQPY_SECRET_KEY set,
every request is signed for a broker with plain ACL on (a producer signs each send again
after its placeholders are filled, in Python: slower than unsigned).

Every second it prints a JSON line `{"tick": n, "msgs", "bytes", "errors", "latency", ...}`
(latency: a `bench.stats.Histogram`), and at the end `{"done": true, ...}` with the totals,
the same summary fields and, for consumers, the next offset of each queue.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import select
import socket
import ssl
import struct
import sys
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvloop

from rmqpy.bench.stats import Histogram
from rmqpy.config.compiled import twin
from rmqpy.remoting.batch_body import BatchItem, encode_batch_body
from rmqpy.remoting.codes import DEFAULT_TOPIC, RequestCode, ResponseCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.frame import encode_frame, encode_frames
from rmqpy.remoting.headers.pull import FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION, FLAG_SUSPEND
from rmqpy.remoting.signature import ACCESS_KEY, SIGNATURE, Credentials, signature, signed_content
from rmqpy.remoting.wire import FRAME_PREFIX
from rmqpy.store.layout import MessageConst
from rmqpy.store.message import encode_properties, fixed_part

OPAQUE_AT = FRAME_PREFIX.size + 5  # code i16, language i8, version i16, then opaque
CODE_AT = FRAME_PREFIX.size
I32 = struct.Struct(">i")
CODE = struct.Struct(">h")
TICK_S = 1.0

BORN_PLACEHOLDER = b"9" * 13  # milliseconds since the epoch: 13 digits until 2286
KEY_PLACEHOLDER = b"K" * 16
UNIQ_PLACEHOLDER = b"U" * 32  # a stock producer's UNIQ_KEY (message id): 32 hex digits
STAMP_PLACEHOLDER = b"S" * 16  # microseconds since the epoch, zero-padded
STAMP = struct.Struct("16s")


# JSON headers (`--json`, what Java clients send) carry the opaque as text: frames hold this
# 10-digit placeholder, and a JSON load numbers its requests from JSON_OPAQUE_BASE so each
# opaque keeps 10 digits.
JSON_OPAQUE_PLACEHOLDER = 1_999_999_999
JSON_OPAQUE_BASE = 1_000_000_000
JSON_FIELDS = re.compile(rb'"(code|opaque)":(-?[0-9]+)')


CREDENTIALS = Credentials.from_env()  # the ACL account every request is signed with, if any
SIGNATURE_PLACEHOLDER = "Z" * 28  # base64 of a 20-byte HMAC-SHA1


def request_frame(
    code: int,
    ext: dict[str, str],
    body: bytes = b"",
    serialize_type: SerializeType = SerializeType.ROCKETMQ,
    sign: bool = True,
) -> bytearray:
    """The request's frame; signed with CREDENTIALS when set and `sign` (the opaque is not
    signed: patching it in later keeps the signature)."""
    opaque = JSON_OPAQUE_PLACEHOLDER if serialize_type is SerializeType.JSON else 0
    return bytearray(encode_frame(request(code, ext, body, serialize_type, sign, opaque)))


def request(
    code: int,
    ext: dict[str, str],
    body: bytes = b"",
    serialize_type: SerializeType = SerializeType.ROCKETMQ,
    sign: bool = True,
    opaque: int = 0,
) -> RemotingCommand:
    """The request as a command; signed with CREDENTIALS when set and `sign`."""
    cmd = RemotingCommand(
        code, opaque=opaque, ext_fields=dict(ext), body=body, serialize_type=serialize_type
    )
    if sign and CREDENTIALS is not None:
        CREDENTIALS.sign(cmd)
    return cmd


def addr_of(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def split_responses(
    buf: bytearray, on_response: Callable[[int, int, bytes], None], frames: bool = True
) -> None:
    """Call `on_response(opaque, code, frame)` for each whole frame in `buf`; drop them.
    Without `frames` the frame is not copied out (b"" is passed): a producer needs only
    the opaque and the code."""
    pos, end = 0, len(buf)
    i32, code_of = I32.unpack_from, CODE.unpack_from
    while end - pos >= 4:
        (length,) = i32(buf, pos)
        if end - pos - 4 < length:
            break
        frame = bytes(buf[pos : pos + 4 + length]) if frames else b""
        if buf[pos + 4] == SerializeType.JSON:
            on_response(*json_ids(buf, pos), frame)
        else:
            on_response(i32(buf, pos + OPAQUE_AT)[0], code_of(buf, pos + CODE_AT)[0], frame)
        pos += 4 + length
    del buf[:pos]


def tally_answers(
    buf: bytearray,
    sent_at: dict[int, float],
    samples: array[float],
    ok_codes: frozenset[int] | None,
    now: float,
) -> tuple[int, int]:
    """A producer's answers, every whole frame in `buf` at once (dropped from it): the round
    trip to `now` of each request sent at `sent_at[opaque]` (taken out) into `samples`, in
    ms; (answers whose code is in `ok_codes` (None: any), other answers). Answers to no
    request sent are skipped."""
    counts = [0, 0]

    def on_response(opaque: int, code: int, _frame: bytes) -> None:
        start = sent_at.pop(opaque, None)
        if start is not None:
            samples.append((now - start) * 1000)
            counts[ok_codes is not None and code not in ok_codes] += 1

    split_responses(buf, on_response, False)
    return counts[0], counts[1]


def json_ids(buf: bytearray, pos: int) -> tuple[int, int]:
    """(opaque, code) of the frame at `pos`, whose JSON header carries them as text."""
    header_end = pos + 8 + (I32.unpack_from(buf, pos + 4)[0] & 0xFFFFFF)
    found = dict(reversed(JSON_FIELDS.findall(buf, pos + 8, header_end)))
    return int(found[b"opaque"]), int(found[b"code"])


class LoadProtocol(asyncio.Protocol):
    """Sends pre-encoded frames; calls `on_response(opaque, code, frame)` per response, or
    `on_data(buffer)` once per read when given (it takes the whole frames out). Requests
    put in `pending` meanwhile (a consumer's next pulls) are encoded together and written
    once the read is handled: one write for all the pulls its answers call for."""

    def __init__(
        self,
        on_response: Callable[[int, int, bytes], None] | None,
        frames: bool,
        on_data: Callable[[bytearray], None] | None = None,
    ) -> None:
        if (on_response is None) == (on_data is None):
            raise ValueError("give on_response or on_data")
        self.on_response = on_response
        self.on_data = on_data
        self.frames = frames
        self.buffer = bytearray()
        self.pending: list[RemotingCommand] = []
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.on_response is not None:
            split_frames(self.buffer, self.on_response, self.frames)
        elif self.on_data is not None:
            self.on_data(self.buffer)
        if self.pending:
            self.write_pending()

    def write_pending(self) -> None:
        assert self.transport is not None
        self.transport.write(b"".join(encode_frames(self.pending)))
        self.pending.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)


TLS: list[ssl.SSLContext] = []  # set by --tls: every connection of this process uses it


def unverified_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def connect(
    addr: str,
    on_response: Callable[[int, int, bytes], None] | None,
    frames: bool = True,
    on_data: Callable[[bytearray], None] | None = None,
) -> LoadProtocol:
    host, port = addr_of(addr)
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(
        lambda: LoadProtocol(on_response, frames, on_data), host, port, ssl=TLS[0] if TLS else None
    )
    return proto


class Meter:
    """Counts what completed and reports it every second as one JSON line on stdout. The
    latencies of the seconds that began within the first `warmup_s` (connections, routes,
    the first pulls) are in those lines but left out of the totals."""

    def __init__(self, warmup_s: float = 0.0) -> None:
        self.warmup_s = warmup_s
        self.msgs = 0
        self.bytes = 0
        self.errors = 0
        # Request round trips and born-to-receipt latencies this second, ms: packed floats,
        # which the fold reads in place (a list of a second's floats took milliseconds to
        # convert, a stall in the middle of the load it measures).
        self.samples = array("d")
        self.e2e = array("d")
        self.ticks = 0
        self.total = {"msgs": 0, "bytes": 0, "errors": 0}
        self.latency = Histogram()
        self.e2e_latency = Histogram()
        self.began = time.perf_counter()
        self.second_began = self.began  # of the second being counted
        # A consumer's last message: after it, long polls only wait for more, and the rate
        # and `seconds` end there (None: a producer's, which run to the end).
        self.busy_until: float | None = None

    def answered(self, ok: int, errors: int, load: Requests) -> None:
        """Count answers `tally_frames` found: `ok` that count, `errors` that do not."""
        self.msgs += ok * load.msgs_per_request
        self.bytes += ok * load.bytes_per_request
        self.errors += errors

    def tick(self) -> None:
        """Report this second (one JSON line) and add it to the totals."""
        self.ticks += 1
        lat, e2e = self._fold()
        line: dict[str, Any] = {
            "tick": self.ticks,
            "msgs": self.msgs,
            "bytes": self.bytes,
            "errors": self.errors,
            "latency": lat.to_json(),
        }
        if e2e.count:
            line["e2e"] = e2e.to_json()
        emit(line)
        self.msgs = self.bytes = self.errors = 0

    def _fold(self) -> tuple[Histogram, Histogram]:
        lat, e2e = Histogram.of(self.samples), Histogram.of(self.e2e)
        self.total["msgs"] += self.msgs
        self.total["bytes"] += self.bytes
        self.total["errors"] += self.errors
        if self.second_began - self.began >= self.warmup_s:  # (not: when the second ends)
            self.latency.merge(lat)
            self.e2e_latency.merge(e2e)
        self.second_began = time.perf_counter()
        self.samples, self.e2e = array("d"), array("d")
        return lat, e2e

    def done(self, **extra: Any) -> dict[str, Any]:
        """The totals, the last part-second included (but not reported as a second)."""
        self._fold()
        seconds = (self.busy_until or time.perf_counter()) - self.began
        result: dict[str, Any] = {
            "done": True,
            **self.total,
            "seconds": round(seconds, 3),
            "msgs_per_s": round(self.total["msgs"] / seconds) if seconds else 0,
            "requests": self.latency.count,
            **self.latency.summary(),
            "latency": self.latency.to_json(),
            **extra,
        }
        if self.e2e_latency.count:
            result["e2e"] = self.e2e_latency.to_json()
        return result


def emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


class Ticker:
    """Calls `meter.tick()` (and `also`) every second until cancelled."""

    def __init__(self, meter: Meter, also: Callable[[], None] = lambda: None) -> None:
        self.meter = meter
        self.also = also
        self.loop = asyncio.get_running_loop()
        self.handle = self.loop.call_later(TICK_S, self._fire)

    def _fire(self) -> None:
        self.meter.tick()
        self.also()
        self.handle = self.loop.call_later(TICK_S, self._fire)

    def cancel(self) -> None:
        self.handle.cancel()


class Patchable:
    """A frame with its per-send fields located once: born timestamp, UNIQ_KEY and KEYS
    values, stamps."""

    def __init__(self, frame: bytearray, signed: bytearray | None = None) -> None:
        """`signed`: the bytes its signature covers, with the same placeholders (the frame
        then carries SIGNATURE_PLACEHOLDER, filled per send by `render`)."""
        self.frame = frame
        self.signed = signed
        if signed is not None:
            self.signed_at = (
                _find_all(signed, BORN_PLACEHOLDER),
                _find_all(signed, KEY_PLACEHOLDER),
                _find_all(signed, UNIQ_PLACEHOLDER),
                _find_all(signed, STAMP_PLACEHOLDER),
            )
            [self.signature_at] = _find_all(frame, SIGNATURE_PLACEHOLDER.encode())
        header_end = FRAME_PREFIX.size + (I32.unpack_from(frame, 4)[0] & 0xFFFFFF)
        self.born = _find_all(frame, BORN_PLACEHOLDER, 0, header_end)
        self.keys = _find_all(frame, KEY_PLACEHOLDER)
        self.uniqs = _find_all(frame, UNIQ_PLACEHOLDER)
        self.stamps = _find_all(frame, STAMP_PLACEHOLDER)
        self.json = frame[4] == SerializeType.JSON
        if self.json:
            [self.opaque_at] = _find_all(frame, b"%d" % JSON_OPAQUE_PLACEHOLDER, 0, header_end)

    def render(self, opaque: int, born: bytes, key_base: int, stamp: bytes) -> bytes:
        frame = self.frame
        if self.json:
            frame[self.opaque_at : self.opaque_at + 10] = b"%010d" % opaque
        else:
            I32.pack_into(frame, OPAQUE_AT, opaque)
        for at in self.born:
            frame[at : at + 13] = born
        for i, at in enumerate(self.keys):
            frame[at : at + 16] = b"%016d" % (key_base + i)
        for i, at in enumerate(self.uniqs):
            frame[at : at + 32] = b"%032X" % (key_base + i)
        for at in self.stamps:
            STAMP.pack_into(frame, at, stamp)
        if self.signed is not None:
            self._sign(born, key_base, stamp)
        return bytes(frame)

    def _sign(self, born: bytes, key_base: int, stamp: bytes) -> None:
        assert self.signed is not None and CREDENTIALS is not None
        content = self.signed
        borns, keys, uniqs, stamps = self.signed_at
        for at in borns:
            content[at : at + 13] = born
        for i, at in enumerate(keys):
            content[at : at + 16] = b"%016d" % (key_base + i)
        for i, at in enumerate(uniqs):
            content[at : at + 32] = b"%032X" % (key_base + i)
        for at in stamps:
            STAMP.pack_into(content, at, stamp)
        at = self.signature_at
        self.frame[at : at + 28] = signature(bytes(content), CREDENTIALS.secret_key).encode()


def _find_all(data: bytearray, needle: bytes, start: int = 0, end: int | None = None) -> list[int]:
    found = []
    stop = len(data) if end is None else end
    at = data.find(needle, start, stop)
    while at >= 0:
        found.append(at)
        at = data.find(needle, at + len(needle), stop)
    return found


def send_frames(
    topic: str,
    size: int,
    batch: int,
    queues: list[int],
    *,
    keys: bool = False,
    wait: bool = False,
    stamp: bool = False,
    json_headers: bool = False,
) -> list[Patchable]:
    """One SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE) frame per queue, placeholders in place."""
    body = os.urandom(size // 2 + 1).hex().encode()[:size]
    if stamp:
        body = STAMP_PLACEHOLDER + body[len(STAMP_PLACEHOLDER) :]
    # Every message carries a UNIQ_KEY, as every stock RocketMQ producer sends (the broker
    # indexes it); KEYS only with --keys.
    props = {
        MessageConst.WAIT: "true" if wait else "false",
        MessageConst.UNIQ_KEY: UNIQ_PLACEHOLDER.decode(),
    }
    if keys:
        props[MessageConst.KEYS] = KEY_PLACEHOLDER.decode()
    frames = []
    kind = SerializeType.JSON if json_headers else SerializeType.ROCKETMQ
    # A topic the first send creates gets this many queues (at most TBW102's): enough for
    # every queue the load sends to, as a client whose defaultTopicQueueNums was set for it.
    default_queue_nums = str(max(queues) + 1)
    for queue_id in queues:
        ext = {
            "a": "bench-producer",
            "b": topic,
            "c": DEFAULT_TOPIC,
            "d": default_queue_nums,
            "e": str(queue_id),
            "f": "0",
            "g": BORN_PLACEHOLDER.decode(),
            "h": "0",
            "i": encode_properties(props),
        }
        code, payload = RequestCode.SEND_MESSAGE_V2, body
        if batch > 1:
            ext["m"] = "true"
            ext["i"] = encode_properties({MessageConst.WAIT: props[MessageConst.WAIT]})
            items = [BatchItem(0, body, encode_properties(props)) for _ in range(batch)]
            code, payload = RequestCode.SEND_BATCH_MESSAGE, encode_batch_body(items)
        if CREDENTIALS is None:
            frames.append(Patchable(request_frame(code, ext, payload, kind)))
            continue
        ext[ACCESS_KEY] = CREDENTIALS.access_key
        signed = bytearray(signed_content(ext, payload))
        ext[SIGNATURE] = SIGNATURE_PLACEHOLDER
        frames.append(Patchable(request_frame(code, ext, payload, kind, sign=False), signed))
    return frames


@dataclass(frozen=True, slots=True)
class Requests:
    """What a producer (or echo) load sends: `frames` round robin to `addr` for `duration_s`,
    at most `inflight` outstanding; an answer whose code is in `ok_codes` (None: any) counts
    `msgs_per_request` messages and `bytes_per_request` bytes."""

    addr: str
    frames: list[Patchable]
    msgs_per_request: int
    bytes_per_request: int
    inflight: int
    duration_s: float
    ok_codes: frozenset[int] | None = frozenset({ResponseCode.SUCCESS})
    warmup_s: float = 0.0


async def run_requests(load: Requests) -> dict[str, Any]:
    """Keep `inflight` requests outstanding for `duration_s` (a closed loop; `run_paced`
    sends at a given rate). The sender sleeps on a plain future that the first answer of a
    read (or the second's tick) completes: a `wait_for` per wake-up cost more than a send."""
    frames, inflight, msgs_per_request = load.frames, load.inflight, load.msgs_per_request
    sent_at: dict[int, float] = {}
    meter = Meter(load.warmup_s)
    next_opaque = JSON_OPAQUE_BASE if frames[0].json else 1
    loop = asyncio.get_running_loop()
    waiter: list[asyncio.Future[None]] = [loop.create_future()]

    def wake() -> None:
        if not waiter[0].done():
            waiter[0].set_result(None)

    perf = time.perf_counter
    ok_codes = load.ok_codes

    def on_data(buf: bytearray) -> None:
        ok, errors = tally_frames(buf, sent_at, meter.samples, ok_codes, perf())
        if ok or errors:
            meter.answered(ok, errors, load)
            wake()

    proto = await connect(load.addr, None, False, on_data)
    assert proto.transport is not None
    transport = proto.transport
    proto.closed.add_done_callback(lambda _f: wake())
    ticker = Ticker(meter, wake)
    deadline = perf() + load.duration_s
    key_base = os.getpid() % 10_000 * 10**12
    i = 0
    render = Patchable.render if frames[0].signed is not None else render_frame
    while (now := perf()) < deadline and not proto.closed.done():
        parts = []
        born = b"%13d" % (time.time_ns() // 1_000_000)
        stamp = b"%016d" % (time.time_ns() // 1000)
        while len(sent_at) < inflight:
            patchable = frames[i % len(frames)]
            i += 1
            parts.append(render(patchable, next_opaque, born, key_base, stamp))
            key_base += msgs_per_request
            sent_at[next_opaque] = now
            next_opaque += 1
        if parts:
            transport.writelines(parts)
        waiter[0] = loop.create_future()
        await waiter[0]
    drain_until = perf() + 5.0  # answers to what is in flight still count; nothing new is sent
    while sent_at and not proto.closed.done() and perf() < drain_until:
        waiter[0] = loop.create_future()
        await waiter[0]
    ticker.cancel()
    meter.errors += len(sent_at)  # unanswered: lost with the connection, or 5 s late
    transport.close()
    return meter.done(lost_connection=proto.closed.done())


def run_paced(load: Requests, rate: float) -> dict[str, Any]:
    """Open-loop load: `rate` requests/s, each sent when its time comes (at most `inflight`
    outstanding), on a blocking socket, paced by `time.sleep` in this thread while another
    one reads the answers. asyncio's timers round to the millisecond: pacing with them
    either sends bursts or spins a core, and on two cores a spinning generator takes the CPU
    the server under test needs, which is then measured as its latency. A sleep oversleeps
    by tens of microseconds, so at high rates several requests fall due in it: they go in one
    write, each stamped when written, else a write per request caps the rate this thread can
    send below what it was asked for."""
    frames, inflight, msgs_per_request = load.frames, load.inflight, load.msgs_per_request
    sock = socket.create_connection(addr_of(load.addr))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent_at: dict[int, float] = {}
    meter = Meter(load.warmup_s)
    perf = time.perf_counter
    sending = threading.Event()
    sending.set()
    closed = threading.Event()

    def receive() -> None:
        """Answers and the per-second report, until the sends are over and answered, the
        connection closes, or 5 s after the last send."""
        buf = bytearray()
        next_tick = perf() + TICK_S
        drain_until = float("inf")
        while (sending.is_set() or sent_at) and perf() < drain_until:
            if select.select([sock], [], [], 0.05)[0]:
                data = sock.recv(1 << 16)
                if not data:
                    closed.set()
                    return
                buf += data
                meter.answered(
                    *tally_frames(buf, sent_at, meter.samples, load.ok_codes, perf()), load
                )
            if perf() >= next_tick:
                meter.tick()
                next_tick += TICK_S
            if not sending.is_set() and drain_until == float("inf"):
                drain_until = perf() + 5.0

    receiver = threading.Thread(target=receive, name="receiver", daemon=True)
    receiver.start()
    interval = 1.0 / rate
    began = next_send = perf()
    deadline = began + load.duration_s
    key_base = os.getpid() % 10_000 * 10**12
    opaque = JSON_OPAQUE_BASE if frames[0].json else 0
    render = Patchable.render if frames[0].signed is not None else render_frame
    sent = writes = 0
    try:
        while not closed.is_set() and (now := perf()) < deadline:
            if next_send > now:
                time.sleep(next_send - now)
            if len(sent_at) >= inflight:
                time.sleep(interval)
                continue
            due = min(int((perf() - next_send) / interval) + 1, inflight - len(sent_at))
            born = b"%13d" % (time.time_ns() // 1_000_000)
            stamp = b"%016d" % (time.time_ns() // 1000)
            batch = []
            for _ in range(due):
                opaque += 1
                batch.append(render(frames[opaque % len(frames)], opaque, born, key_base, stamp))
                key_base += msgs_per_request
                sent_at[opaque] = perf()
            sock.sendall(b"".join(batch))
            sent += len(batch)
            writes += 1
            next_send += interval * len(batch)
    except OSError:
        closed.set()
    sending.clear()
    receiver.join()
    meter.errors += len(sent_at)  # unanswered: lost with the connection, or 5 s late
    sock.close()
    return meter.done(lost_connection=closed.is_set(), sent=sent, writes=writes)


async def consume(
    addr: str,
    topic: str,
    group: str,
    offsets: dict[int, int],
    pull: int,
    duration_s: float,
    max_msgs: int,
    stamp: bool,
    warmup_s: float = 0.0,
    linger_s: float = 0.0,
) -> dict[str, Any]:
    """Pull every queue from its offset onwards, `pull` messages a request, one long-polling
    request per queue in flight (as a push consumer does), committing offsets in the pull
    (sysFlag bit 0). Each response is counted and the queue's next pull sent from the
    protocol callback itself (a queue and a task per response would cost the generator more
    than a pull costs the broker). Counts the records in each body; with `stamp`, the body's
    first 16 bytes give the end-to-end latency.

    With `linger_s`, a queue whose pull still found messages at the deadline is pulled on
    until one comes back empty (a long poll that waited in vain) or `linger_s` more
    seconds pass: producers started alongside may still be sending, and what they sent
    is then received and counted too."""
    sent_at: dict[int, tuple[float, int]] = {}
    meter = Meter(warmup_s)
    perf = time.perf_counter
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    opaque = 0
    total = 0
    flags = str(FLAG_COMMIT_OFFSET | FLAG_SUSPEND | FLAG_SUBSCRIPTION)
    deadline = perf() + duration_s

    def issue(queue_id: int) -> None:
        nonlocal opaque
        opaque += 1
        ext = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offsets[queue_id]),
            "maxMsgNums": str(pull),
            "sysFlag": flags,
            "commitOffset": str(offsets[queue_id]),
            "suspendTimeoutMillis": "1000",
            "subscription": "*",
            "subVersion": "0",
        }
        proto.pending.append(request(RequestCode.PULL_MESSAGE, ext, opaque=opaque))
        sent_at[opaque] = (perf(), queue_id)

    def on_response(opaque: int, code: int, frame: bytes) -> None:
        nonlocal total
        entry = sent_at.pop(opaque, None)
        if entry is None:
            return
        now = perf()
        queue_id = entry[1]
        count = 0
        if code == ResponseCode.SUCCESS:  # a pull held until timeout is a wait, not work
            meter.samples.append((now - entry[0]) * 1000)
            meter.busy_until = now
            count, size = count_pulled(frame, stamp, meter.e2e)
            meter.msgs += count
            meter.bytes += size
            total += count
            offsets[queue_id] += count
        elif code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            meter.errors += 1
        in_time = now < deadline or (count > 0 and now < deadline + linger_s)
        if in_time and not (max_msgs and total >= max_msgs):
            issue(queue_id)
        elif not sent_at and not finished.done():
            finished.set_result(None)

    proto = await connect(addr, on_response)
    assert proto.transport is not None
    ticker = Ticker(meter)
    for queue_id in offsets:
        issue(queue_id)
    proto.write_pending()
    # Pulls in flight at the deadline are long-polling ones at most a second long (or lost
    # with the connection); their answers still count.
    await asyncio.wait(
        [finished, proto.closed],
        timeout=duration_s + linger_s + 3.0,
        return_when=asyncio.FIRST_COMPLETED,
    )
    if proto.closed.done() or sent_at:
        meter.errors += len(sent_at) or 1
    ticker.cancel()
    proto.transport.close()
    return meter.done(offsets={str(q): o for q, o in offsets.items()})


def count_records(frame: bytes, stamp: bool, e2e: array[float]) -> tuple[int, int]:
    """(records, body bytes) of a pull response; with `stamp`, each record's end-to-end
    latency is added to `e2e`."""
    header_len = I32.unpack_from(frame, 4)[0] & 0xFFFFFF
    body = memoryview(frame)[8 + header_len :]
    now_us = time.time_ns() // 1000 if stamp else 0
    pos = count = 0
    while pos < len(body):
        if stamp:
            sent_us = _body_stamp(body, pos)
            if sent_us:
                e2e.append((now_us - sent_us) / 1000)
        size = I32.unpack_from(body, pos)[0]
        if size <= 0:
            break  # not a record: what was counted stands
        pos += size
        count += 1
    return count, len(body)


def _body_stamp(record: memoryview, pos: int) -> int:
    """The microsecond stamp at the start of a stored record's body, or 0 without one."""
    fixed = fixed_part(record, pos)
    body_len = fixed.unpack_from(record, pos)[-1]
    start = pos + fixed.size
    head = bytes(record[start : start + min(body_len, 16)])
    return int(head) if len(head) == 16 and head.isdigit() else 0


def echo_frames(size: int) -> list[Patchable]:
    return [Patchable(request_frame(RequestCode.SEND_MESSAGE_V2, {}, os.urandom(size)))]


# `Patchable.render`, `split_responses`, `tally_answers` and `count_records`, or their
# compiled twins where built.
_compiled = twin("rmqpy.bench._load")
render_frame: Callable[[Patchable, int, bytes, int, bytes], bytes] = (
    Patchable.render if _compiled is None else _compiled.render
)
split_frames: Callable[[bytearray, Callable[[int, int, bytes], None], bool], None] = (
    split_responses if _compiled is None else _compiled.split_responses
)
tally_frames: Callable[
    [bytearray, dict[int, float], array[float], frozenset[int] | None, float], tuple[int, int]
] = tally_answers if _compiled is None else _compiled.tally_answers
count_pulled: Callable[[bytes, bool, array[float]], tuple[int, int]] = (
    count_records if _compiled is None else _compiled.count_records
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmqpy.bench.load")
    parser.add_argument("mode", choices=["producer", "consumer", "echo"])
    parser.add_argument("--addr", required=True, help="host:port of the broker (or echo peer)")
    parser.add_argument("--topic", default="BenchTopic")
    parser.add_argument("--group", default="bench-consumer")
    parser.add_argument("--queues", default="0", help="queue ids, or queue:offset for consumers")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--keys", action="store_true", help="a unique KEYS value per message")
    parser.add_argument("--wait", action="store_true", help="WAIT=true: ack after the flush")
    parser.add_argument("--stamp", action="store_true", help="end-to-end stamps in bodies")
    parser.add_argument("--json", action="store_true", help="JSON headers, as Java clients send")
    parser.add_argument("--pull", type=int, default=32)
    parser.add_argument("--max", type=int, default=0, help="consumer: stop after this many")
    parser.add_argument("--linger", type=float, default=0.0,
                        help="consumer: seconds past --duration to pull on while pulls still "
                        "find messages")  # fmt: skip
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=0.0, help="requests/s; 0 = closed loop")
    parser.add_argument("--warmup", type=float, default=0.0,
                        help="seconds whose latencies the totals leave out")  # fmt: skip
    parser.add_argument("--tls", action="store_true", help="over TLS (closed loop only)")
    args = parser.parse_args(argv)
    if args.tls:
        if args.rate:
            parser.error("--tls takes the closed loop only (no --rate)")
        TLS.append(unverified_tls())
    # What the imports made lives as long as the process: out of the collector's sight, a
    # full collection no longer walks it (10-18 ms each, pauses that were measured as the
    # broker's latency).
    gc.freeze()
    if args.mode == "consumer":
        offsets = {}
        for part in args.queues.split(","):
            queue, _, offset = part.partition(":")
            offsets[int(queue)] = int(offset or 0)
        work = consume(
            args.addr, args.topic, args.group, offsets, args.pull, args.duration, args.max,
            args.stamp, args.warmup, args.linger,
        )  # fmt: skip
    else:
        if args.mode == "echo":
            frames, msgs, ok = echo_frames(args.size), 1, None
        else:
            queues = [int(q) for q in args.queues.split(",")]
            frames = send_frames(
                args.topic, args.size, args.batch, queues,
                keys=args.keys, wait=args.wait, stamp=args.stamp, json_headers=args.json,
            )  # fmt: skip
            msgs, ok = args.batch, frozenset({ResponseCode.SUCCESS})
        load = Requests(args.addr, frames, msgs, msgs * args.size, args.inflight, args.duration, ok,
                        args.warmup)  # fmt: skip
        if args.rate:
            emit(run_paced(load, args.rate))
            return 0
        work = run_requests(load)
    emit(uvloop.run(work))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C at `rmqpy bench`, which reports it: no traceback here
        sys.exit(130)
