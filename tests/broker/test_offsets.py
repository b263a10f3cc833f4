"""Consumer offsets and queue offsets, and their persistence."""

from __future__ import annotations

import json
from pathlib import Path

from rmqpy.broker.controller import BrokerController
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.protocol import Connection
from tests.broker.conftest import BrokerFactory
from tests.broker.rpc import RC, call, create_topic, dispatched, json_of, pull, send


def q(group: str, topic: str, queue_id: int = 0) -> dict[str, object]:
    return {"consumerGroup": group, "topic": topic, "queueId": queue_id}


async def test_unknown_group_starts_at_zero_while_the_queue_starts_at_zero(
    client: Connection,
) -> None:
    await create_topic(client, "OffT")
    fresh = await call(client, RC.QUERY_CONSUMER_OFFSET, q("new-group", "OffT"))
    assert (fresh.code, fresh.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
    await send(client, "OffT", b"x")
    again = await call(client, RC.QUERY_CONSUMER_OFFSET, q("new-group", "OffT"))
    assert again.ext_fields["offset"] == "0"


async def test_commit_and_query(client: Connection) -> None:
    await create_topic(client, "OffT")
    ok = await call(client, RC.UPDATE_CONSUMER_OFFSET, {**q("g", "OffT", 2), "commitOffset": 7})
    assert ok.code == ResponseCode.SUCCESS
    # Oneway, as Java clients send it: never answered, still applied.
    client.invoke_oneway(
        RemotingCommand(
            RC.UPDATE_CONSUMER_OFFSET,
            ext_fields={"consumerGroup": "g", "topic": "OffT", "queueId": "3", "commitOffset": "9"},
        )
    )
    # -1 ("nothing consumed yet") does not overwrite.
    await call(client, RC.UPDATE_CONSUMER_OFFSET, {**q("g", "OffT", 2), "commitOffset": -1})
    got2 = await call(client, RC.QUERY_CONSUMER_OFFSET, q("g", "OffT", 2))
    got3 = await call(client, RC.QUERY_CONSUMER_OFFSET, q("g", "OffT", 3))
    assert (got2.ext_fields["offset"], got3.ext_fields["offset"]) == ("7", "9")
    table = json_of(await call(client, RC.GET_ALL_CONSUMER_OFFSET))["offsetTable"]
    assert table["OffT@g"] == {"2": 7, "3": 9}


async def test_pull_with_commit_flag_commits(client: Connection) -> None:
    await send(client, "CommitT", b"x")
    await pull(client, "CommitT", 0, 0, group="cg", commit_offset=1)
    got = await call(client, RC.QUERY_CONSUMER_OFFSET, q("cg", "CommitT"))
    assert got.ext_fields["offset"] == "1"


async def test_queue_offsets_and_times(broker: BrokerController, client: Connection) -> None:
    for i in range(3):
        await send(client, "TimeT", f"{i}".encode())
    await dispatched(broker)
    ext = {"topic": "TimeT", "queueId": 0}
    assert (await call(client, RC.GET_MAX_OFFSET, ext)).ext_fields["offset"] == "3"
    assert (await call(client, RC.GET_MIN_OFFSET, ext)).ext_fields["offset"] == "0"
    earliest = int((await call(client, RC.GET_EARLIEST_MSG_STORETIME, ext)).ext_fields["timestamp"])
    assert earliest > 0
    found = await call(client, RC.SEARCH_OFFSET_BY_TIMESTAMP, {**ext, "timestamp": earliest})
    assert found.ext_fields["offset"] == "0"
    future = await call(
        client, RC.SEARCH_OFFSET_BY_TIMESTAMP, {**ext, "timestamp": earliest + 10**9}
    )
    assert future.ext_fields["offset"] == "3"


async def test_offsets_survive_a_restart(start_broker: BrokerFactory, tmp_path: Path) -> None:
    broker: BrokerController = await start_broker()
    conn = await connect("127.0.0.1", broker.port)
    await create_topic(conn, "KeepT")
    await call(conn, RC.UPDATE_CONSUMER_OFFSET, {**q("keep", "KeepT", 1), "commitOffset": 42})
    await conn.aclose()
    await broker.shutdown()
    saved = json.loads((tmp_path / "store" / "config" / "consumerOffset.json").read_text())
    assert saved["offsetTable"]["KeepT@keep"] == {"1": 42}
    again = await start_broker()
    conn = await connect("127.0.0.1", again.port)
    got = await call(conn, RC.QUERY_CONSUMER_OFFSET, q("keep", "KeepT", 1))
    assert got.ext_fields["offset"] == "42"
    assert again.topics.get("KeepT") is not None
    await conn.aclose()


async def test_java_style_offset_file_is_read(start_broker: BrokerFactory, tmp_path: Path) -> None:
    config_dir = tmp_path / "store" / "config"
    config_dir.mkdir(parents=True)
    # fastjson writes integer map keys without quotes.
    (config_dir / "consumerOffset.json").write_text('{"offsetTable":{"JT@jg":{0:12,1:7}}}')
    broker = await start_broker()
    assert broker.offsets.query("jg", "JT", 0) == 12
