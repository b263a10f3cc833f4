"""The producer against a real broker process: what a Python user sends is what a consumer
and the store see."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqpy.bench.processes import free_port, wait_for_port
from rmqpy.client.admin import Admin
from rmqpy.client.consumer import ConsumeFrom
from rmqpy.client.errors import BrokerUnreachableError, MessageRefusedError
from rmqpy.client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from rmqpy.client.producer import Producer, select_by_hash
from rmqpy.client.pull_consumer import PullConsumer
from rmqpy.remoting.codes import ResponseCode
from rmqpy.store.layout import SysFlag
from rmqpy.store.message_id import UniqKey, decode_offset_msg_id
from tests.integration.daemon import BrokerProcess


async def consume_all(namesrv: str, topic: str, count: int) -> list[ReceivedMessage]:
    consumer = PullConsumer(f"g-{topic}", namesrv, consume_from=ConsumeFrom.FIRST)
    consumer.subscribe(topic)
    msgs: list[ReceivedMessage] = []
    async with consumer:
        async with asyncio.timeout(15):
            while len(msgs) < count:
                msgs += await consumer.poll(0.5)
    return msgs


async def test_send_returns_ids_queue_and_offset(
    producer: Producer, namesrv: str, topic: str, broker: BrokerProcess
) -> None:
    result = await producer.send(
        Message(topic, b"hello", tags="TagA", keys=["order-1", "user-7"], properties={"p": "v"})
    )
    assert result.status is SendStatus.SEND_OK
    uniq = UniqKey.decode(result.msg_id)  # ip | pid as i16 | ... | counter
    assert uniq.pid == (os.getpid() + 0x8000) % 0x10000 - 0x8000
    assert len(uniq.ip) == 4
    host, _offset = decode_offset_msg_id(result.offset_msg_id)
    assert str(host) == f"127.0.0.1:{broker.port}"
    second = await producer.send(Message(topic, b"again"), queue=result.queue)
    assert second.queue_offset == result.queue_offset + 1

    [first, _] = sorted(await consume_all(namesrv, topic, 2), key=lambda m: m.queue_offset)
    assert first.body == b"hello"
    assert first.msg_id == result.msg_id
    assert first.offset_msg_id == result.offset_msg_id
    assert first.tags == "TagA"
    assert first.keys == ["order-1", "user-7"]
    assert first.properties["p"] == "v"
    assert first.queue_id == result.queue.queue_id


async def test_a_first_send_to_a_chosen_queue_creates_the_topic(
    producer: Producer, admin: Admin, topic: str
) -> None:
    result = await producer.send(Message(topic, b"first"), queue=MessageQueue(topic, "broker-a", 3))
    assert (result.status, result.queue.queue_id, result.queue_offset) == (SendStatus.SEND_OK, 3, 0)
    topics = await admin.topics()
    assert topics[topic]["writeQueueNums"] == 4  # the client's defaultTopicQueueNums


async def test_a_message_with_a_delay_level_arrives_when_due(
    producer: Producer, namesrv: str, topic: str
) -> None:
    sent_ms = time.time() * 1000
    result = await producer.send(Message(topic, b"later", tags="D", delay_level=2))
    assert result.status is SendStatus.SEND_OK
    [got] = await consume_all(namesrv, topic, 1)
    assert (got.body, got.tags, got.msg_id) == (b"later", "D", result.msg_id)
    assert got.store_timestamp >= sent_ms + 200 - 2  # level 2 is 200 ms on the test brokers
    assert "DELAY" not in got.properties
    with pytest.raises(MessageRefusedError, match="delay"):
        await producer.send_batch([Message(topic, b"a", delay_level=1), Message(topic, b"b")])


async def test_send_async_runs_callbacks_and_oneway_arrives(
    producer: Producer, namesrv: str, topic: str
) -> None:
    done: list[SendResult] = []
    tasks = [
        producer.send_async(Message(topic, f"a{i}".encode()), on_success=done.append)
        for i in range(20)
    ]
    results = await asyncio.gather(*tasks)
    assert sorted(r.msg_id for r in results) == sorted(r.msg_id for r in done)
    assert len({r.msg_id for r in results}) == 20
    await producer.send_oneway(Message(topic, b"oneway"))
    bodies = sorted(m.body for m in await consume_all(namesrv, topic, 21))
    assert bodies == sorted([f"a{i}".encode() for i in range(20)] + [b"oneway"])


async def test_send_async_reports_errors_to_the_callback(producer: Producer) -> None:
    errors: list[BaseException] = []
    task = producer.send_async(Message("bad topic!", b"x"), on_error=errors.append)
    with pytest.raises(MessageRefusedError):
        await task
    await asyncio.sleep(0)
    assert len(errors) == 1


async def test_batch_gets_consecutive_offsets_in_one_queue(
    producer: Producer, namesrv: str, topic: str
) -> None:
    msgs = [Message(topic, f"b{i}".encode(), keys=f"k{i}") for i in range(10)]
    result = await producer.send_batch(msgs)
    ids = result.msg_id.split(",")
    assert len(ids) == 10
    got = sorted(await consume_all(namesrv, topic, 10), key=lambda m: m.queue_offset)
    assert [m.msg_id for m in got] == ids
    assert [m.queue_offset for m in got] == list(
        range(result.queue_offset, result.queue_offset + 10)
    )
    assert {m.queue_id for m in got} == {result.queue.queue_id}
    assert [m.keys for m in got] == [[f"k{i}"] for i in range(10)]


async def test_hash_selector_keeps_a_sharding_key_on_one_queue(
    producer: Producer, topic: str
) -> None:
    queues: dict[str, set[int]] = {}
    for i in range(24):
        key = f"order-{i % 3}"
        result = await producer.send(Message(topic, b"x"), selector=select_by_hash, arg=key)
        queues.setdefault(key, set()).add(result.queue.queue_id)
    assert all(len(q) == 1 for q in queues.values())


async def test_round_robin_spreads_over_every_write_queue(
    producer: Producer, admin: Admin, topic: str
) -> None:
    await admin.create_topic(topic, queues=4)
    used = {(await producer.send(Message(topic, b"x"))).queue.queue_id for _ in range(8)}
    assert used == {0, 1, 2, 3}


async def test_large_bodies_are_compressed_on_the_wire_and_restored(
    producer: Producer, namesrv: str, topic: str, broker: BrokerProcess
) -> None:
    body = b"compressible " * 2000  # 26 KB
    result = await producer.send(Message(topic, body))
    [msg] = await consume_all(namesrv, topic, 1)
    assert msg.body == body
    assert msg.sys_flag & SysFlag.COMPRESSED
    # the store holds the compressed bytes, not the 26 KB
    log = (broker.store_dir / "commitlog" / ("0" * 20)).read_bytes()
    assert body not in log
    assert result.status is SendStatus.SEND_OK


async def test_oversized_message_is_refused_with_the_brokers_words(
    namesrv: str, topic: str
) -> None:
    big = Message(topic, b"x" * (4 * 1024 * 1024 + 1))
    async with Producer("big", namesrv) as client_checks:
        with pytest.raises(MessageRefusedError) as refused:
            await client_checks.send(big)
    async with Producer(
        "big", namesrv, max_message_size=64 << 20, compress_over=64 << 20
    ) as no_checks:
        with pytest.raises(Exception) as broker_said:
            await no_checks.send(big)
    assert getattr(broker_said.value, "code", None) == ResponseCode.MESSAGE_ILLEGAL
    assert str(refused.value) in str(broker_said.value)
    assert "msg body length limit 4096k" in str(refused.value)


async def test_bad_messages_are_refused_before_sending(producer: Producer) -> None:
    with pytest.raises(MessageRefusedError, match="characters outside"):
        await producer.send(Message("no spaces", b"x"))
    with pytest.raises(MessageRefusedError, match="length is zero"):
        await producer.send(Message("T", b""))
    with pytest.raises(MessageRefusedError, match="share one topic"):
        await producer.send_batch([Message("A", b"1"), Message("B", b"2")])


async def test_unreachable_name_server_is_one_clear_error() -> None:
    port = free_port()
    started = time.monotonic()
    async with Producer("p", f"127.0.0.1:{port}") as producer:
        with pytest.raises(BrokerUnreachableError, match=f"127.0.0.1:{port}"):
            await producer.send(Message("T", b"x"))
    assert time.monotonic() - started < 10


async def test_auto_serialization_switches_to_binary_headers_for_rmqpy(
    namesrv: str, topic: str, broker: BrokerProcess
) -> None:
    async with Producer("p", namesrv) as auto, Producer("p", namesrv, serialize="json") as js:
        await auto.send(Message(topic, b"x"))
        await js.send(Message(topic, b"y"))
        addr = f"127.0.0.1:{broker.port}"
        assert auto.instance.remoting.serialize_type(addr).name == "ROCKETMQ"
        assert js.instance.remoting.serialize_type(addr).name == "JSON"


@pytest.mark.slow
async def test_sends_retry_on_the_other_broker_when_one_dies(tmp_path: Path) -> None:
    ns_port = free_port()
    namesrv = subprocess.Popen(
        [sys.executable, "-m", "rmqpy.cli", "namesrv", "--port", str(ns_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    brokers = []
    try:
        wait_for_port(ns_port, namesrv)
        for name in ("broker-a", "broker-b"):
            brokers.append(
                BrokerProcess(
                    tmp_path / name,
                    extra={
                        "brokerName": name,
                        "namesrvAddr": f"127.0.0.1:{ns_port}",
                        "namesrvListenPort": "0",
                        "registerNameServerPeriod": "500",
                    },
                ).start()
            )
        async with Admin(f"127.0.0.1:{ns_port}") as admin:
            async with asyncio.timeout(10):
                while len(await admin.brokers()) < 2:
                    await asyncio.sleep(0.2)
            await admin.create_topic("TwoBrokers", queues=2)
            async with asyncio.timeout(10):
                while len((await admin.route("TwoBrokers")).masters()) < 2:
                    await asyncio.sleep(0.2)
        async with Producer("p", f"127.0.0.1:{ns_port}", send_timeout_s=5) as producer:
            before = {
                (await producer.send(Message("TwoBrokers", b"x"))).queue.broker_name
                for _ in range(8)
            }
            assert before == {"broker-a", "broker-b"}
            brokers[1].stop(signal.SIGKILL)
            results = [await producer.send(Message("TwoBrokers", b"y")) for _ in range(8)]
        assert {r.queue.broker_name for r in results} == {"broker-a"}
        assert all(r.status is SendStatus.SEND_OK for r in results)
    finally:
        for b in brokers:
            if b.proc is not None and b.proc.poll() is None:
                b.stop()
        namesrv.send_signal(signal.SIGTERM)
        namesrv.wait(10)


def test_message_queue_json_is_rocketmqs() -> None:
    assert MessageQueue("T", "b", 3).to_json() == {"topic": "T", "brokerName": "b", "queueId": 3}
