"""Bounded executors answer SYSTEM_BUSY instead of queueing without end (RocketMQ's fast
failure), with real threads and a real connection."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from broker.context import RequestContext
from broker.controller import BrokerController, Dispatcher
from broker.executors import FamilyExecutor
from remoting.client import connect
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.server import RemotingServer

GATE_CODE = 777


async def serve(executor: FamilyExecutor, gate: threading.Event) -> tuple[RemotingServer, int]:
    def blocked(group: Sequence[RequestContext]) -> list[RemotingCommand | None]:
        gate.wait(10)
        return [ctx.response() for ctx in group]

    server = RemotingServer(Dispatcher({GATE_CODE: (blocked, executor)}))
    return server, await server.start("127.0.0.1", 0)


async def test_full_queue_answers_system_busy() -> None:
    loop = asyncio.get_running_loop()
    executor = FamilyExecutor("gate", loop, threads=1, capacity=4, max_wait_ms=60_000)
    gate = threading.Event()
    server, port = await serve(executor, gate)
    conn = await connect("127.0.0.1", port)
    calls = [asyncio.ensure_future(conn.invoke(RemotingCommand(GATE_CODE), 10)) for _ in range(10)]
    async with asyncio.timeout(5):
        while sum(c.done() for c in calls) < 6:
            await asyncio.sleep(0.01)
    gate.set()
    codes = [r.code for r in await asyncio.gather(*calls)]
    assert codes.count(ResponseCode.SYSTEM_BUSY) == 6
    assert codes.count(ResponseCode.SUCCESS) == 4
    busy = [r for r in (c.result() for c in calls) if r.code == ResponseCode.SYSTEM_BUSY]
    assert busy[0].remark is not None and busy[0].remark.startswith("[REJECTREQUEST]")
    await conn.aclose()
    await server.close()
    executor.shutdown()


async def test_request_that_waited_too_long_answers_system_busy() -> None:
    loop = asyncio.get_running_loop()
    executor = FamilyExecutor("gate", loop, threads=1, capacity=100, max_wait_ms=200)
    gate = threading.Event()
    server, port = await serve(executor, gate)
    conn = await connect("127.0.0.1", port)
    first = asyncio.ensure_future(conn.invoke(RemotingCommand(GATE_CODE), 10))
    await asyncio.sleep(0.1)  # the first batch holds the only thread
    late = asyncio.ensure_future(conn.invoke(RemotingCommand(GATE_CODE), 10))
    await asyncio.sleep(0.5)
    gate.set()
    assert (await first).code == ResponseCode.SUCCESS
    answer = await late
    assert answer.code == ResponseCode.SYSTEM_BUSY
    assert answer.remark is not None and "[PCBUSY_CLEAN_QUEUE]" in answer.remark
    await conn.aclose()
    await server.close()
    executor.shutdown()


async def test_broker_runtime_counts_rejections(broker: BrokerController) -> None:
    assert all(x.rejected == 0 for x in broker.executors)
