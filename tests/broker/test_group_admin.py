"""What mqadmin and RocketMQ Dashboard ask a broker about queues, groups and clients, answered
with Java 4.9's bodies: queue-keyed maps as fastjson writes them, read here by their exact text
(`spec_queue_keyed`)."""

from __future__ import annotations

import asyncio
import json
import time

from rmqpy.broker.controller import BrokerController
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.protocol import Connection
from tests.broker.conftest import BrokerFactory
from tests.broker.rpc import RC, call, create_topic, heartbeat, json_of, pull, records, send
from tests.spec_bytes import spec_queue_keyed


async def commit(conn: Connection, group: str, topic: str, queue_id: int, offset: int) -> None:
    ext = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset}
    assert (await call(conn, RC.UPDATE_CONSUMER_OFFSET, ext)).code == ResponseCode.SUCCESS


async def test_topic_status_gives_each_queue_its_offsets_and_last_store_time(
    broker: BrokerController, client: Connection
) -> None:
    await create_topic(client, "StatsT", queues=2)
    before = int(time.time() * 1000)
    for body in (b"a", b"b", b"c"):
        await send(client, "StatsT", body, queue_id=0)
    await send(client, "StatsT", b"d", queue_id=1)
    answer = await call(client, RC.GET_TOPIC_STATS_INFO, {"topic": "StatsT"})
    assert answer.code == ResponseCode.SUCCESS
    table = spec_queue_keyed(answer.body)["offsetTable"]
    name = broker.settings.broker.broker_name
    q0, q1 = table[f"StatsT/{name}/0"], table[f"StatsT/{name}/1"]
    assert (q0["minOffset"], q0["maxOffset"], q1["maxOffset"]) == (0, 3, 1)
    assert q0["lastUpdateTimestamp"] >= before
    missing = await call(client, RC.GET_TOPIC_STATS_INFO, {"topic": "NoSuchT"})
    assert (missing.code, missing.remark) == (
        ResponseCode.TOPIC_NOT_EXIST,
        "topic[NoSuchT] not exist",
    )


async def test_a_subscription_group_is_created_changed_and_deleted_with_its_offsets(
    client: Connection,
) -> None:
    config = {"groupName": "OpsGroup", "retryMaxTimes": 3, "consumeBroadcastEnable": False}
    made = await call(
        client, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode()
    )
    assert made.code == ResponseCode.SUCCESS
    listed = json_of(await call(client, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert listed["subscriptionGroupTable"]["OpsGroup"]["retryMaxTimes"] == 3
    await send(client, "OpsT", b"x")
    await commit(client, "OpsGroup", "OpsT", 0, 1)
    ext = {"groupName": "OpsGroup", "removeOffset": True}
    assert (await call(client, RC.DELETE_SUBSCRIPTIONGROUP, ext)).code == ResponseCode.SUCCESS
    listed = json_of(await call(client, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert "OpsGroup" not in listed["subscriptionGroupTable"]
    offsets = json_of(await call(client, RC.GET_ALL_CONSUMER_OFFSET))["offsetTable"]
    assert "OpsT@OpsGroup" not in offsets
    bad = await call(client, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"retryMaxTimes":"x"}')
    assert bad.code == ResponseCode.SYSTEM_ERROR and "groupName" in (bad.remark or "")


async def test_consumer_progress_gives_broker_and_consumer_offsets_per_queue(
    broker: BrokerController, client: Connection
) -> None:
    await create_topic(client, "ProgressT", queues=2)
    for body in (b"a", b"b", b"c", b"d"):
        await send(client, "ProgressT", body, queue_id=0)
    await commit(client, "ProgressG", "ProgressT", 0, 3)
    for topic in ("ProgressT", ""):  # named, and every topic the group has offsets for
        answer = await call(
            client, RC.GET_CONSUME_STATS, {"consumerGroup": "ProgressG", "topic": topic}
        )
        stats = spec_queue_keyed(answer.body)
        name = broker.settings.broker.broker_name
        q0, q1 = (
            stats["offsetTable"][f"ProgressT/{name}/0"],
            stats["offsetTable"][f"ProgressT/{name}/1"],
        )
        assert (q0["brokerOffset"], q0["consumerOffset"]) == (4, 3)
        assert q0["lastTimestamp"] > 0  # the store time of the last message consumed
        assert (q1["brokerOffset"], q1["consumerOffset"], q1["lastTimestamp"]) == (0, 0, 0)
        assert isinstance(stats["consumeTps"], float)
    by_who = json_of(await call(client, RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "ProgressT"}))
    assert by_who == {"groupList": ["ProgressG"]}


async def test_connections_list_each_client_with_its_language_and_subscriptions(
    client: Connection, connect_to: object
) -> None:
    await heartbeat(client, "10.0.0.1@1", "ConnG", "ConnT")
    body = {"clientID": "10.0.0.1@1", "consumerDataSet": [],
            "producerDataSet": [{"groupName": "ConnP"}]}  # fmt: skip
    await call(client, RC.HEART_BEAT, body=json.dumps(body).encode())
    answer = await call(client, RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "ConnG"})
    assert answer.code == ResponseCode.SUCCESS
    connection = json_of(answer)
    (member,) = connection["connectionSet"]
    assert member["clientId"] == "10.0.0.1@1" and member["language"] == "PYTHON"
    assert member["clientAddr"].startswith("127.0.0.1:") and member["version"] > 0
    assert connection["messageModel"] == "CLUSTERING"
    assert connection["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
    assert connection["subscriptionTable"]["ConnT"]["subString"] == "*"
    producers = json_of(
        await call(client, RC.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "ConnP"})
    )
    assert [p["clientId"] for p in producers["connectionSet"]] == ["10.0.0.1@1"]
    offline = await call(client, RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "Nobody"})
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert offline.remark == "the consumer group[Nobody] not online"
    unknown = await call(client, RC.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "Nobody"})
    assert unknown.code == ResponseCode.SYSTEM_ERROR


