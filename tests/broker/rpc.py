"""The test client: builds RocketMQ requests the way stock clients send them (JSON headers
with string values unless told otherwise) and decodes the answers."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from rmqpy.broker.controller import BrokerController
from rmqpy.client.transport import ext_of
from rmqpy.remoting.batch_body import BatchItem, encode_batch_body
from rmqpy.remoting.codes import RequestCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.protocol import Connection
from rmqpy.store.message import Record, decode_record, encode_properties

RC = RequestCode


async def call(
    conn: Connection,
    code: int,
    ext: dict[str, Any] | None = None,
    body: bytes = b"",
    serialize_type: SerializeType = SerializeType.JSON,
    timeout_s: float = 5.0,
) -> RemotingCommand:
    cmd = RemotingCommand(code, ext_fields=ext_of(ext), body=body, serialize_type=serialize_type)
    return await conn.invoke(cmd, timeout_s)


def send_ext(
    topic: str, queue_id: int = 0, props: dict[str, str] | None = None, **more: Any
) -> dict[str, Any]:
    """SEND_MESSAGE_V2's one-letter header."""
    ext: dict[str, Any] = {
        "a": "test-producer",
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": 0,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": encode_properties(props or {}),
    }
    ext.update(more)
    return ext


async def send(
    conn: Connection,
    topic: str,
    body: bytes,
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    serialize_type: SerializeType = SerializeType.JSON,
) -> RemotingCommand:
    props = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    return await call(
        conn, RC.SEND_MESSAGE_V2, send_ext(topic, queue_id, props), body, serialize_type
    )


async def send_batch(
    conn: Connection, topic: str, bodies: list[bytes], queue_id: int = 0
) -> RemotingCommand:
    items = [
        BatchItem(0, b, encode_properties({"KEYS": f"batch-{i}"})) for i, b in enumerate(bodies)
    ]
    ext = send_ext(topic, queue_id, {"WAIT": "true"}, m=True)
    return await call(conn, RC.SEND_BATCH_MESSAGE, ext, encode_batch_body(items))


def pull_ext(
    topic: str,
    queue_id: int,
    offset: int,
    group: str = "test-group",
    suspend_ms: int = 0,
    subscription: str = "*",
    max_nums: int = 32,
    commit_offset: int = -1,
) -> dict[str, Any]:
    sys_flag = 0x4 | (0x2 if suspend_ms else 0) | (0x1 if commit_offset >= 0 else 0)
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_nums,
        "sysFlag": sys_flag,
        "commitOffset": commit_offset,
        "suspendTimeoutMillis": suspend_ms,
        "subscription": subscription,
        "subVersion": 0,
        "expressionType": "TAG",
    }


async def pull(
    conn: Connection, topic: str, queue_id: int, offset: int, timeout_s: float = 5.0, **kw: Any
) -> RemotingCommand:
    """A long-polling pull, as push consumers send (a send is acknowledged before dispatch
    reaches the consume queue; the parked pull wakes when it does)."""
    kw.setdefault("suspend_ms", 3000)
    return await call(
        conn, RC.PULL_MESSAGE, pull_ext(topic, queue_id, offset, **kw), timeout_s=timeout_s
    )


def records(body: bytes) -> list[Record]:
    """Decode a pull or query body: stored records back to back."""
    out, pos = [], 0
    while pos < len(body):
        record = decode_record(body, pos)
        out.append(record)
        pos += record.total_size
    return out


def json_of(response: RemotingCommand) -> Any:
    return json.loads(response.body)


async def heartbeat(
    conn: Connection, client_id: str, group: str, topic: str, ordinals: bool = False
) -> RemotingCommand:
    consumer: dict[str, Any] = {
        "groupName": group,
        "consumeType": 1 if ordinals else "CONSUME_PASSIVELY",
        "messageModel": 1 if ordinals else "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "unitMode": False,
        "subscriptionDataSet": [
            {"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1}
        ],
    }
    body = {"clientID": client_id, "consumerDataSet": [consumer], "producerDataSet": []}
    return await call(conn, RC.HEART_BEAT, body=json.dumps(body).encode())


async def create_topic(
    conn: Connection, topic: str, queues: int = 4, perm: int = 6
) -> RemotingCommand:
    ext = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": perm,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    return await call(conn, RC.UPDATE_AND_CREATE_TOPIC, ext)


async def dispatched(broker: BrokerController) -> None:
    """Until every acknowledged message is in its consume queue and the index (dispatch
    trails the acknowledgement by a millisecond or so)."""
    assert broker.store is not None
    await asyncio.to_thread(broker.store.wait_dispatched)
