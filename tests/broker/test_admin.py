"""Topic admin, runtime info, routes from the embedded name server, unsupported codes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from rmqpy.bench.processes import free_port
from rmqpy.broker.controller import BrokerController
from rmqpy.broker.topics import TopicConfig
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.protocol import Connection
from tests.broker.conftest import BrokerFactory
from tests.broker.rpc import RC, call, create_topic, json_of, pull, records, send, send_ext

Connect = Callable[..., Awaitable[Connection]]


async def test_create_list_and_delete_topics(broker: BrokerController, client: Connection) -> None:
    assert (await create_topic(client, "AdminT", queues=3)).code == ResponseCode.SUCCESS
    table = json_of(await call(client, RC.GET_ALL_TOPIC_CONFIG))["topicConfigTable"]
    assert table["AdminT"]["readQueueNums"] == 3 and table["AdminT"]["perm"] == 6
    assert "TBW102" in table
    await send(client, "AdminT", b"x")
    assert (await call(client, RC.DELETE_TOPIC_IN_BROKER, {"topic": "AdminT"})).code == 0
    table = json_of(await call(client, RC.GET_ALL_TOPIC_CONFIG))["topicConfigTable"]
    assert "AdminT" not in table
    max_offset = await call(client, RC.GET_MAX_OFFSET, {"topic": "AdminT", "queueId": 0})
    assert max_offset.ext_fields["offset"] == "0"


async def test_every_subscription_group_as_a_java_broker_lists_them(
    broker: BrokerController, client: Connection
) -> None:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): `SubscriptionGroupManager.encode`, a
    `subscriptionGroupTable` of SubscriptionGroupConfig, with a group a pull made."""
    await send(client, "GroupsT", b"x")
    await pull(client, "GroupsT", 0, 0, group="listed-group")
    answer = await call(client, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert answer.code == ResponseCode.SUCCESS
    table = json_of(answer)["subscriptionGroupTable"]
    listed = table["listed-group"]
    assert listed["groupName"] == "listed-group"
    java_fields = {"groupName", "consumeEnable", "consumeFromMinEnable",
                   "consumeBroadcastEnable", "retryQueueNums", "retryMaxTimes", "brokerId",
                   "whichBrokerWhenConsumeSlowly", "notifyConsumerIdsChangedEnable"}  # fmt: skip
    assert java_fields <= set(listed)


def test_a_topic_config_written_out_keeps_every_field() -> None:
    """`to_json` is spelled out for speed; every field of the dataclass must be in it."""
    config = TopicConfig("T", 3, 5, 4, "MULTI_TAG", 1, True)
    assert config.to_json() == dataclasses.asdict(config)
    assert TopicConfig.from_json(config.to_json()) == config


async def test_bad_topic_name_is_refused(client: Connection) -> None:
    response = await create_topic(client, "no spaces please")
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "illegal" in (response.remark or "")


async def test_system_topics_cannot_be_created_changed_or_deleted(client: Connection) -> None:
    """Admin requests on the broker's own topics are refused as RocketMQ refuses them.
    Deleting SCHEDULE_TOPIC_XXXX used to drop its consume queues, and with them every
    acknowledged delayed message still waiting there."""
    ext = send_ext("LaterT", 0, {"DELAY": "5"})  # the longest level here: 500 ms
    assert (await call(client, RC.SEND_MESSAGE_V2, ext, b"later")).code == ResponseCode.SUCCESS
    for topic in ("SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_mine",
                  "DefaultCluster"):  # fmt: skip
        deleted = await call(client, RC.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        created = await create_topic(client, topic, queues=1)
        for answer in (deleted, created):
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert answer.remark == f"The topic[{topic}] is conflict with system topic."
    table = json_of(await call(client, RC.GET_ALL_TOPIC_CONFIG))["topicConfigTable"]
    assert table["TBW102"]["readQueueNums"] == 8
    due = await pull(client, "LaterT", 0, 0, suspend_ms=5000)
    assert [r.body for r in records(due.body)] == [b"later"]


async def test_runtime_info(client: Connection) -> None:
    await send(client, "InfoT", b"x")
    table = json_of(await call(client, RC.GET_BROKER_RUNTIME_INFO))["table"]
    assert int(table["commitLogMaxOffset"]) > 0
    assert table["brokerVersion"] == "401"


async def test_unknown_request_code(client: Connection) -> None:
    response = await call(client, 9999)
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 9999 not supported"


async def test_routes_from_the_name_server_and_the_broker_port(
    start_broker: BrokerFactory,
) -> None:
    broker = await start_broker(namesrvListenPort=0)
    assert broker.namesrv_port == 0  # 0 turns the embedded name server off
    conn = await connect("127.0.0.1", broker.port)
    await create_topic(conn, "RouteT", queues=2)
    route = json_of(await call(conn, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "RouteT"}))
    assert route["queueDatas"] == [
        {
            "brokerName": "broker-a",
            "perm": 6,
            "readQueueNums": 2,
            "topicSysFlag": 0,
            "writeQueueNums": 2,
        }
    ]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": f"127.0.0.1:{broker.port}"}
    cluster = json_of(await call(conn, RC.GET_BROKER_CLUSTER_INFO))
    assert cluster["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    await conn.aclose()


async def test_a_route_query_for_an_unknown_topic_creates_nothing(
    start_broker: BrokerFactory,
) -> None:
    broker = await start_broker(namesrvListenPort=free_port())
    ns = await connect("127.0.0.1", broker.namesrv_port)
    for topic in ("NewT", "%RETRY%g"):
        route = await call(ns, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        assert route.code == ResponseCode.TOPIC_NOT_EXIST  # as Java's name server answers
        assert route.remark == f"No topic route info in name server for the topic: {topic}"
        assert broker.topics.get(topic) is None
    assert not Path(broker.topics.path).exists()  # nothing was ever created
    # The name-server port serves routes only.
    assert (await call(ns, RC.GET_MAX_OFFSET, {"topic": "NewT", "queueId": 0})).code == 3
    await ns.aclose()


async def test_unknown_topics_may_be_routed_through_tbw102_without_being_created(
    start_broker: BrokerFactory,
) -> None:
    broker = await start_broker(routeUnknownTopicsThroughDefault="true")
    conn = await connect("127.0.0.1", broker.port)
    route = await call(conn, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Later"})
    assert route.code == ResponseCode.SUCCESS
    [queues] = json_of(route)["queueDatas"]
    assert (queues["readQueueNums"], queues["writeQueueNums"], queues["perm"]) == (4, 4, 6)
    assert broker.topics.get("Later") is None
    # The first send through that route creates the topic, as the client asked.
    assert (await send(conn, "Later", b"x", 3)).code == ResponseCode.SUCCESS
    config = broker.topics.get("Later")
    assert config is not None and config.writeQueueNums == 4
    await conn.aclose()


async def test_a_broker_registration_that_does_not_bind_is_refused(
    start_broker: BrokerFactory,
) -> None:
    """A REGISTER_BROKER body that is no JSON object, not UTF-8, or whose topic configs do not
    bind to TopicConfig's numbers is answered SYSTEM_ERROR saying why. Such a body used to
    fail in the processor, or be kept and then fail every route query for its topics."""
    broker = await start_broker(namesrvListenPort=free_port())
    ns = await connect("127.0.0.1", broker.namesrv_port)
    ext = {"brokerName": "b", "brokerAddr": "127.0.0.1:1", "clusterName": "C",
           "haServerAddr": "", "brokerId": 0}  # fmt: skip

    def registration(table: object) -> bytes:
        return json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}}).encode()

    bad = [b"null", b"[]", b"\xff\xfe", registration(["OtherT"]), registration({"OtherT": 5}),
           registration({"OtherT": {"readQueueNums": "x"}}),
           registration({"OtherT": {"perm": 2**40}})]  # fmt: skip
    for body in bad:
        answer = await call(ns, RC.REGISTER_BROKER, ext, body)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert (answer.remark or "").startswith("bad broker registration body"), answer.remark
    good = registration({"OtherT": {"readQueueNums": 2, "writeQueueNums": "2", "perm": 6}})
    assert (await call(ns, RC.REGISTER_BROKER, ext, good)).code == ResponseCode.SUCCESS
    route = json_of(await call(ns, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "OtherT"}))
    assert route["queueDatas"][0]["writeQueueNums"] == 2
    await ns.aclose()


