"""A loopback echo server on the same stack as the broker (uvloop, an asyncio `Protocol`):
the floor for a request's round trip in Python, which `make bench` sets latencies against.

    python -m rmqpy.bench.echo --port P
"""

from __future__ import annotations

import asyncio
import socket
import sys

from rmqpy.bench.processes import serve_on_port


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    return serve_on_port("rmqpy.bench.echo", __doc__, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
