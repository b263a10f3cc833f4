"""One TCP connection speaking remoting frames, on asyncio's `BufferedProtocol`.

Both ends use it: the server hands requests to its handler, the client matches responses to
pending `invoke`s by opaque, and either side may send requests to the other (the broker sends
NOTIFY_CONSUMER_IDS_CHANGED to consumers). Flow control, per connection:

* reading pauses while `max_in_flight` requests from this peer are being handled, and while
  the transport's write buffer is above its high-water mark (a peer that never reads its
  responses stops being read, instead of growing our memory);
* a connection with no traffic for `idle_timeout_s` is closed (RocketMQ's 120 s);
* requests sent in one loop turn are written together at the start of the next, but for
  one that finds no other awaiting its answer (`send`): many concurrent requests cost one
  write here and a few reads at the peer, not one each.

A frame that cannot be decoded closes this connection only, and is logged: nothing more is
read from it, and it is closed once the requests before that frame are answered (or after
`CLOSE_GRACE_S`, for one that waits longer, as a parked pull may).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from itertools import count
from typing import cast

import structlog

from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.deadlines import Deadlines
from rmqpy.remoting.errors import (
    ForeignProtocolError,
    RemoteProtocolError,
    RemotingConnectionError,
    RemotingError,
    RemotingTimeoutError,
)
from rmqpy.remoting.frame import FrameDecoder, encode_frames
from rmqpy.remoting.wire import RPC_ONEWAY, RPC_RESPONSE

ONEWAY, RESPONSE = RPC_ONEWAY, RPC_RESPONSE  # the flag bits, tested per frame

log = structlog.get_logger(__name__)

# A connection's read buffer starts small and doubles each time a read fills it, up to the
# largest: an idle connection costs 4 KiB, not 256 (3,000 idle clients took 857 MB before).
READ_BUFFER_START_BYTES = 4 * 1024
READ_BUFFER_BYTES = 256 * 1024
IDLE_TIMEOUT_S = 120.0
CLOSE_GRACE_S = 3.0  # how long a connection closing for a bad frame waits for its answers
MAX_IN_FLIGHT = 1024

RequestHandler = Callable[["Connection", RemotingCommand], None]
# A handler may also take the requests of one read together (`batch`), in order.
BatchHandler = Callable[["Connection", list[RemotingCommand]], None]
# ... and run and answer those at the start of a read before they are decoded (`frames`):
# how many bytes it took.
FramesHandler = Callable[["Connection", memoryview], int]

_opaques = count(1)


def next_opaque() -> int:
    """Opaques come from one process-wide counter, as in Java's `RemotingCommand`."""
    return next(_opaques) & 0x7FFFFFFF


def _expire(future: asyncio.Future[RemotingCommand], peer: str, timeout_s: float) -> None:
    if not future.done():
        future.set_exception(RemotingTimeoutError(f"no response from {peer} in {timeout_s:g} s"))


def peer_text(peer: object) -> str:
    """A socket's peer as logs and the ACL name it: `host:port`."""
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