async def test_topics_created_by_sends_and_deleted_by_admins_at_once_are_all_kept_right(
    broker: BrokerController, connect_to: Connect
) -> None:
    """Sends to new topics (created on the fly) on several connections while an admin
    deletes others: every send is answered SEND_OK and every delete SUCCESS, and topics.json
    ends as the broker's table. The threads persisting the table used to trip over each
    other's temporary files (sends failed with SYSTEM_ERROR 'No such file or directory')."""
    conns = [await connect_to() for _ in range(4)]
    admin = await connect_to()

    async def sender(conn: Connection, k: int) -> list[int]:
        return [(await send(conn, f"Auto{k}-{i}", b"x")).code for i in range(40)]

    async def deleter() -> list[int]:
        codes = []
        for i in range(40):
            assert (await create_topic(admin, f"Gone{i}", queues=1)).code == 0
            codes.append((await call(admin, RC.DELETE_TOPIC_IN_BROKER, {"topic": f"Gone{i}"})).code)
        return codes

    results = await asyncio.gather(*(sender(c, k) for k, c in enumerate(conns)), deleter())
    assert all(code == ResponseCode.SUCCESS for codes in results for code in codes), results
    assert broker.store is not None
    topics_json = Path(broker.store.config.config_dir) / "topics.json"
    on_disk = json.loads(topics_json.read_text())["topicConfigTable"]
    assert set(on_disk) == set(broker.topics.snapshot())
    assert {f"Auto{k}-{i}" for k in range(4) for i in range(40)} <= set(on_disk)
    assert not [t for t in on_disk if t.startswith("Gone")]
