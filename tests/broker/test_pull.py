"""Pulls: status codes and offsets as RocketMQ's `PullMessageProcessor` answers, tag filters, and
long polling."""

from __future__ import annotations

import asyncio
import time

import pytest

from rmqpy.broker.context import RequestContext
from rmqpy.broker.controller import BrokerController
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.protocol import Connection
from tests.broker.conftest import BrokerFactory
from tests.broker.rpc import RC, call, create_topic, dispatched, pull, pull_ext, records, send
from tests.store.page_cache import drop_pages, store_tells_pages_apart


async def test_found_pull_carries_offsets_and_records(client: Connection) -> None:
    for i in range(5):
        await send(client, "PullT", f"m{i}".encode())
    first = await pull(client, "PullT", 0, 0, max_nums=3)
    assert first.code == ResponseCode.SUCCESS and first.remark == "FOUND"
    assert [r.body for r in records(first.body)] == [b"m0", b"m1", b"m2"]
    assert first.ext_fields["nextBeginOffset"] == "3"
    assert first.ext_fields["suggestWhichBrokerId"] == "0"
    # Dispatch of the last sends may trail the first pull; the rest come by offset 3.
    rest = await pull(client, "PullT", 0, 3)
    assert [r.body for r in records(rest.body)] == [b"m3", b"m4"]
    assert (rest.ext_fields["minOffset"], rest.ext_fields["maxOffset"]) == ("0", "5")


async def test_pull_of_an_unknown_topic(client: Connection) -> None:
    response = await pull(client, "NoSuchT", 0, 0, suspend_ms=0)
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert response.remark == "topic[NoSuchT] not exist, apply first please!"


async def test_not_found_and_offset_moved(client: Connection) -> None:
    assert (await create_topic(client, "FreshT")).code == ResponseCode.SUCCESS
    empty = await pull(client, "FreshT", 0, 0, suspend_ms=0)
    assert empty.code == ResponseCode.PULL_NOT_FOUND
    assert set(empty.ext_fields) >= {"nextBeginOffset", "minOffset", "maxOffset"}
    assert (await pull(client, "FreshT", 0, 5, suspend_ms=0)).code == ResponseCode.PULL_OFFSET_MOVED
    await send(client, "FreshT", b"x")
    await pull(client, "FreshT", 0, 0)  # wait for dispatch
    beyond = await pull(client, "FreshT", 0, 9, suspend_ms=0)
    assert beyond.code == ResponseCode.PULL_OFFSET_MOVED
    assert beyond.ext_fields["nextBeginOffset"] == "0"  # the queue begins at 0: RocketMQ 4.x
    caught_up = await pull(client, "FreshT", 0, 1, suspend_ms=0)
    assert caught_up.code == ResponseCode.PULL_NOT_FOUND
    assert caught_up.ext_fields["nextBeginOffset"] == "1"


async def test_tag_filter(broker: BrokerController, client: Connection) -> None:
    await send(client, "TagT", b"a", tags="TagA")
    await send(client, "TagT", b"b", tags="TagB")
    await send(client, "TagT", b"c", tags="TagC")
    await dispatched(broker)
    got = await pull(client, "TagT", 0, 0, subscription="TagB || TagC")
    assert [r.body for r in records(got.body)] == [b"b", b"c"]
    only_a = await pull(client, "TagT", 0, 1, subscription="TagA", suspend_ms=0)
    assert only_a.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert only_a.ext_fields["nextBeginOffset"] == "3"


async def test_long_poll_is_answered_when_a_message_arrives(
    broker: BrokerController, connect_to: object, client: Connection
) -> None:
    await send(client, "LongT", b"old")
    await pull(client, "LongT", 0, 0)
    waiting = asyncio.ensure_future(pull(client, "LongT", 0, 1, suspend_ms=10_000, timeout_s=15))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    assert broker.hold.parked_count() == 1
    started = time.monotonic()
    await send(client, "LongT", b"new")
    got = await waiting
    assert time.monotonic() - started < 1.0
    assert [r.body for r in records(got.body)] == [b"new"]


