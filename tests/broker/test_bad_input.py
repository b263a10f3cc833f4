"""Bad input closes the one connection that sent it, is logged, and nobody else notices."""

from __future__ import annotations

import asyncio
import re
import struct
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import pytest

from rmqpy.broker.controller import BrokerController
from rmqpy.client.transport import ext_of
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.frame import FrameDecoder, encode_frame
from rmqpy.remoting.headers import ExtHeader
from rmqpy.remoting.headers.admin import ConsumerSendMsgBackRequestHeader, CreateTopicRequestHeader
from rmqpy.remoting.headers.offsets import (
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmqpy.remoting.headers.pull import PullMessageRequestHeader
from rmqpy.remoting.headers.query import QueryMessageRequestHeader, ViewMessageRequestHeader
from rmqpy.remoting.headers.send import SendMessageRequestHeader
from rmqpy.remoting.protocol import CLOSE_GRACE_S, Connection
from tests.broker.rpc import (
    RC,
    call,
    create_topic,
    json_of,
    pull,
    pull_ext,
    records,
    send,
    send_ext,
)


def frame(
    header: bytes, body: bytes = b"", header_len: int | None = None, total: int | None = None
) -> bytes:
    hl = len(header) if header_len is None else header_len
    tl = 4 + len(header) + len(body) if total is None else total
    return struct.pack(">ii", tl, hl) + header + body


BAD_INPUT = {
    "garbage": b"\xde\xad\xbe\xef" * 64,
    "length over 16 MiB": struct.pack(">ii", 16 * 1024 * 1024 + 1, 10) + b"x" * 16,
    "header not JSON": frame(b"{not json at all}"),
    "header longer than the frame": frame(b'{"code":10}', header_len=4000),
    "negative length": struct.pack(">i", -5) + b"xxxxxxxx",
    "msgpack header that is not a map": struct.pack(">ii", 8, (2 << 24) | 4) + b"\x93\x01\x02\x03",
    "JSON Infinity code": frame(b'{"code":Infinity,"opaque":1}'),
    "JSON opaque past a double": frame(b'{"code":10,"opaque":1e400}'),
}


async def assert_closed_by_broker(reader: asyncio.StreamReader) -> None:
    async with asyncio.timeout(5):
        while await reader.read(65536):
            pass


@pytest.mark.parametrize("name", list(BAD_INPUT))
async def test_bad_frame_closes_only_that_connection(
    broker: BrokerController, client: Connection, name: str
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    writer.write(BAD_INPUT[name])
    await writer.drain()
    await assert_closed_by_broker(reader)
    writer.close()
    assert (await send(client, "AfterBadT", b"still here")).code == ResponseCode.SUCCESS


async def test_sends_before_a_bad_frame_in_one_read_are_stored_and_answered(
    broker: BrokerController, client: Connection
) -> None:
    """A producer's read of binary sends (taken straight from the read's bytes) followed
    by a frame that cannot be decoded: the sends are stored and answered, in order, then
    that connection alone is closed."""
    await create_topic(client, "BadTailT", queues=1)

    def send_frame(opaque: int) -> bytes:
        ext = ext_of(send_ext("BadTailT", 0, {"KEYS": f"k{opaque}"}))
        cmd = RemotingCommand(
            RC.SEND_MESSAGE_V2,
            opaque=opaque,
            ext_fields=ext,
            body=b"m%d" % opaque,
            serialize_type=SerializeType.ROCKETMQ,
        )
        return encode_frame(cmd)

    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    writer.write(send_frame(1))  # a connection's first read is decoded the usual way
    answers = FrameDecoder()
    async with asyncio.timeout(5):
        while not answers.buffered:
            answers.receive_data(await reader.read(65536))
    writer.write(b"".join(send_frame(n) for n in range(2, 6)) + BAD_INPUT["garbage"])
    await writer.drain()
    async with asyncio.timeout(5):
        while data := await reader.read(65536):
            answers.receive_data(data)
    writer.close()
    got = []
    while more := answers.next_commands(100):
        got += more
    assert [(a.opaque, a.code) for a in got] == [(n, ResponseCode.SUCCESS) for n in range(1, 6)]
    stored = records((await pull(client, "BadTailT", 0, 0)).body)
    assert [r.body for r in stored] == [b"m%d" % n for n in range(1, 6)]
    assert (await send(client, "BadTailT", b"still here")).code == ResponseCode.SUCCESS


async def test_truncated_frame_then_disconnect(
    broker: BrokerController, client: Connection
) -> None:
    whole = encode_frame(
        RemotingCommand(RC.GET_MAX_OFFSET, ext_fields={"topic": "T", "queueId": "0"})
    )
    _reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    writer.write(whole[: len(whole) // 2])
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    assert (await send(client, "AfterCutT", b"ok")).code == ResponseCode.SUCCESS


async def test_a_bad_frame_behind_a_parked_pull_closes_its_connection_in_the_grace(
    broker: BrokerController, client: Connection
) -> None:
    """A bad frame from a connection whose pull is parked for longer than the grace given
    to answers: that connection is closed within the grace, not when the pull ends."""
    await create_topic(client, "GraceT")
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    ext = {k: str(v) for k, v in pull_ext("GraceT", 0, 0, suspend_ms=20_000).items()}
    writer.write(encode_frame(RemotingCommand(RC.PULL_MESSAGE, opaque=1, ext_fields=ext)))
    await writer.drain()
    async with asyncio.timeout(5):
        while broker.hold.parked_count() == 0:
            await asyncio.sleep(0.01)
    writer.write(BAD_INPUT["garbage"])
    await writer.drain()
    started = asyncio.get_running_loop().time()
    await assert_closed_by_broker(reader)
    assert asyncio.get_running_loop().time() - started < CLOSE_GRACE_S + 1.0
    writer.close()
    assert (await send(client, "GraceT", b"still here")).code == ResponseCode.SUCCESS


async def test_client_that_vanishes_with_a_parked_pull(
    broker: BrokerController, client: Connection
) -> None:
    await create_topic(client, "VanishT")
    _reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    cmd = RemotingCommand(
        RC.PULL_MESSAGE,
        opaque=1,
        ext_fields={k: str(v) for k, v in pull_ext("VanishT", 0, 0, suspend_ms=500).items()},
    )
    writer.write(encode_frame(cmd))
    await writer.drain()
    async with asyncio.timeout(5):
        while broker.hold.parked_count() == 0:
            await asyncio.sleep(0.01)
    writer.close()
    await writer.wait_closed()
    async with asyncio.timeout(5):  # its timeout answers into a closed connection, quietly
        while broker.hold.parked_count():
            await asyncio.sleep(0.05)
    assert (await send(client, "VanishT", b"ok")).code == ResponseCode.SUCCESS


async def test_a_client_that_never_reads_does_not_stall_others(
    broker: BrokerController, client: Connection
) -> None:
    await send(client, "FloodT", b"x" * 60_000)
    request = encode_frame(
        RemotingCommand(RC.VIEW_MESSAGE_BY_ID, opaque=1, ext_fields={"offset": "0"})
    )
    _reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    # 3,000 requests whose answers are 60 KB each: 180 MB the flooder never reads.
    for _ in range(30):
        writer.write(request * 100)
        await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    for i in range(20):
        assert (await send(client, "OtherT", f"{i}".encode())).code == ResponseCode.SUCCESS
    assert loop.time() - started < 5
    flooded = [c for s in broker.servers for c in s.connections if c.reading_paused]
    assert flooded, "the flooding connection should have its reading paused"
    writer.transport.abort()


@pytest.mark.parametrize(
    ("field", "value"),
    [("h", 2**31), ("h", -(2**31) - 1), ("g", 2**63), ("f", 2**40), ("j", 2**31)],
)
async def test_a_send_whose_numbers_overflow_their_record_fields_is_refused(
    broker: BrokerController, client: Connection, field: str, value: int
) -> None:
    """A header number too wide for its field in the record (flag, sysFlag and
    reconsumeTimes are 4 bytes, bornTimestamp 8) is answered MESSAGE_ILLEGAL; the queue
    loses nothing and skips no offset; the sends beside it are stored."""
    await create_topic(client, "WideT")
    assert (await send(client, "WideT", b"before")).code == ResponseCode.SUCCESS
    ext = send_ext("WideT", 0)
    ext[field] = value
    wide = call(client, RC.SEND_MESSAGE_V2, ext, b"wide")
    beside = send(client, "WideT", b"beside")
    refused, stored = await asyncio.gather(wide, beside)
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL
    assert "does not fit" in (refused.remark or "")
    assert stored.code == ResponseCode.SUCCESS
    assert (await send(client, "WideT", b"after")).code == ResponseCode.SUCCESS
    got = await pull(client, "WideT", 0, 0)
    assert [r.body for r in records(got.body)] == [b"before", b"beside", b"after"]
    assert [r.queue_offset for r in records(got.body)] == [0, 1, 2]


async def test_a_header_number_wider_than_its_java_type_is_refused(
    broker: BrokerController, client: Connection
) -> None:
    """Header numbers are parsed to the width the Java header declares (Integer or Long), as a
    Java broker's `Integer.parseInt` does: a wider value is answered SYSTEM_ERROR naming the
    field, and nothing of it reaches the offset table, the topic table or a pull."""
    await create_topic(client, "WideH")
    group = {"consumerGroup": "g", "topic": "WideH", "queueId": 1}
    ok = await call(client, RC.UPDATE_CONSUMER_OFFSET, {**group, "commitOffset": 7})
    assert ok.code == ResponseCode.SUCCESS
    refusals = [
        (RC.UPDATE_CONSUMER_OFFSET, {**group, "commitOffset": 2**63}, "commitOffset", "long"),
        (RC.UPDATE_CONSUMER_OFFSET, {**group, "queueId": 2**32 + 1}, "queueId", "int"),
        (RC.PULL_MESSAGE, pull_ext("WideH", 0, 0, max_nums=2**31), "maxMsgNums", "int"),
        (
            RC.PULL_MESSAGE,
            {**pull_ext("WideH", 0, 0), "queueOffset": -(2**70)},
            "queueOffset",
            "long",
        ),
    ]
    for code, ext, field, kind in refusals:
        answer = await call(client, code, ext)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert f"field {field} does not fit a Java {kind}" in (answer.remark or "")
    topic = await call(
        client,
        RC.UPDATE_AND_CREATE_TOPIC,
        {"topic": "WideP", "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4,
         "perm": 2**31, "topicFilterType": "SINGLE_TAG"},
    )  # fmt: skip
    assert topic.code == ResponseCode.SYSTEM_ERROR and "perm" in (topic.remark or "")
    assert broker.topics.get("WideP") is None
    offset = await call(client, RC.QUERY_CONSUMER_OFFSET, group)
    assert offset.ext_fields["offset"] == "7"
    table = json_of(await call(client, RC.GET_ALL_CONSUMER_OFFSET))["offsetTable"]
    assert table["WideH@g"] == {"1": 7}


async def test_a_pull_for_zero_messages_gets_one(client: Connection) -> None:
    """maxMsgNums 0 (or less) gets one message, as RocketMQ's getMessage gives it; it used
    to fail the pull with an IndexError."""
    for i in range(3):
        assert (await send(client, "ZeroT", f"m{i}".encode())).code == ResponseCode.SUCCESS
    for asked in (0, -1, -(2**31)):
        got = await pull(client, "ZeroT", 0, 1, max_nums=asked)
        assert got.code == ResponseCode.SUCCESS
        assert [r.body for r in records(got.body)] == [b"m1"]
        assert got.ext_fields["nextBeginOffset"] == "2"


async def test_a_send_flagging_an_ipv6_store_host_is_stored_readable(
    start_broker: Callable[..., Awaitable[BrokerController]],
) -> None:
    """A send whose sysFlag carries 0x20 ("the store host is IPv6") to an IPv4 broker is
    stored with the flag the broker's own host calls for. Before, the record was laid out
    for one width and flagged for the other: acknowledged, unreadable, and the next start
    cut the commitlog there, losing it and every message after it."""
    broker = await start_broker()
    conn = await connect("127.0.0.1", broker.port)
    sent = [b"before", b"flagged", b"after"]
    for body in sent:
        ext = send_ext("FlagT", 0)
        if body == b"flagged":
            ext["f"] = 0x20  # sysFlag: STOREHOST_V6
        answer = await call(conn, RC.SEND_MESSAGE_V2, ext, body)
        assert answer.code == ResponseCode.SUCCESS
    await conn.aclose()
    await broker.shutdown()
    broker = await start_broker()
    conn = await connect("127.0.0.1", broker.port)
    got = await pull(conn, "FlagT", 0, 0)
    await conn.aclose()
    stored = records(got.body)
    assert [r.body for r in stored] == sent
    assert not stored[1].sys_flag & 0x20


# What each request reads its header as; every number field is tried at its Java type's
# ends and around zero.
HEADERS: dict[int, type[ExtHeader]] = {
    RC.SEND_MESSAGE: SendMessageRequestHeader,
    RC.PULL_MESSAGE: PullMessageRequestHeader,
    RC.QUERY_MESSAGE: QueryMessageRequestHeader,
    RC.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
    RC.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
    RC.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    RC.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
    RC.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
    RC.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
    RC.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
    RC.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    RC.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
}
PLAIN = {str: "EdgeT", bool: "false", int: "0"}
TAKE_ALL = {"subscription": "*", "expressionType": "TAG"}  # pulls take every message


AWKWARD_TEXT = ["", " ", "*", "%RETRY%", "%DLQ%x", "TBW102", "SCHEDULE_TOPIC_XXXX", "a" * 200,
                "x\x01y\x02", "DELAY\x0199\x02", "TAGS\x01\x02KEYS\x01\x02", "é", "\x00", "null",
                "true", "-1", "1e3"]  # fmt: skip
AWKWARD_BODIES = [b"", b"x", b"{}", b"[]", b"null", b'{"mqSet":[{}]}', b"\x00" * 30,
                  bytes(range(256))]  # fmt: skip
BODY_CODES: list[int] = [RC.HEART_BEAT, RC.LOCK_BATCH_MQ, RC.UNLOCK_BATCH_MQ, RC.SEND_BATCH_MESSAGE]


def edge_requests(kind: str) -> Iterator[tuple[int, dict[str, Any], bytes]]:
    """(code, header, body) of each request to try: each number field at its Java type's
    ends, -1, 0 and 1; each text field at each awkward value; or the awkward bodies."""
    if kind == "bodies":
        for code in BODY_CODES:
            for body in AWKWARD_BODIES:
                yield code, send_ext("EdgeT"), body
        return
    for code, header in HEADERS.items():
        fields = header.wire_fields()
        plain = {name: PLAIN[field_kind] for name, (field_kind, _) in fields.items()} | TAKE_ALL
        for field, (field_kind, width) in fields.items():
            if kind == "numbers" and width is not None:
                values: Sequence[object] = (width.values.start, width.values.stop - 1, -1, 0, 1)
            elif kind == "text" and field_kind is str:
                values = AWKWARD_TEXT
            else:
                continue
            for value in values:
                yield code, {**plain, field: value}, b"edge"


@pytest.mark.parametrize("kind", ["numbers", "text", "bodies"])
async def test_no_request_fails_in_its_processor_at_the_edges(
    broker: BrokerController, client: Connection, kind: str
) -> None:
    """Each request, with each number field at its Java type's ends and around zero, each
    text field at awkward values (empty, `*`, separators, 200 characters, NUL, ...), and the
    body-reading requests with awkward bodies, is answered by its processor (a success or an
    error code in the broker's own words), never by an exception escaping it; and sends
    beside them keep working."""
    await create_topic(client, "EdgeT")
    assert (await send(client, "EdgeT", b"first")).code == ResponseCode.SUCCESS
    escaped = re.compile(r"^\w+(Error|Exception)\b")
    for code, ext, body in edge_requests(kind):
        answer = await call(client, code, ext, body)
        assert not escaped.match(answer.remark or ""), (code, ext, body, answer.remark)
    assert (await send(client, "EdgeT", b"last")).code == ResponseCode.SUCCESS
