"""The asyncio transport on real loopback sockets: many requests in flight matched by opaque,
oneway requests left unanswered, a bad client cut off while a good one carries on, idle
connections closed, and server-to-client requests."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable
from typing import TypeVar, cast

import pytest

from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import RequestCode, ResponseCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import RemotingConnectionError, RemotingTimeoutError
from rmqpy.remoting.frame import encode_frame
from rmqpy.remoting.protocol import Connection
from rmqpy.remoting.server import RemotingServer

T = TypeVar("T")


class Echo:
    """Answers each request after `delay_s` with its body reversed; records oneway ones."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.oneway: list[RemotingCommand] = []

    def __call__(self, conn: Connection, request: RemotingCommand) -> None:
        if request.is_oneway:
            self.oneway.append(request)
        loop = asyncio.get_running_loop()
        response = request.response(body=request.body[::-1], ext_fields={"n": request.remark or ""})
        loop.call_later(self.delay_s, conn.respond, request, response)


@pytest.fixture
async def echo_server() -> AsyncIterator[tuple[RemotingServer, int, Echo]]:
    echo = Echo(delay_s=0.001)
    server = RemotingServer(echo, idle_timeout_s=0.3)
    port = await server.start("127.0.0.1", 0)
    yield server, port, echo
    await server.close(grace_s=1.0)


async def until(condition: Callable[[], T | None], timeout_s: float = 5.0) -> T:
    """Poll `condition` on the loop until it is truthy; fail after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not (value := condition()):
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
    return value


def request(i: int, kind: SerializeType = SerializeType.MSGPACK) -> RemotingCommand:
    return RemotingCommand(
        RequestCode.SEND_MESSAGE, remark=str(i), body=f"body-{i}".encode(), serialize_type=kind
    )


@pytest.mark.parametrize("kind", list(SerializeType))
async def test_many_requests_in_flight_are_matched_by_opaque(
    echo_server: tuple[RemotingServer, int, Echo], kind: SerializeType
) -> None:
    _, port, _ = echo_server
    conn = await connect("127.0.0.1", port)
    responses = await asyncio.gather(*(conn.invoke(request(i, kind)) for i in range(200)))
    for i, response in enumerate(responses):
        assert response.is_response and response.serialize_type is kind
        assert response.body == f"body-{i}".encode()[::-1]
        assert response.ext_fields == {"n": str(i)}
    await conn.aclose()


async def test_oneway_requests_get_no_response(
    echo_server: tuple[RemotingServer, int, Echo],
) -> None:
    _, port, echo = echo_server
    conn = await connect("127.0.0.1", port)
    conn.invoke_oneway(request(1))
    answered = await conn.invoke(request(2))  # ordered after the oneway one on the wire
    assert answered.body == b"2-ydob"
    assert [r.remark for r in echo.oneway] == ["1"]
    await conn.aclose()


async def test_requests_sent_together_arrive_in_order_even_when_closing_at_once(
    echo_server: tuple[RemotingServer, int, Echo],
) -> None:
    _, port, echo = echo_server
    conn = await connect("127.0.0.1", port)
    for i in range(100):  # one loop turn: written as one batch
        conn.invoke_oneway(request(i))
    await conn.aclose()
    await until(lambda: len(echo.oneway) == 100)
    assert [r.remark for r in echo.oneway] == [str(i) for i in range(100)]


class CountedWrites:
    """A connection's own transport, with its writes counted."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes = 0

    def writelines(self, parts: list[bytes]) -> None:
        self.writes += 1
        self.transport.writelines(parts)

    def __getattr__(self, name: str) -> object:
        return getattr(self.transport, name)


async def test_requests_made_while_others_await_answers_go_out_together() -> None:
    """A lone request is written at once; the requests of one loop turn that find others
    in flight (a consumer's pulls woken by one read) go out in one write."""
    server = RemotingServer(Echo(delay_s=0.3))
    port = await server.start("127.0.0.1", 0)
    conn = await connect("127.0.0.1", port)
    try:
        assert conn.transport is not None
        counted = CountedWrites(conn.transport)
        conn.transport = cast(asyncio.Transport, counted)
        lone = asyncio.ensure_future(conn.invoke(request(0)))
        await asyncio.sleep(0)  # its task has sent it: written then, not at the next turn
        assert counted.writes == 1
        together = [conn.invoke(request(i)) for i in range(1, 51)]  # while the first waits
        responses = await asyncio.gather(lone, *together)
        assert [r.body for r in responses] == [f"body-{i}".encode()[::-1] for i in range(51)]
        assert counted.writes == 2
    finally:
        conn.abort()
        await server.close(grace_s=0.1)