async def test_reset_by_time_moves_offsets_back_and_tells_the_online_consumer(
    broker: BrokerController, client: Connection, connect_to: object
) -> None:
    told: asyncio.Queue[RemotingCommand] = asyncio.Queue()

    def on_request(_conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.code != RC.NOTIFY_CONSUMER_IDS_CHANGED:
            told.put_nowait(cmd)

    member = await connect_to(on_request=on_request)  # type: ignore[operator]
    await heartbeat(member, "10.0.0.2@1", "ResetG", "ResetT")
    await create_topic(client, "ResetT", queues=1)
    await send(client, "ResetT", b"old")
    await asyncio.sleep(0.02)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.02)
    await send(client, "ResetT", b"new")
    await commit(client, "ResetG", "ResetT", 0, 2)
    ext = {"topic": "ResetT", "group": "ResetG", "timestamp": middle, "isForce": False}
    answer = await call(client, RC.INVOKE_BROKER_TO_RESET_OFFSET, ext)
    assert answer.code == ResponseCode.SUCCESS
    key = f"ResetT/{broker.settings.broker.broker_name}/0"
    assert spec_queue_keyed(answer.body)["offsetTable"] == {key: 1}
    query = {"consumerGroup": "ResetG", "topic": "ResetT", "queueId": 0}
    assert (await call(client, RC.QUERY_CONSUMER_OFFSET, query)).ext_fields["offset"] == "1"
    notice = await asyncio.wait_for(told.get(), 5)
    assert notice.code == RC.RESET_CONSUMER_CLIENT_OFFSET
    assert notice.ext_fields["group"] == "ResetG" and notice.ext_fields["timestamp"] == str(middle)
    assert spec_queue_keyed(notice.body)["offsetTable"] == {key: 1}
    # not forced, a later time does not move the group forward; forced to the end (-1), it does
    ext.update(timestamp=int(time.time() * 1000) + 60_000)
    assert spec_queue_keyed((await call(client, RC.INVOKE_BROKER_TO_RESET_OFFSET, ext)).body)[
        "offsetTable"
    ] == {key: 1}
    ext.update(timestamp=-1, isForce=True)
    assert spec_queue_keyed((await call(client, RC.INVOKE_BROKER_TO_RESET_OFFSET, ext)).body)[
        "offsetTable"
    ] == {key: 2}
    stranger = dict(ext, group="NeverSeen")
    refused = await call(client, RC.INVOKE_BROKER_TO_RESET_OFFSET, stranger)
    assert (refused.code, refused.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "THe consumer group <NeverSeen> not exist",
    )


