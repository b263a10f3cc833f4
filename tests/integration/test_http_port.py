"""The HTTP port under a flood of half-sent requests (slowloris): a bounded number of
workers, no stall of the remoting port, and `/healthz` answering again once the flood's
requests time out."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import pytest

from rmqpy.bench.processes import free_port
from rmqpy.client.message import Message, SendStatus
from rmqpy.client.producer import Producer
from tests.integration.daemon import BrokerProcess

pytestmark = pytest.mark.slow


def threads(process: BrokerProcess) -> int:
    assert process.proc is not None
    for line in Path(f"/proc/{process.proc.pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def healthz(port: int) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as answer:
        report: dict[str, object] = json.load(answer)
        return report


async def test_half_sent_requests_neither_pile_up_threads_nor_stall_sends(
    tmp_path: Path,
) -> None:
    port = free_port()
    broker = BrokerProcess(tmp_path / "store", extra={"metricsPort": str(port)}).start()
    try:
        async with Producer("beside-the-flood", broker.namesrv, send_timeout_s=3.0) as producer:
            await producer.send(Message("Steady", b"warm"))
            base = threads(broker)
            flood = []
            for _ in range(500):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /metr")  # and never the rest
                flood.append(writer)
            started = time.monotonic()
            slowest = 0.0
            for i in range(300):
                t0 = time.monotonic()
                result = await producer.send(Message("Steady", f"m{i}".encode()))
                slowest = max(slowest, time.monotonic() - t0)
                assert result.status is SendStatus.SEND_OK
            peak = threads(broker)
            assert peak <= base + 16 + 2, f"{peak} threads, {base} before the flood"
            assert slowest < 1.0, f"a send took {slowest:.2f} s beside the flood"
            # The flood's requests time out (5 s); then health answers, the flood still open.
            await asyncio.sleep(max(0.0, 6.0 - (time.monotonic() - started)))
            report = await asyncio.to_thread(healthz, port)
            assert report["status"] == "ok"
            for writer in flood:
                writer.close()
    finally:
        assert broker.stop() == 0, broker.log_text()
    assert "http request refused: all workers busy" in broker.log_text()
