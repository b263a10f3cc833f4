"""Many connections against a broker process: idle ones cost little memory, and past
`maxConnections` new ones are closed as they open while everyone admitted is served."""

from __future__ import annotations

import asyncio
import json
import resource
from pathlib import Path

import pytest

from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.errors import RemotingError
from tests.broker.rpc import send
from tests.integration.daemon import BrokerProcess

pytestmark = pytest.mark.slow


def rss_bytes(process: BrokerProcess) -> int:
    assert process.proc is not None
    for line in Path(f"/proc/{process.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def open_idle(port: int, count: int) -> list[asyncio.StreamWriter]:
    writers = []
    for start in range(0, count, 100):  # in steps the listen backlog takes at once
        pairs = await asyncio.gather(
            *(asyncio.open_connection("127.0.0.1", port) for _ in range(min(100, count - start)))
        )
        writers += [w for _, w in pairs]
    return writers


async def test_three_thousand_idle_connections_cost_under_100_mb(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 3_200:
        pytest.skip(f"the open-files hard limit ({hard}) is below 3,200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    broker = BrokerProcess(tmp_path / "store").start()
    try:
        client = await connect("127.0.0.1", broker.port)
        assert (await send(client, "Warm", b"x")).code == ResponseCode.SUCCESS
        before = rss_bytes(broker)
        idle = await open_idle(broker.port, 3_000)
        # Accepted in order: once a later client is served, the 3,000 are connections.
        late = await connect("127.0.0.1", broker.port)
        assert (await send(late, "Warm", b"y")).code == ResponseCode.SUCCESS
        grown = rss_bytes(broker) - before
        assert grown < 100 * 1024 * 1024, f"3,000 idle connections took {grown >> 20} MiB"
        for writer in idle:
            writer.close()
        await late.aclose()
        await client.aclose()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert broker.stop() == 0, broker.log_text()


async def test_connections_past_the_limit_are_closed_and_the_admitted_served(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "store", extra={"maxConnections": "5"}).start()
    try:
        client = await connect("127.0.0.1", broker.port)
        idle = await open_idle(broker.port, 4)
        assert (await send(client, "Limited", b"in")).code == ResponseCode.SUCCESS
        for _ in range(3):  # refused at once, every time
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            async with asyncio.timeout(5):
                assert await reader.read() == b""
            writer.close()
        assert (await send(client, "Limited", b"still in")).code == ResponseCode.SUCCESS
        idle[0].close()  # a slot frees up: the next one is admitted
        async with asyncio.timeout(10):
            while True:
                try:
                    newcomer = await connect("127.0.0.1", broker.port)
                    response = await send(newcomer, "Limited", b"new")
                    break
                except (OSError, RemotingError):  # (the close may not have reached it yet)
                    await asyncio.sleep(0.1)
        assert response.code == ResponseCode.SUCCESS
        await newcomer.aclose()
        await client.aclose()
        for writer in idle[1:]:
            writer.close()
    finally:
        assert broker.stop() == 0, broker.log_text()
    events = [json.loads(line) for line in broker.log_text().splitlines() if line.startswith("{")]
    refusals = [e for e in events if e["event"] == "connection refused: maxConnections reached"]
    assert len(refusals) == 1 and refusals[0]["max_connections"] == 5  # logged once in 10 s
