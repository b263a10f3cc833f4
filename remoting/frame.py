"""Frames in and out, without I/O (h11's pattern): feed bytes, take whole commands.

    decoder = FrameDecoder()
    decoder.receive_data(chunk)
    while (cmd := decoder.next_command()) is not None:
        ...

A frame is ``i32 totalLen | i32 typeAndLen | header | body`` (layout in `remoting.wire`).
The decoder checks the length against the 16 MiB limit before waiting for the rest, so a
bogus length costs no memory; any violation raises `RemoteProtocolError`, after which the
decoder stays broken (the connection is to be closed, as Java's `NettyDecoder` does).
A connection that opens with another protocol's first bytes (an HTTP request, the HTTP/2
preface of a gRPC client, a TLS ClientHello) raises `ForeignProtocolError` saying so.
"""

from __future__ import annotations

from collections.abc import Sequence

from rmqpy.config.compiled import twin
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import ForeignProtocolError, LocalProtocolError, RemoteProtocolError
from rmqpy.remoting.header_codec import decode_header, encode_header
from rmqpy.remoting.wire import FRAME_LENGTH, FRAME_PREFIX, MAX_FRAME_LENGTH, MAX_HEADER_LENGTH

_COMPACT_AT = 64 * 1024

# What other protocols' clients send first. Each reads as a frame length far over the limit
# (ASCII letters, or TLS's 0x16 0x03), so only a connection's refused first frame is looked at.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# Their first four bytes: all a refused length has when the request comes a byte at a time.
HTTP_METHODS = tuple(m[:4] for m in (b"GET ", b"HEAD", b"POST", b"PUT ", b"DELETE",
                                     b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE"))  # fmt: skip
TLS_HANDSHAKE = (0x16, 0x03)  # record type handshake, protocol version 3.x
NOT_HTTP = "this port speaks RocketMQ remoting, not HTTP"
HTTP_REPLY = (
    f"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {len(NOT_HTTP) + 1}"
    f"\r\nConnection: close\r\n\r\n{NOT_HTTP}\n"
).encode()


def foreign_protocol(head: bytes) -> ForeignProtocolError | None:
    """What a connection opening with `head` speaks instead of RocketMQ remoting, if known."""
    if head.startswith(HTTP2_PREFACE[:4]):
        return ForeignProtocolError(
            "this port speaks RocketMQ remoting; gRPC (RocketMQ 5 proxy protocol) is not served"
        )
    if head.startswith(HTTP_METHODS):
        return ForeignProtocolError(NOT_HTTP, HTTP_REPLY)
    if tuple(head[:2]) == TLS_HANDSHAKE:
        return ForeignProtocolError("this port speaks RocketMQ remoting without TLS")
    return None


def decode_frames(
    buf: bytes | bytearray | memoryview, pos: int, max_frame_length: int, first: bool
) -> tuple[list[RemotingCommand], int, RemoteProtocolError | None]:
    """Every whole frame in `buf` from `pos`, in one call: (the commands, where the next
    frame starts, the error that stopped decoding or None). `first`: no frame has been
    taken from this connection yet, so a refused length may be another protocol's. The
    commands hold copies of their bytes: `buf` may be reused once this returns."""
    commands: list[RemotingCommand] = []
    try:
        while len(buf) - pos >= FRAME_LENGTH.size:
            total = FRAME_LENGTH.unpack_from(buf, pos)[0]
            if total < 4:
                raise RemoteProtocolError(f"frame length {total} is shorter than its header length")
            if total > max_frame_length:
                head = bytes(buf[pos : pos + 8])
                foreign = foreign_protocol(head) if first and not commands else None
                if foreign is not None:
                    raise foreign
                raise RemoteProtocolError(
                    f"frame length {total} exceeds the limit of {max_frame_length} bytes"
                )
            end = pos + FRAME_LENGTH.size + total
            if len(buf) < end:
                break
            type_and_len = FRAME_PREFIX.unpack_from(buf, pos)[1]
            kind = (type_and_len >> 24) & 0xFF
            header_len = type_and_len & MAX_HEADER_LENGTH
            start = pos + FRAME_PREFIX.size
            if header_len > end - start:
                raise RemoteProtocolError(
                    f"header length {header_len} is larger than the frame ({total} bytes)"
                )
            header = bytes(buf[start : start + header_len])
            body = bytes(buf[start + header_len : end])
            pos = end
            commands.append(decode_header(kind, header, body))
    except RemoteProtocolError as exc:
        return commands, pos, exc
    return commands, pos, None


class FrameDecoder:
    """Decodes every whole frame of a read in one `decode_frames` call and hands the
    commands out one at a time (the connection may pause between two)."""

    def __init__(self, max_frame_length: int = MAX_FRAME_LENGTH) -> None:
        self.max_frame_length = max_frame_length
        self._buf = bytearray()
        self._pos = 0
        self._ready: list[RemotingCommand] = []
        self._taken = 0
        self._error: RemoteProtocolError | None = None
        self._first = True  # no frame taken yet: the next refusal may be another protocol

    @property
    def buffered(self) -> int:
        """Bytes received and not yet decoded, and commands decoded and not yet taken."""
        return len(self._buf) - self._pos + len(self._ready) - self._taken

    @property
    def idle(self) -> bool:
        """Nothing held: every byte received decoded and every command taken, no error,
        and a frame taken before (the first may still turn out to be another protocol)."""
        return (
            self._pos == len(self._buf)
            and self._taken == len(self._ready)
            and self._error is None
            and not self._first
        )

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Take a read's bytes. With nothing left over from before (the usual case), its
        whole frames are decoded at once where they lie, and only an unfinished frame at
        its end is copied to wait for the rest (one copy of each byte less)."""
        if self._pos == len(self._buf) and self._taken == len(self._ready) and not self._error:
            commands, pos, self._error = decode_frames(data, 0, self.max_frame_length, self._first)
            self._buf.clear()
            self._buf += data[pos:]
            self._pos = 0
            self._ready, self._taken = commands, 0
            if commands:
                self._first = False
            return
        self._buf += data

    def next_commands(self, limit: int) -> list[RemotingCommand]:
        """Up to `limit` (at least one) of the next whole commands, in order; none until more
        bytes arrive; after a bad frame, as `next_command`."""
        if self._taken == len(self._ready):
            if self.next_command() is None:
                return []
            self._taken = 0
        ready, start = self._ready, self._taken
        end = min(len(ready), start + max(limit, 1))
        self._taken = end
        return ready if start == 0 and end == len(ready) else ready[start:end]

    def next_command(self) -> RemotingCommand | None:
        """The next whole command, or None until more bytes arrive; after a bad frame (the
        commands before it are handed out first) `RemoteProtocolError`, for good."""
        if self._taken < len(self._ready):
            self._taken += 1
            return self._ready[self._taken - 1]
        if self._error is not None:
            raise self._error
        buf = self._buf
        if self._pos == len(buf):  # every byte received is decoded: none until more come
            self._ready, self._taken = [], 0  # (the commands handed out are not kept)
            return None
        commands, pos, self._error = decode_frames(
            buf, self._pos, self.max_frame_length, self._first
        )
        if pos == len(buf):
            buf.clear()
            pos = 0
        elif pos >= _COMPACT_AT:
            del buf[:pos]
            pos = 0
        self._pos = pos
        self._ready, self._taken = commands, 0
        if commands:
            self._first = False
            self._taken = 1
            return commands[0]
        if self._error is not None:
            raise self._error
        return None


def encode_frames(cmds: Sequence[RemotingCommand]) -> list[bytes]:
    """The frames of many commands, in one call: for each its length prefix + header, then
    its body, ready for one `transport.writelines` (a large body is never copied)."""
    parts: list[bytes] = []
    for cmd in cmds:
        parts += encode_frame_parts(cmd)
    return parts


def encode_frame_parts(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """(length prefix + header, body): two buffers for `transport.writelines`, so a large
    body is never copied."""
    if cmd.wire is not None:
        return cmd.wire, b""
    header = encode_header(cmd)
    total = 4 + len(header) + len(cmd.body)
    if total > MAX_FRAME_LENGTH:
        raise LocalProtocolError(f"a frame of {total} bytes exceeds {MAX_FRAME_LENGTH}")
    return FRAME_PREFIX.pack(total, int(cmd.serialize_type) << 24 | len(header)) + header, cmd.body


def encode_frame(cmd: RemotingCommand) -> bytes:
    head, body = encode_frame_parts(cmd)
    return head + body


# The pure-Python functions, kept as the reference the compiled twin is tested against.
reference_decode_frames, reference_encode_frames = decode_frames, encode_frames
_compiled = twin("rmqpy.remoting._frame")
if _compiled is not None:
    decode_frames = _compiled.decode_frames
    encode_frames = _compiled.encode_frames