async def test_a_parked_pull_on_a_deleted_topic_is_answered_when_it_is_sent_to_again(
    broker: BrokerController, client: Connection
) -> None:
    """The queue starts over at 0 under a pull parked at offset 2: the first new message
    answers it PULL_OFFSET_MOVED back to 0, instead of leaving it parked until its suspend
    time runs out (the new message is below its offset, so it never matched)."""
    for body in (b"a", b"b"):
        await send(client, "GoneT", body)
    await pull(client, "GoneT", 0, 0)
    waiting = asyncio.ensure_future(pull(client, "GoneT", 0, 2, suspend_ms=10_000, timeout_s=15))
    await asyncio.sleep(0.3)
    assert broker.hold.parked_count() == 1
    assert (await call(client, RC.DELETE_TOPIC_IN_BROKER, {"topic": "GoneT"})).code == 0
    started = time.monotonic()
    await send(client, "GoneT", b"new")
    moved = await waiting
    assert time.monotonic() - started < 5.0
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED
    assert moved.ext_fields["nextBeginOffset"] == "0"


async def test_long_poll_times_out_with_not_found(client: Connection) -> None:
    await send(client, "IdleT", b"x")
    await pull(client, "IdleT", 0, 0)
    started = time.monotonic()
    got = await pull(client, "IdleT", 0, 1, suspend_ms=600)
    elapsed = time.monotonic() - started
    assert got.code == ResponseCode.PULL_NOT_FOUND
    assert 0.5 <= elapsed < 3.0


async def test_parked_pull_ignores_messages_its_tags_do_not_match(
    broker: BrokerController, client: Connection
) -> None:
    await send(client, "FilterT", b"x", tags="TagA")
    await pull(client, "FilterT", 0, 0)
    waiting = asyncio.ensure_future(
        pull(client, "FilterT", 0, 1, subscription="TagB", suspend_ms=10_000, timeout_s=15)
    )
    await asyncio.sleep(0.2)
    await send(client, "FilterT", b"not for me", tags="TagA")
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await send(client, "FilterT", b"for me", tags="TagB")
    got = await waiting
    assert [r.body for r in records(got.body)] == [b"for me"]


async def test_shutdown_answers_parked_pulls(broker: BrokerController, client: Connection) -> None:
    await create_topic(client, "ShutT")
    waiting = asyncio.ensure_future(pull(client, "ShutT", 0, 0, suspend_ms=30_000, timeout_s=10))
    await asyncio.sleep(0.2)
    await broker.shutdown()
    got = await waiting
    assert got.code == ResponseCode.PULL_NOT_FOUND


async def test_pulls_of_records_out_of_the_page_cache_are_answered_by_the_pull_threads(
    start_broker: BrokerFactory,
) -> None:
    """The event loop never waits for the disk: a pull whose records left the page cache is
    handed to the pull threads, and the pulls read with it are answered on the loop."""
    store_tells_pages_apart()
    broker = await start_broker(warmCommitLogFiles="false")
    conn = await connect("127.0.0.1", broker.port)
    try:
        for i in range(20):
            await send(conn, "ColdT", f"m{i}".encode())
            await send(conn, "WarmT", f"w{i}".encode())
        await dispatched(broker)
        assert broker.store is not None
        broker.store.commitlog.queue.flush(0)
        files = broker.store.commitlog.queue.files
        written = broker.store.commitlog.max_offset()
        handed: list[str] = []
        hand_over = broker.pull.hand_over
        assert hand_over is not None

        def watched(ctx: RequestContext) -> None:
            handed.append(ctx.request.ext_fields["topic"])
            hand_over(ctx)

        broker.pull.hand_over = watched
        # Clean pages dropped, the store's mappings first letting go of any a read on the
        # loop mapped in.
        fds, mappings = [f.fd for f in files], [f.mapping for f in files]
        if not drop_pages(fds, files[0].fd, written, mappings=mappings):
            pytest.skip("this filesystem keeps the pages (tmpfs)")
        cold, warm = await asyncio.gather(  # one read, most likely; either way the same
            call(conn, RC.PULL_MESSAGE, pull_ext("ColdT", 0, 0)),
            call(conn, RC.PULL_MESSAGE, pull_ext("WarmT", 0, 20)),
        )
        assert [r.body for r in records(cold.body)] == [f"m{i}".encode() for i in range(20)]
        assert warm.code == ResponseCode.PULL_NOT_FOUND
        assert handed == ["ColdT"]
    finally:
        await conn.aclose()