async def test_a_request_left_unanswered_times_out_on_its_own_deadline() -> None:
    """Requests the server never answers fail with a timeout when theirs passes, one
    with a shorter timeout sent after a longer one included; answered ones are not
    disturbed, and the connection carries on."""

    def answer_unless_silent(conn: Connection, request: RemotingCommand) -> None:
        if request.remark != "silent":
            conn.respond(request, request.response(body=request.body))

    server = RemotingServer(answer_unless_silent)
    port = await server.start("127.0.0.1", 0)
    conn = await connect("127.0.0.1", port)
    loop = asyncio.get_running_loop()

    async def timed(remark: str, timeout_s: float) -> tuple[str, float]:
        began = loop.time()
        cmd = RemotingCommand(RequestCode.SEND_MESSAGE, remark=remark, body=b"b")
        try:
            await conn.invoke(cmd, timeout_s)
        except RemotingTimeoutError:
            return "timed out", loop.time() - began
        return "answered", loop.time() - began

    try:
        long = asyncio.ensure_future(timed("silent", 0.6))
        await asyncio.sleep(0.05)
        short, answered = await asyncio.gather(timed("silent", 0.2), timed("answer", 0.2))
        assert short[0] == "timed out" and 0.19 <= short[1] < 0.45
        assert answered[0] == "answered" and answered[1] < 0.19
        assert (await long)[0] == "timed out" and 0.59 <= (await long)[1] < 0.9
        assert (await timed("answer", 1.0))[0] == "answered"  # the connection carries on
    finally:
        await conn.aclose()
        await server.close(grace_s=0.5)


async def test_garbage_closes_only_that_connection(
    echo_server: tuple[RemotingServer, int, Echo],
) -> None:
    _, port, _ = echo_server
    good = await connect("127.0.0.1", port)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(struct.pack(">i", 64 * 1024 * 1024) + b"garbage")
    assert await asyncio.wait_for(reader.read(), 2.0) == b""  # the server hung up
    writer.close()
    await writer.wait_closed()
    assert (await good.invoke(request(3))).body == b"3-ydob"
    await good.aclose()


async def test_a_client_that_vanishes_mid_request_does_not_disturb_others(
    echo_server: tuple[RemotingServer, int, Echo],
) -> None:
    _, port, _ = echo_server
    with socket.create_connection(("127.0.0.1", port)) as raw:
        data = encode_frame(request(4))
        raw.sendall(data[: len(data) // 2])
    good = await connect("127.0.0.1", port)
    assert (await good.invoke(request(5))).body == b"5-ydob"
    await good.aclose()


async def test_idle_connections_are_closed(echo_server: tuple[RemotingServer, int, Echo]) -> None:
    server, port, _ = echo_server
    conn = await connect("127.0.0.1", port)
    await asyncio.wait_for(conn.closed, 3.0)
    with pytest.raises(RemotingConnectionError):
        await conn.invoke(request(6))
    assert not server.connections


async def test_the_server_can_ask_the_client(echo_server: tuple[RemotingServer, int, Echo]) -> None:
    server, port, _ = echo_server
    heard: list[RemotingCommand] = []

    def on_request(conn: Connection, req: RemotingCommand) -> None:
        heard.append(req)
        conn.respond(req, req.response(ResponseCode.SUCCESS))

    client = await connect("127.0.0.1", port, on_request)
    await client.invoke(request(7))  # the server knows the connection once it spoke
    (server_side,) = server.connections
    notify = RemotingCommand(
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": "g"}
    )
    response = await server_side.invoke(notify)
    assert response.code == ResponseCode.SUCCESS
    assert heard[0].ext_fields == {"consumerGroup": "g"}
    await client.aclose()


async def test_a_client_that_never_reads_is_not_buffered_without_bound() -> None:
    big = b"r" * (256 * 1024)

    def handler(conn: Connection, req: RemotingCommand) -> None:
        conn.respond(req, req.response(body=big))

    server = RemotingServer(handler, max_in_flight=16)
    port = await server.start("127.0.0.1", 0)
    try:
        lazy = socket.create_connection(("127.0.0.1", port))
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        lazy.sendall(b"".join(encode_frame(request(i, SerializeType.JSON)) for i in range(2000)))
        conn = await until(lambda: next(iter(server.connections), None))
        await until(lambda: conn.reading_paused)  # the server stopped reading from it
        assert conn.transport is not None
        buffered = conn.transport.get_write_buffer_size()
        assert 0 < buffered < 40 * len(big)  # not 2000 responses' worth
        good = await connect("127.0.0.1", port)
        assert (await good.invoke(request(8))).body == big
        await good.aclose()
        lazy.close()
    finally:
        await server.close(grace_s=1.0)
