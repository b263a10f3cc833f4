"""Bad input closes the one connection that sent it, is logged, and nobody else notices."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.controller import BrokerController
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.frame import encode_frame
from remoting.protocol import Connection
from tests.broker.rpc import RC, call, create_topic, pull, pull_ext, records, send, send_ext


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