async def test_broker_config_lists_every_setting_with_secrets_masked(
    start_broker: BrokerFactory,
) -> None:
    broker = await start_broker(metricsBearerToken="s3cret-token", brokerName="ConfB")
    conn = await connect("127.0.0.1", broker.port)
    answer = await call(conn, RC.GET_BROKER_CONFIG)
    assert answer.code == ResponseCode.SUCCESS
    lines = dict(line.split("=", 1) for line in answer.body.decode().splitlines())
    assert lines["brokerName"] == "ConfB" and lines["flushDiskType"] == "ASYNC_FLUSH"
    assert lines["metricsBearerToken"] == "******" and b"s3cret" not in answer.body
    assert set(json.loads(answer.ext_fields["version"])) == {"counter", "stateVersion", "timestamp"}
    await conn.aclose()


async def test_broker_permission_changes_live_and_takes_the_broker_out_of_write_routes(
    broker: BrokerController, client: Connection
) -> None:
    """UPDATE_BROKER_CONFIG (25) with brokerPermission=4, as an operator drains a broker:
    sends are refused, the route advertises the topic read-only, pulls go on; 6 undoes it.
    Settings that cannot change live are refused by name, and nothing of the request applies."""
    await create_topic(client, "DrainT", queues=1)
    await send(client, "DrainT", b"before")

    async def route_perm() -> int:
        route = json_of(await call(client, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "DrainT"}))
        return int(route["queueDatas"][0]["perm"])

    assert await route_perm() == 6
    drain = await call(client, RC.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4\n")
    assert drain.code == ResponseCode.SUCCESS
    config = (await call(client, RC.GET_BROKER_CONFIG)).body.decode()
    assert "brokerPermission=4\n" in config
    assert await route_perm() == 4
    assert (await send(client, "DrainT", b"refused")).code == ResponseCode.NO_PERMISSION
    assert [r.body for r in records((await pull(client, "DrainT", 0, 0)).body)] == [b"before"]
    mixed = await call(
        client, RC.UPDATE_BROKER_CONFIG, body=b"brokerPermission=6\nflushDiskType=SYNC_FLUSH\n"
    )
    assert mixed.code == ResponseCode.SYSTEM_ERROR and "flushDiskType" in (mixed.remark or "")
    assert await route_perm() == 4  # all or none
    bad = await call(client, RC.UPDATE_BROKER_CONFIG, body=b"brokerPermission=9\n")
    assert bad.code == ResponseCode.SYSTEM_ERROR
    assert (await call(client, RC.UPDATE_BROKER_CONFIG, body=b"brokerPermission=6")).code == 0
    assert await route_perm() == 6
    assert (await send(client, "DrainT", b"after")).code == ResponseCode.SUCCESS


async def test_consume_directly_hands_the_record_to_the_named_client_and_relays_its_answer(
    broker: BrokerController, client: Connection, connect_to: object
) -> None:
    """CONSUME_MESSAGE_DIRECTLY (309) as Java's `callConsumer`: the client gets the request's
    fields plus brokerName, the whole stored record as the body, and its answer is ours."""
    asked: list[RemotingCommand] = []

    def on_request(conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.code == RC.CONSUME_MESSAGE_DIRECTLY:
            asked.append(cmd)
            body = json.dumps({"consumeResult": "CR_LATER", "order": False, "autoCommit": True,
                               "remark": None, "spentTimeMills": 3})  # fmt: skip
            conn.respond(cmd, cmd.response(body=body.encode()))

    member = await connect_to(on_request=on_request)  # type: ignore[operator]
    await heartbeat(member, "10.0.0.3@1", "DirectG", "DirectT")
    sent = await send(client, "DirectT", b"look at me")
    offset_msg_id = sent.ext_fields["msgId"]  # (SendMessageResponseHeader's msgId)
    ext = {"consumerGroup": "DirectG", "clientId": "10.0.0.3@1", "msgId": offset_msg_id}
    answer = await call(client, RC.CONSUME_MESSAGE_DIRECTLY, ext, timeout_s=15)
    assert answer.code == ResponseCode.SUCCESS
    assert json.loads(answer.body)["consumeResult"] == "CR_LATER"
    [request] = asked
    assert request.ext_fields["brokerName"] == broker.settings.broker.broker_name
    assert request.ext_fields["msgId"] == offset_msg_id
    assert [r.body for r in records(request.body)] == [b"look at me"]
    nobody = await call(client, RC.CONSUME_MESSAGE_DIRECTLY, dict(ext, clientId="gone"))
    assert (nobody.code, nobody.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "The Consumer <DirectG> <gone> not online",
    )
