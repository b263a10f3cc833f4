"""A remoting client connection: `connect`, then `invoke` / `invoke_oneway`.

Requests the server sends to us (NOTIFY_CONSUMER_IDS_CHANGED, ...) go to `on_request`;
without one they are answered REQUEST_CODE_NOT_SUPPORTED, as a Java client does.
"""

from __future__ import annotations

import asyncio
import ssl

from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import RemotingConnectionError
from rmqpy.remoting.protocol import Connection, RequestHandler


def _not_supported(conn: Connection, request: RemotingCommand) -> None:
    conn.respond(
        request,
        request.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f" request type {request.code} not supported",
        ),
    )


async def connect(
    host: str,
    port: int,
    on_request: RequestHandler = _not_supported,
    timeout_s: float = 3.0,
    tls: ssl.SSLContext | None = None,
) -> Connection:
    """A connection to host:port, over TLS with `tls` (the server's certificate checked
    against the context's authorities and `host`)."""
    loop = asyncio.get_running_loop()
    try:
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: Connection(on_request), host, port, ssl=tls),
            timeout_s,
        )
    except (OSError, TimeoutError) as exc:
        raise RemotingConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
    return conn
