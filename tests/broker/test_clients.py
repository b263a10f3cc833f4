"""Heartbeats, group membership, NOTIFY_CONSUMER_IDS_CHANGED, and orderly-consumption locks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from rmqpy.broker.controller import BrokerController
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.protocol import Connection
from tests.broker.rpc import RC, call, heartbeat, json_of

Connect = Callable[..., Awaitable[Connection]]


async def consumer_list(conn: Connection, group: str) -> RemotingCommand:
    return await call(conn, RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})


async def test_heartbeats_with_enum_names_and_ordinals(
    client: Connection, connect_to: Connect
) -> None:
    other = await connect_to()
    assert (await heartbeat(client, "c1", "grp", "T")).code == ResponseCode.SUCCESS
    assert (await heartbeat(other, "c2", "grp", "T", ordinals=True)).code == ResponseCode.SUCCESS
    ids = json_of(await consumer_list(client, "grp"))["consumerIdList"]
    assert ids == ["c1", "c2"]
    assert (await consumer_list(client, "nobody")).code == ResponseCode.SYSTEM_ERROR


async def test_members_are_told_when_the_group_changes(connect_to: Connect) -> None:
    notes: list[RemotingCommand] = []

    def on_request(conn: Connection, request: RemotingCommand) -> None:
        notes.append(request)
        conn.request_done()

    async def notes_reach(count: int) -> None:
        async with asyncio.timeout(5):
            while len(notes) < count:
                await asyncio.sleep(0.01)

    first = await connect_to(on_request=on_request)
    await heartbeat(first, "c1", "grp", "T")
    await notes_reach(1)  # its own joining
    second = await connect_to()
    await heartbeat(second, "c2", "grp", "T")
    await notes_reach(2)
    assert all(n.code == RC.NOTIFY_CONSUMER_IDS_CHANGED and n.is_oneway for n in notes)
    assert notes[-1].ext_fields == {"consumerGroup": "grp"}
    # The second member's connection drops: the first is told again and the list shrinks.
    await second.aclose()
    await notes_reach(3)
    ids = json_of(await consumer_list(first, "grp"))["consumerIdList"]
    assert ids == ["c1"]


async def test_unregister_drops_the_client(client: Connection) -> None:
    await heartbeat(client, "c1", "grp", "T")
    ok = await call(client, RC.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": "grp"})
    assert ok.code == ResponseCode.SUCCESS
    assert (await consumer_list(client, "grp")).code == ResponseCode.SYSTEM_ERROR


async def test_heartbeat_creates_the_retry_topic_and_group(
    broker: BrokerController, client: Connection
) -> None:
    await heartbeat(client, "c1", "fresh-group", "T")
    assert broker.topics.get("%RETRY%fresh-group") is not None
    assert broker.groups.table.get("fresh-group") is not None


@pytest.mark.parametrize(
    "body", [b"{not json", b"[" * 100_000 + b"]" * 100_000], ids=["not-json", "nested-too-deep"]
)
async def test_bad_heartbeat_and_lock_bodies_are_bad_requests(
    client: Connection, body: bytes
) -> None:
    """Answered with what is wrong, no traceback: a body nested too deep for the JSON
    parser's recursion used to reach the executor as a RecursionError ("processor failed")."""
    response = await call(client, RC.HEART_BEAT, body=body)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "bad heartbeat body" in (response.remark or "")
    response = await call(client, RC.LOCK_BATCH_MQ, body=body)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "bad lock body" in (response.remark or "")


async def test_lock_batch_gives_each_queue_to_one_client(client: Connection) -> None:
    mqs = [{"topic": "T", "brokerName": "broker-a", "queueId": i} for i in range(3)]

    async def lock(client_id: str, queues: list[dict[str, object]]) -> list[dict[str, object]]:
        body = {
            "consumerGroup": "og",
            "clientId": client_id,
            "onlyThisBroker": True,
            "mqSet": queues,
        }
        response = await call(client, RC.LOCK_BATCH_MQ, body=json.dumps(body).encode())
        locked: list[dict[str, object]] = json_of(response)["lockOKMQSet"]
        return locked

    assert await lock("c1", mqs[:2]) == mqs[:2]
    assert await lock("c2", mqs) == mqs[2:]
    body = {"consumerGroup": "og", "clientId": "c1", "mqSet": mqs[:1]}
    await call(client, RC.UNLOCK_BATCH_MQ, body=json.dumps(body).encode())
    assert await lock("c2", mqs) == [mqs[0], mqs[2]]
