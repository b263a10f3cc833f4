"""Clients of other protocols pointed at the remoting port by mistake: a RocketMQ 5 gRPC
client, curl, a TLS client. Each gets one clear log line and its connection closed, and a
RocketMQ client beside them is served throughout."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from tests.broker.rpc import send
from tests.integration.daemon import BrokerProcess

# What a gRPC client (HTTP/2) sends first: the connection preface, then a SETTINGS frame.
GRPC_OPENING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")
HTTP_GET = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/8.5.0\r\n\r\n"
# The first bytes of a TLS 1.2/1.3 ClientHello record.
TLS_HELLO = bytes.fromhex("16030100f4010000f00303") + bytes(32)


async def exchange(port: int, data: bytes) -> bytes:
    """Send `data` and read until the broker closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    async with asyncio.timeout(5):
        answer = await reader.read()
    writer.close()
    return answer


def warnings(process: BrokerProcess) -> list[dict[str, str]]:
    lines = [json.loads(line) for line in process.log_text().splitlines() if line.startswith("{")]
    return [e for e in lines if e.get("level") == "warning"]


async def test_other_protocols_get_one_clear_line_and_a_healthy_client_is_served(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "store").start()
    try:
        client = await connect("127.0.0.1", broker.port)
        assert (await send(client, "Beside", b"before")).code == ResponseCode.SUCCESS
        assert await exchange(broker.port, GRPC_OPENING) == b""
        answer = await exchange(broker.port, HTTP_GET)
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert answer.endswith(b"this port speaks RocketMQ remoting, not HTTP\n")
        assert await exchange(broker.port, TLS_HELLO) == b""
        assert (await send(client, "Beside", b"after")).code == ResponseCode.SUCCESS
        await client.aclose()
    finally:
        assert broker.stop() == 0, broker.log_text()
    said = [(e["event"], "peer" in e) for e in warnings(broker) if "port" in e["event"]]
    assert said == [
        (
            "this port speaks RocketMQ remoting; gRPC (RocketMQ 5 proxy protocol) is not served",
            True,
        ),
        ("this port speaks RocketMQ remoting, not HTTP", True),
        ("this port speaks RocketMQ remoting without TLS", True),
    ]
    assert "Traceback" not in broker.log_text()
