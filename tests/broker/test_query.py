"""Query by key, view by id, and CONSUMER_SEND_MSG_BACK to %RETRY% and %DLQ%."""

from __future__ import annotations

import time

from rmqpy.broker.controller import BrokerController
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.protocol import Connection
from rmqpy.store.message_id import decode_offset_msg_id
from tests.broker.rpc import RC, call, dispatched, pull, records, send


def window() -> dict[str, int]:
    now = int(time.time() * 1000)
    return {"beginTimestamp": now - 60_000, "endTimestamp": now + 60_000}


async def test_query_by_key_and_view_by_id(broker: BrokerController, client: Connection) -> None:
    sent = await send(client, "QueryT", b"findme", keys="order-1 order-2")
    await send(client, "QueryT", b"other", keys="order-3")
    await dispatched(broker)  # the index trails the acknowledgement
    hit = await call(
        client, RC.QUERY_MESSAGE, {"topic": "QueryT", "key": "order-2", "maxNum": 32, **window()}
    )
    assert hit.code == ResponseCode.SUCCESS
    assert [r.body for r in records(hit.body)] == [b"findme"]
    assert int(hit.ext_fields["indexLastUpdatePhyoffset"]) >= 0
    miss = await call(
        client, RC.QUERY_MESSAGE, {"topic": "QueryT", "key": "nope", "maxNum": 32, **window()}
    )
    assert miss.code == ResponseCode.QUERY_NOT_FOUND
    _, phy = decode_offset_msg_id(sent.ext_fields["msgId"])
    viewed = await call(client, RC.VIEW_MESSAGE_BY_ID, {"offset": phy})
    assert [r.body for r in records(viewed.body)] == [b"findme"]
    gone = await call(client, RC.VIEW_MESSAGE_BY_ID, {"offset": 10**9})
    assert gone.code == ResponseCode.SYSTEM_ERROR


async def send_back(client: Connection, phy: int, group: str, max_times: int = 16) -> int:
    response = await call(
        client,
        RC.CONSUMER_SEND_MSG_BACK,
        {
            "offset": phy,
            "group": group,
            "delayLevel": 0,
            "originMsgId": "ORIG",
            "originTopic": "BackT",
            "maxReconsumeTimes": max_times,
        },
    )
    return response.code


async def test_send_back_goes_to_retry_then_dlq(
    broker: BrokerController, client: Connection
) -> None:
    sent = await send(client, "BackT", b"poison", tags="T1")
    _, phy = decode_offset_msg_id(sent.ext_fields["msgId"])
    assert await send_back(client, phy, "bg", max_times=2) == ResponseCode.SUCCESS
    [retry] = records((await pull(client, "%RETRY%bg", 0, 0, group="bg")).body)
    assert retry.body == b"poison" and retry.reconsume_times == 1
    assert retry.properties["RETRY_TOPIC"] == "BackT"
    # As a Java broker: the original's offsetMsgId, whatever the client's header says.
    assert retry.properties["ORIGIN_MESSAGE_ID"] == sent.ext_fields["msgId"]
    assert await send_back(client, retry.physical_offset, "bg", max_times=2) == ResponseCode.SUCCESS
    [second] = records((await pull(client, "%RETRY%bg", 0, 1, group="bg")).body)
    assert second.reconsume_times == 2
    assert second.properties["ORIGIN_MESSAGE_ID"] == sent.ext_fields["msgId"]  # kept
    # Retried maxReconsumeTimes times: the next failure goes to the dead-letter queue.
    assert (
        await send_back(client, second.physical_offset, "bg", max_times=2) == ResponseCode.SUCCESS
    )
    [dead] = records((await pull(client, "%DLQ%bg", 0, 0, group="bg")).body)
    # Readable and writable, as RocketMQ 4.9.2 and later create it (4.9.1 and older: 2).
    dlq = broker.topics.get("%DLQ%bg")
    assert dlq is not None and (dlq.perm, dlq.writeQueueNums) == (6, 1)
    assert dead.body == b"poison" and dead.reconsume_times == 3
    assert dead.properties["RETRY_TOPIC"] == "BackT"


async def test_send_back_of_a_missing_offset(client: Connection) -> None:
    assert await send_back(client, 10**9, "bg") == ResponseCode.SYSTEM_ERROR


async def test_a_message_sent_back_returns_after_its_delay_level(
    broker: BrokerController, client: Connection
) -> None:
    """RocketMQ's retry backoff: a consumer that leaves the delay to the broker (delayLevel
    0) gets the message back at level 3 + its reconsume times, 300 ms with the test levels,
    not at once."""
    sent = await send(client, "LaterT", b"retry me")
    _, phy = decode_offset_msg_id(sent.ext_fields["msgId"])
    sent_back_ms = time.time() * 1000
    assert await send_back(client, phy, "lg") == ResponseCode.SUCCESS
    await dispatched(broker)
    at_once = await pull(client, "%RETRY%lg", 0, 0, group="lg", suspend_ms=0)
    assert at_once.code != ResponseCode.SUCCESS  # it waits in the schedule topic
    [retry] = records((await pull(client, "%RETRY%lg", 0, 0, group="lg")).body)
    assert retry.body == b"retry me" and retry.reconsume_times == 1
    assert retry.store_timestamp >= sent_back_ms + 300 - 2  # (the store clock counts whole ms)
    assert retry.properties["RETRY_TOPIC"] == "LaterT"
    assert "DELAY" not in retry.properties


async def test_send_back_for_a_group_that_makes_no_valid_topic_name(client: Connection) -> None:
    """A group whose %RETRY% or %DLQ% topic would not be a valid topic name (a `*`, or a
    name over 127 characters with the prefix) is answered SYSTEM_ERROR saying why, like any
    bad request; it used to fail inside the processor with a ValueError and a traceback."""
    sent = await send(client, "BackT", b"m")
    _, phy = decode_offset_msg_id(sent.ext_fields["msgId"])
    for group, max_times in (("*", 16), ("g" * 125, 16), ("*", 0)):
        response = await call(
            client,
            RC.CONSUMER_SEND_MSG_BACK,
            {"offset": phy, "group": group, "delayLevel": 0, "maxReconsumeTimes": max_times},
        )
        assert response.code == ResponseCode.SYSTEM_ERROR
        remark = response.remark or ""
        assert remark.startswith("cannot send back for group") and "topic" in remark
    assert await send_back(client, phy, "bg") == ResponseCode.SUCCESS