class Connection(asyncio.BufferedProtocol):
    def __init__(
        self,
        on_request: RequestHandler,
        on_closed: Callable[[Connection], None] = lambda _c: None,
        *,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.on_request = on_request
        self.on_requests: BatchHandler | None = getattr(on_request, "batch", None)
        self.on_frames: FramesHandler | None = getattr(on_request, "frames", None)
        # `on_frames`' own note on this connection (which of its readers took the last read).
        self.frames_hint: Callable[..., int] | None = None
        self.on_closed = on_closed
        self.idle_timeout_s = idle_timeout_s
        self.max_in_flight = max_in_flight
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        # The loop it was made on, kept: asking for the running loop costs a getpid syscall
        # (CPython 3.11 checks the loop belongs to this process), once per read otherwise.
        self._loop = asyncio.get_running_loop()
        self.closed = self._loop.create_future()
        self.in_flight = 0
        self._decoder = FrameDecoder()
        self._buffer = bytearray(READ_BUFFER_START_BYTES)
        self._view = memoryview(self._buffer)  # handed to the transport for every read
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        # Each pending request's timeout (opaque -> its timeout_s), on one timer for all.
        self._deadlines: Deadlines[int, float] = Deadlines(self._loop, self._time_out)
        self._write_paused = False
        self._held: list[bytes] | None = None  # frames sent after this turn's first (`send`)
        self._reading_paused = False
        self._bad_frame = False  # read no more: close once what was taken is answered
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._last_activity = 0.0
        self._idle_handle: asyncio.TimerHandle | None = None

    # --- asyncio protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport does not subclass asyncio.Transport, but has its methods.
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.peer = peer_text(peer)
        self._touch()
        self._schedule_idle_check()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self._last_activity = self._loop.time()  # (`_touch`, inline: every read)
        data = self._view[:nbytes]
        if self.on_frames is not None and self._decoder.idle:
            data = data[self.on_frames(self, data) :]  # what it took is answered
        if data:
            self._decoder.receive_data(data)
        if nbytes == len(self._buffer) < READ_BUFFER_BYTES:
            # Replaced, never resized: the transport may still hold a view of the old one.
            self._buffer = bytearray(2 * nbytes)
            self._view = memoryview(self._buffer)
        if data:
            self._process()

    def _process(self) -> None:
        """Handle buffered frames until none is whole or this connection is paused (frames
        left behind wait for `_update_reading` to resume)."""
        decoder = self._decoder
        try:
            if self.on_requests is None:
                while not self._reading_paused and (cmd := decoder.next_command()) is not None:
                    self._dispatch(cmd)
            else:
                while not self._reading_paused and (
                    cmds := decoder.next_commands(self.max_in_flight - self.in_flight)
                ):
                    self._dispatch_all(cmds)
        except ForeignProtocolError as exc:
            log.warning(str(exc), peer=self.peer)
            if exc.reply and self.transport is not None:
                self.transport.write(exc.reply)
                self.transport.close()  # after the reply is written
            else:
                self.abort()
        except RemoteProtocolError as exc:
            log.warning("closing connection: bad frame", peer=self.peer, error=str(exc))
            self._close_after_answers()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle_handle is not None:
            self._idle_handle.cancel()
        self._deadlines.close()
        error = RemotingConnectionError(f"connection to {self.peer} closed")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(error)
        if not self.closed.done():
            self.closed.set_result(None)
        self.on_closed(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()
        self._update_reading()

    # --- sending ------------------------------------------------------------------------------
    @property
    def reading_paused(self) -> bool:
        return self._reading_paused

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def send(self, cmd: RemotingCommand) -> None:
        """Write a command (never blocks; see `drain` for back-pressure). The first command
        of a loop turn is written at once when no other request awaits its answer (a lone
        caller waits for nothing); any other is held with the rest of its turn's and they
        are written together at the start of the next one, so that many requests made at
        once (a producer's concurrent sends, a consumer's pulls woken by one read while its
        other pulls are in flight) cost one socket write, not one each: on loopback a write
        costs about as much as the peer's whole receive, which runs in the writer's system
        call."""
        if not self.is_open:
            raise RemotingConnectionError(f"connection to {self.peer} is closed")
        assert self.transport is not None
        if self._held is not None:
            self._held += encode_frames((cmd,))
            return
        pending = self._pending
        if not pending or (len(pending) == 1 and cmd.opaque in pending):
            self.transport.writelines(encode_frames((cmd,)))  # alone: it waits for nothing
            self._held = []
        else:
            self._held = encode_frames((cmd,))
        self._loop.call_soon(self._write_held)

    def _write_held(self) -> None:
        held, self._held = self._held, None
        if held and self.is_open:
            assert self.transport is not None
            self.transport.writelines(held)

    def respond(self, request: RemotingCommand, response: RemotingCommand) -> None:
        """Answer a request this connection received (nothing for a oneway request), and
        count it as handled."""
        self.respond_all([(request, response)])

    def respond_all(self, pairs: Sequence[tuple[RemotingCommand, RemotingCommand]]) -> None:
        """Answer many requests with one write (a oneway request is only counted as
        handled)."""
        self.in_flight -= len(pairs)
        parts = encode_frames(
            [response for request, response in pairs if not request.flag & ONEWAY]
        )
        if parts and self.is_open:
            assert self.transport is not None
            self.transport.writelines(parts)
        if self._reading_paused:  # fewer in flight can only resume reading
            self._update_reading()

    def answer_frames(self, frames: list[bytes], handled: int) -> None:
        """`respond_all` for answers already written as whole frames (none for a oneway
        request): `handled` requests are done."""
        self.in_flight -= handled
        transport = self.transport  # (`is_open`, inline: every answer)
        if frames and transport is not None and not transport.is_closing():
            transport.writelines(frames)
        if self._reading_paused:
            self._update_reading()

    def taken(self, requests: int) -> None:
        """Count `requests` taken straight from a read's frames, not through the decoder,
        as handled-to-be: each is answered as decoded ones are (`respond_all`)."""
        self.in_flight += requests

    def request_done(self) -> None:
        self.in_flight -= 1
        self._update_reading()

    async def drain(self) -> None:
        if self._write_paused and self.is_open:
            waiter = self._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    async def invoke(self, cmd: RemotingCommand, timeout_s: float = 3.0) -> RemotingCommand:
        """Send a request and wait for the response with the same opaque, `timeout_s` at
        most (RemotingTimeoutError)."""
        cmd.opaque = opaque = next_opaque()
        future: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[opaque] = future
        # A deadline the future is failed at rather than `wait_for`: on Python 3.11
        # `wait_for` can swallow a cancel that lands as the response arrives, leaving the
        # caller's task unstoppable.
        self._deadlines.add(opaque, timeout_s, timeout_s)
        try:
            self.send(cmd)
            return await future
        finally:
            self._deadlines.discard(opaque)
            self._pending.pop(opaque, None)

    def _time_out(self, opaque: int, timeout_s: float) -> None:
        future = self._pending.get(opaque)
        if future is not None:
            _expire(future, self.peer, timeout_s)

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next_opaque()
        cmd.flag |= RPC_ONEWAY
        self.send(cmd)

    def close(self) -> None:
        if self.transport is not None:
            self._write_held()
            self.transport.close()

    async def aclose(self) -> None:
        """Close and wait until the transport is gone."""
        self.close()
        await self.closed

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # --- internals ------------------------------------------------------------------------------
    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.flag & RESPONSE:
            future = self._pending.pop(cmd.opaque, None)
            if future is not None and not future.done():
                future.set_result(cmd)
            return
        self.in_flight += 1
        if self.in_flight >= self.max_in_flight:  # more in flight can only pause reading
            self._update_reading()
        try:
            self.on_request(self, cmd)
        except RemotingError as exc:
            log.warning("request failed", peer=self.peer, code=cmd.code, error=str(exc))
            self.request_done()

    def _dispatch_all(self, cmds: list[RemotingCommand]) -> None:
        """`_dispatch` for the commands of one read, the requests handed over together."""
        requests = [cmd for cmd in cmds if not cmd.flag & RESPONSE]
        if len(requests) < len(cmds):
            for cmd in cmds:
                if cmd.flag & RESPONSE:
                    self._dispatch(cmd)
            if not requests:
                return
        assert self.on_requests is not None
        self.in_flight += len(requests)
        if self.in_flight >= self.max_in_flight:  # more in flight can only pause reading
            self._update_reading()
        try:
            self.on_requests(self, requests)
        except RemotingError as exc:
            log.warning("requests failed", peer=self.peer, count=len(requests), error=str(exc))

    def _close_after_answers(self) -> None:
        """Read no more from this connection; close it once every request taken from it is
        answered, or after `CLOSE_GRACE_S` at the latest."""
        self._bad_frame = True
        if self.transport is None or self.transport.is_closing():
            return
        if self.in_flight <= 0:
            self.close()
            return
        self._reading_paused = True
        self.transport.pause_reading()
        self._loop.call_later(CLOSE_GRACE_S, self.abort)

    def _update_reading(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if self._bad_frame:  # never read again; closed once nothing is in flight
            if self.in_flight <= 0:
                self.close()
            return
        should_pause = self._write_paused or self.in_flight >= self.max_in_flight
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()
            self._loop.call_soon(self._process)

    def _touch(self) -> None:
        self._last_activity = self._loop.time()

    def _schedule_idle_check(self) -> None:
        loop = self._loop
        delay = self._last_activity + self.idle_timeout_s - loop.time()
        # Busy with requests but silent: look again a whole timeout later, not at once.
        self._idle_handle = loop.call_later(
            delay if delay > 0 else self.idle_timeout_s, self._idle_check
        )

    def _idle_check(self) -> None:
        loop = self._loop
        if self.in_flight == 0 and loop.time() - self._last_activity >= self.idle_timeout_s:
            log.info("closing idle connection", peer=self.peer, idle_s=self.idle_timeout_s)
            self.close()
            return
        if self.is_open:
            self._schedule_idle_check()
