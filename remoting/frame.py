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

from remoting.command import RemotingCommand
from remoting.errors import ForeignProtocolError, LocalProtocolError, RemoteProtocolError
from remoting.header_codec import decode_header, encode_header
from remoting.wire import FRAME_LENGTH, FRAME_PREFIX, MAX_FRAME_LENGTH, MAX_HEADER_LENGTH

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


class FrameDecoder:
    def __init__(self, max_frame_length: int = MAX_FRAME_LENGTH) -> None:
        self.max_frame_length = max_frame_length
        self._buf = bytearray()
        self._pos = 0
        self._error: RemoteProtocolError | None = None
        self._first = True  # no frame taken yet: the next refusal may be another protocol

    @property
    def buffered(self) -> int:
        """Bytes received and not yet taken as commands."""
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def next_command(self) -> RemotingCommand | None:
        """The next whole command, or None until more bytes arrive."""
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    def _next(self) -> RemotingCommand | None:
        buf, pos = self._buf, self._pos
        if len(buf) - pos < FRAME_LENGTH.size:
            return None
        total = FRAME_LENGTH.unpack_from(buf, pos)[0]
        if total < 4:
            raise RemoteProtocolError(f"frame length {total} is shorter than its header length")
        if total > self.max_frame_length:
            foreign = foreign_protocol(bytes(buf[pos : pos + 8])) if self._first else None
            if foreign is not None:
                raise foreign
            raise RemoteProtocolError(
                f"frame length {total} exceeds the limit of {self.max_frame_length} bytes"
            )
        end = pos + FRAME_LENGTH.size + total
        if len(buf) < end:
            return None
        _, type_and_len = FRAME_PREFIX.unpack_from(buf, pos)
        kind = (type_and_len >> 24) & 0xFF
        header_len = type_and_len & MAX_HEADER_LENGTH
        start = pos + FRAME_PREFIX.size
        if header_len > end - start:
            raise RemoteProtocolError(
                f"header length {header_len} is larger than the frame ({total} bytes)"
            )
        header = bytes(buf[start : start + header_len])
        body = bytes(buf[start + header_len : end])
        self._pos = end
        self._first = False
        if end == len(buf):
            buf.clear()
            self._pos = 0
        elif end >= _COMPACT_AT:
            del buf[:end]
            self._pos = 0
        return decode_header(kind, header, body)


def encode_frame_parts(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """(length prefix + header, body): two buffers for `transport.writelines`, so a large
    body is never copied."""
    header = encode_header(cmd)
    total = 4 + len(header) + len(cmd.body)
    if total > MAX_FRAME_LENGTH:
        raise LocalProtocolError(f"a frame of {total} bytes exceeds {MAX_FRAME_LENGTH}")
    return FRAME_PREFIX.pack(total, int(cmd.serialize_type) << 24 | len(header)) + header, cmd.body


def encode_frame(cmd: RemotingCommand) -> bytes:
    head, body = encode_frame_parts(cmd)
    return head + body
