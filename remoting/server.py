"""A remoting server: accepts connections and hands each request to a handler.

The handler is called on the event loop with (connection, request) and must not block: it
answers with `connection.respond(request, response)`, now or later (after work done in an
executor, say). Connections are tracked so that `close()` can stop accepting, let handlers
finish for up to a grace period, and then close what is left.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable

import structlog

from rmqpy.remoting.protocol import (
    IDLE_TIMEOUT_S,
    MAX_IN_FLIGHT,
    Connection,
    RequestHandler,
    peer_text,
)
from rmqpy.remoting.tls import HANDSHAKE_RECORD, ServerTls

log = structlog.get_logger(__name__)
REFUSAL_LOG_INTERVAL_S = 10.0


class Refusals:
    """Counts what a server turns away and logs it at most every 10 s with the count so
    far: a flood must not flood the log too."""

    def __init__(self, event: str, **context: object) -> None:
        self.event = event
        self.context = context
        self.count = 0
        self._logged_at = -REFUSAL_LOG_INTERVAL_S

    def note(self, peer: str, reason: str | None = None) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self._logged_at >= REFUSAL_LOG_INTERVAL_S:
            self._logged_at = now
            extra = {"reason": reason} if reason is not None else {}
            log.warning(self.event, peer=peer, refused_so_far=self.count, **self.context, **extra)


class ConnectionLimit:
    """How many connections the servers sharing it may hold at once (`maxConnections`); past
    it, or while `short_of_files()` says the process is nearly out of descriptors, a new
    connection is closed as it opens (`refusals`, `short_refusals`)."""

    def __init__(self, most: int, short_of_files: Callable[[], bool] = lambda: False) -> None:
        self.most = most
        self.open = 0
        self.short_of_files = short_of_files
        self.refusals = Refusals("connection refused: maxConnections reached", max_connections=most)
        self.short_refusals = Refusals("connection refused: open files nearly exhausted")

    def refusing(self) -> Refusals | None:
        """Where to count a connection opening now, if it must be refused."""
        if self.open >= self.most:
            return self.refusals
        if self.short_of_files():
            return self.short_refusals
        return None

    def release(self) -> None:
        self.open -= 1


class _Refused(asyncio.Protocol):
    """A connection past the limit: closed as soon as it is made."""

    def __init__(self, refusals: Refusals) -> None:
        self.refusals = refusals

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.refusals.note(peer_text(peer))
        transport.abort()  # type: ignore[attr-defined]


def _peer_of(sock: socket.socket) -> str:
    try:
        peer = sock.getpeername()
    except OSError:
        return "?"
    return peer_text(peer)


class RemotingServer:
    def __init__(
        self,
        handler: RequestHandler,
        *,
        on_closed: Callable[[Connection], None] = lambda _c: None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_in_flight: int = MAX_IN_FLIGHT,
        limit: ConnectionLimit | None = None,
    ) -> None:
        self.handler = handler
        self.limit = limit or ConnectionLimit(2**31)
        self.on_closed = on_closed
        self.idle_timeout_s = idle_timeout_s
        self.max_in_flight = max_in_flight
        self.connections: set[Connection] = set()
        self._server: asyncio.Server | None = None
        self._accepting: asyncio.Task[None] | None = None  # permissive TLS's accept loop
        self._sniffing: set[asyncio.Task[None]] = set()

    async def start(
        self, host: str, port: int, sock: socket.socket | None = None, tls: ServerTls | None = None
    ) -> int:
        """Listen on host:port (0 picks a free port), or on a socket already bound; returns
        the port. `tls`: enforcing takes TLS connections only, permissive both."""
        loop = asyncio.get_running_loop()
        if sock is None:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.create_server((host, port), family=family, backlog=1024)
            sock.setblocking(False)
        if tls is not None and tls.mode == "permissive":
            assert tls.context is not None
            self._accepting = loop.create_task(self._accept_sniffing(sock, tls.context))
            bound: int = sock.getsockname()[1]
            return bound
        context = tls.context if tls is not None and tls.enabled else None
        self._server = await loop.create_server(self._make_connection, sock=sock, ssl=context)
        bound = self._server.sockets[0].getsockname()[1]
        return bound

    async def _accept_sniffing(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        """Permissive TLS: accept, wait for the client's first byte without taking it, and
        hand the socket to the loop with TLS when that byte opens a handshake, plain when
        not."""
        loop = asyncio.get_running_loop()
        with sock:
            while True:
                try:
                    client, _ = await loop.sock_accept(sock)
                except OSError as exc:  # out of descriptors: the limit logs it, go on
                    log.warning("accept failed", error=str(exc))
                    await asyncio.sleep(0.1)
                    continue
                # Waiting for a first byte holds a descriptor too: counted with the open
                # connections, so silent clients cannot get past maxConnections.
                refusals = self.limit.refusing()
                if refusals is None and self.limit.open + len(self._sniffing) >= self.limit.most:
                    refusals = self.limit.refusals
                if refusals is not None:
                    refusals.note(_peer_of(client))
                    client.close()
                    continue
                task = loop.create_task(self._sniff(client, context))
                self._sniffing.add(task)
                task.add_done_callback(self._sniffing.discard)

    async def _sniff(self, client: socket.socket, context: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        client.setblocking(False)
        readable: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(client.fileno(), ready)
        try:
            await asyncio.wait_for(readable, self.idle_timeout_s)
            first = client.recv(1, socket.MSG_PEEK)
        except (TimeoutError, OSError):
            first = b""
        finally:
            loop.remove_reader(client.fileno())
        if not first:  # silent for the idle timeout, or gone
            client.close()
            return
        secure = context if first[0] == HANDSHAKE_RECORD else None
        try:
            await loop.connect_accepted_socket(self._make_connection, client, ssl=secure)
        except (OSError, ssl.SSLError):  # a failed handshake: that connection only
            client.close()

    def _make_connection(self) -> asyncio.BaseProtocol:
        limit = self.limit
        refusals = limit.refusing()
        if refusals is not None:
            return _Refused(refusals)
        limit.open += 1
        conn = Connection(
            self.handler,
            self._closed,
            idle_timeout_s=self.idle_timeout_s,
            max_in_flight=self.max_in_flight,
        )
        self.connections.add(conn)
        return conn

    def _closed(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.limit.release()
        self.on_closed(conn)

    async def close(self, grace_s: float = 3.0) -> None:
        """Stop accepting; wait up to `grace_s` for requests in flight; close every connection."""
        if self._server is not None:
            self._server.close()
        if self._accepting is not None:
            self._accepting.cancel()
            for task in [self._accepting, *self._sniffing]:
                task.cancel()
            await asyncio.gather(self._accepting, *self._sniffing, return_exceptions=True)
            self._accepting = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while any(c.in_flight > 0 for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.close()
        if self.connections:
            await asyncio.wait([c.closed for c in list(self.connections)], timeout=grace_s)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
