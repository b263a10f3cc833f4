"""Bounded executors answer SYSTEM_BUSY instead of queueing without end (RocketMQ's fast
failure), with real threads and a real connection."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from rmqpy.broker.context import Processor, RequestContext
from rmqpy.broker.controller import Dispatcher
from rmqpy.broker.executors import FamilyExecutor, LoopRounds
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import RequestCode, ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.protocol import Connection
from rmqpy.remoting.server import RemotingServer

GATE_CODE = 777


@asynccontextmanager
async def gated_server(
    capacity: int, max_wait_ms: int
) -> AsyncIterator[tuple[Connection, threading.Event]]:
    """A server whose one executor thread blocks each batch until the gate opens, and a
    client connected to it."""
    executor = FamilyExecutor(
        "gate", asyncio.get_running_loop(), threads=1, capacity=capacity, max_wait_ms=max_wait_ms
    )
    gate = threading.Event()

    def blocked(group: Sequence[RequestContext]) -> list[RemotingCommand | None]:
        gate.wait(10)
        return [ctx.request.response() for ctx in group]

    server = RemotingServer(
        Dispatcher({GATE_CODE: (blocked, executor)}, asyncio.get_running_loop())
    )
    conn = await connect("127.0.0.1", await server.start("127.0.0.1", 0))
    try:
        yield conn, gate
    finally:
        gate.set()
        await conn.aclose()
        await server.close()
        executor.shutdown()


async def echo_remarks(
    executor: FamilyExecutor, processor: Processor, remarks: Sequence[str]
) -> list[str | None]:
    """Send one request per remark through a real server whose one code runs `processor`
    on `executor`; the remarks answered, in order."""
    server = RemotingServer(
        Dispatcher({GATE_CODE: (processor, executor)}, asyncio.get_running_loop())
    )
    conn = await connect("127.0.0.1", await server.start("127.0.0.1", 0))
    try:
        answers = await asyncio.gather(
            *(conn.invoke(RemotingCommand(GATE_CODE, remark=r), 5) for r in remarks)
        )
    finally:
        await conn.aclose()
        await server.close()
        executor.shutdown()
    return [a.remark for a in answers]


async def test_full_queue_answers_system_busy() -> None:
    async with gated_server(capacity=4, max_wait_ms=60_000) as (conn, gate):
        calls = [
            asyncio.ensure_future(conn.invoke(RemotingCommand(GATE_CODE), 10)) for _ in range(10)
        ]
        # The first request may reach the server alone and be running (held at the gate)
        # when the other nine arrive: then 4 of them fit the queue and 5 are refused; if
        # all ten arrive together, 4 fit and 6 are refused.
        async with asyncio.timeout(5):
            while sum(c.done() for c in calls) < 5:
                await asyncio.sleep(0.01)
        gate.set()
        answers = await asyncio.gather(*calls)
    codes = [r.code for r in answers]
    assert codes.count(ResponseCode.SYSTEM_BUSY) in (5, 6)
    assert codes.count(ResponseCode.SUCCESS) == 10 - codes.count(ResponseCode.SYSTEM_BUSY)
    busy = [r for r in answers if r.code == ResponseCode.SYSTEM_BUSY]
    assert busy[0].remark is not None and busy[0].remark.startswith("[REJECTREQUEST]")


async def test_request_that_waited_too_long_answers_system_busy() -> None:
    async with gated_server(capacity=100, max_wait_ms=200) as (conn, gate):
        first = asyncio.ensure_future(conn.invoke(RemotingCommand(GATE_CODE), 10))
        await asyncio.sleep(0.1)  # the first batch holds the only thread
        late = asyncio.ensure_future(conn.invoke(RemotingCommand(GATE_CODE), 10))
        await asyncio.sleep(0.5)
        gate.set()
        assert (await first).code == ResponseCode.SUCCESS
        answer = await late
    assert answer.code == ResponseCode.SYSTEM_BUSY
    assert answer.remark is not None and "[PCBUSY_CLEAN_QUEUE]" in answer.remark


async def test_a_family_without_threads_runs_its_batches_on_the_loop() -> None:
    loop = asyncio.get_running_loop()
    executor = FamilyExecutor("inline", loop, threads=0, capacity=100, max_wait_ms=1000)
    loop_thread = threading.get_ident()
    seen: list[tuple[int, int]] = []

    def record(group: Sequence[RequestContext]) -> list[RemotingCommand | None]:
        seen.append((threading.get_ident(), len(group)))
        return [ctx.request.response(remark=ctx.request.remark) for ctx in group]

    remarks = [str(i) for i in range(20)]
    assert await echo_remarks(executor, record, remarks) == remarks
    assert {thread for thread, _ in seen} == {loop_thread}
    assert sum(n for _, n in seen) == 20


async def test_a_family_runs_on_the_loop_only_what_its_inline_test_allows() -> None:
    """Pulls of records in the page cache run on the loop; the rest go to the pool, and
    a test that raises sends its request to the pool too."""
    loop = asyncio.get_running_loop()
    loop_thread = threading.get_ident()

    def inline(ctx: RequestContext) -> bool:
        if ctx.request.remark == "bad":
            raise ValueError("unreadable")
        return int(ctx.request.remark or 0) % 2 == 0

    executor = FamilyExecutor("mixed", loop, 2, 100, 1000, inline=inline)
    ran_on: dict[str, bool] = {}

    def record(group: Sequence[RequestContext]) -> list[RemotingCommand | None]:
        for ctx in group:
            ran_on[ctx.request.remark or ""] = threading.get_ident() == loop_thread
        return [ctx.request.response(remark=ctx.request.remark) for ctx in group]

    remarks = [*(str(i) for i in range(10)), "bad"]
    assert await echo_remarks(executor, record, remarks) == remarks
    assert ran_on == {r: r != "bad" and int(r) % 2 == 0 for r in remarks}


async def test_dispatch_rounds_run_once_after_the_current_callback() -> None:
    """The store's dispatch rounds for sends stored on the loop: asked for by every put of
    a loop iteration, run once, after the answers; asked for from another thread (a pool
    thread's put under SYNC_FLUSH), declined, so the dispatch thread takes them."""
    schedule = LoopRounds(asyncio.get_running_loop()).schedule
    runs: list[int] = []

    def work() -> None:
        runs.append(threading.get_ident())

    assert schedule(work) and schedule(work)
    assert runs == []
    await asyncio.sleep(0)
    assert runs == [threading.get_ident()]
    assert await asyncio.to_thread(schedule, work) is False
    await asyncio.sleep(0)
    assert len(runs) == 1
    assert schedule(work)
    await asyncio.sleep(0)
    assert len(runs) == 2


async def test_work_a_round_asks_for_runs_right_after_it_before_other_ready_callbacks() -> None:
    """The pulls a dispatch round wakes are answered as soon as the round is over, not
    behind the callbacks already waiting; asked for outside a round, the work waits its
    turn; one that fails goes to the loop's exception handler and the next still runs."""
    loop = asyncio.get_running_loop()
    rounds = LoopRounds(loop)
    order: list[str] = []
    failures: list[object] = []
    loop.set_exception_handler(lambda _loop, context: failures.append(context["exception"]))

    def fail() -> None:
        raise RuntimeError("answering failed")

    def dispatch_round() -> None:
        order.append("round")
        rounds.after_round(lambda: order.append("woken pulls"))
        rounds.after_round(fail)
        rounds.after_round(lambda: order.append("more woken pulls"))

    assert rounds.schedule(dispatch_round)
    loop.call_soon(order.append, "already waiting")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert order == ["round", "woken pulls", "more woken pulls", "already waiting"]
    assert [str(exc) for exc in failures] == ["answering failed"]

    order.clear()
    rounds.after_round(lambda: order.append("outside a round"))
    assert order == []
    await asyncio.sleep(0)
    assert order == ["outside a round"]
    loop.set_exception_handler(None)


class RecordingConnection:
    """What the dispatcher and the executors use of a connection: its peer and answers."""

    peer = "127.0.0.1:50001"

    def __init__(self) -> None:
        self.answered: list[int] = []

    def respond_all(self, pairs: Sequence[tuple[RemotingCommand, RemotingCommand]]) -> None:
        self.answered += [request.opaque for request, _ in pairs]


async def test_a_connections_sends_are_stored_in_the_order_they_came() -> None:
    """A read of sends stored at once never overtakes this connection's sends still queued
    in the send executor (a read the direct way declined); another connection's go on."""
    loop = asyncio.get_running_loop()
    stored: list[tuple[str, int]] = []
    executor = FamilyExecutor("send", loop, threads=0, capacity=100, max_wait_ms=60_000)

    def queued(group: Sequence[RequestContext]) -> list[RemotingCommand | None]:
        stored.extend((ctx.conn.peer, ctx.request.opaque) for ctx in group)
        return [ctx.request.response() for ctx in group]

    def at_once(conn: Any, requests: list[RemotingCommand], _at: float, _loop: Any) -> bool:
        if any(r.opaque == 1 for r in requests):  # declined: the executor's way
            return False
        stored.extend((conn.peer, r.opaque) for r in requests)
        return True

    send = RequestCode.SEND_MESSAGE_V2
    dispatcher = Dispatcher({send: (queued, executor)}, loop, {send: at_once})
    first, other = RecordingConnection(), RecordingConnection()
    other.peer = "127.0.0.1:50002"
    dispatcher.batch(first, [RemotingCommand(send, opaque=1)])  # type: ignore[arg-type]
    dispatcher.batch(first, [RemotingCommand(send, opaque=2)])  # type: ignore[arg-type]
    dispatcher.batch(other, [RemotingCommand(send, opaque=3)])  # type: ignore[arg-type]
    assert stored == [(other.peer, 3)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert stored == [(other.peer, 3), (first.peer, 1), (first.peer, 2)]
    assert first.answered == [1, 2]
    dispatcher.batch(first, [RemotingCommand(send, opaque=4)])  # type: ignore[arg-type]
    assert stored[-1] == (first.peer, 4)
