"""Files written by Java RocketMQ 4.x (and rocketmq-rust) decode, and open as a store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rmqpy.client.admin import Admin
from rmqpy.client.message import MessageQueue
from rmqpy.client.offset_store import RemoteOffsetStore
from rmqpy.store.layout import GetMessageStatus
from rmqpy.store.message import Message, decode_record, is_blank
from rmqpy.store.message_store import MessageStore
from tests.conftest import FIXTURES, small_config
from tests.integration.daemon import BrokerProcess

JAVA_COMMITLOGS = [
    "shaoxubao-rocketmq-study/unit_test_store/commitlog/00000000000000000000",
    "dyzzwj-rocketmq-4.5.1/unit_test_store/commitlog/00000000000000000000",
    "lidaxia2020-rocketmq-4.8.0/unit_test_store/commitlog/00000000000000000000",
    "apache-rocketmq-fork-4e25b979/store/commitlog/00000000000000000000",
]


@pytest.mark.parametrize("rel", JAVA_COMMITLOGS)
def test_java_commitlog_decodes_record_by_record(rel: str) -> None:
    data = (FIXTURES / rel).read_bytes()
    pos = 0
    records = []
    while not is_blank(data, pos):
        record = decode_record(data, pos, check_crc=True)
        assert record.physical_offset == pos
        records.append(record)
        pos += record.total_size
    assert len(records) == 47
    assert int.from_bytes(data[pos : pos + 4], "big") == len(data) - pos  # BLANK fills the file
    assert [r.queue_offset for r in records] == list(range(47))
    assert {r.topic for r in records} == {"abc"}
    assert {r.body for r in records} == {b"Once, there was a chance for me!"}
    assert all(r.tags == "TAG1" and r.total_size == 172 for r in records)


def test_java_commitlog_opens_as_a_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    shutil.copy(FIXTURES / JAVA_COMMITLOGS[0], root / "commitlog")
    store = MessageStore(small_config(root, mapped_file_size_commitlog=8192))
    report = store.start()
    try:
        assert report.records_valid == 47 and report.damage is None
        assert store.get_max_offset_in_queue("abc", 0) == 47
        got = store.get_message("abc", 0, 40, 32)
        assert got.status is GetMessageStatus.FOUND
        assert [decode_record(m).queue_offset for m in got.messages] == list(range(40, 47))
        key = decode_record(got.messages[0]).keys[0]
        hits = store.query_message("abc", key, 32)
        assert any(decode_record(m).queue_offset == 40 for m in hits.messages)
        # New puts continue the Java queue and go to a new file after the BLANK.
        result = store.put_message(Message("abc", b"from rmqpy", 0))
        assert result.ok and result.queue_offset == 47 and result.wrote_offset == 8192
    finally:
        store.shutdown()


def test_rocketmq_rust_store_directory_opens(tmp_path: Path) -> None:
    src = FIXTURES / "mxsm-rocketmq-rust-v0.9.0"
    expected = json.loads((src / "expected-records.json").read_text())
    root = tmp_path / "store"
    shutil.copytree(src / "local-file", root)
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    store = MessageStore(
        small_config(
            root,
            mapped_file_size_commitlog=4096,
            mapped_file_size_consume_queue=200,
            max_hash_slot_num=32,
            max_index_num=128,
        )
    )
    report = store.start()
    try:
        assert report.damage is None
        topic, qid = expected["topic"], expected["queue_id"]
        assert store.get_max_offset_in_queue(topic, qid) == expected["queue_max_offset"]
        got = store.get_message(topic, qid, 0, 32)
        assert [decode_record(m).body.decode() for m in got.messages] == expected["message_bodies"]
        hits = store.query_message(topic, expected["message_key"], 32)
        assert len(hits.messages) == expected["index_result_count"]
    finally:
        store.shutdown()


async def test_a_broker_started_on_a_java_brokers_config_files_serves_them(
    tmp_path: Path,
) -> None:
    """A Java 4.x broker's config/*.json (fastjson: numeric keys unquoted, `dataVersion`)
    read by a broker process: its topics, subscription groups and consumer offsets."""
    root = tmp_path / "store"
    shutil.copytree(FIXTURES / "shaoxubao-rocketmq-study" / "config", root / "config")
    broker = BrokerProcess(root).start()
    try:
        async with Admin(broker.namesrv) as admin:
            topics = await admin.topics()
            assert topics["TopicTest"]["readQueueNums"] == 4
            assert "SELF_TEST_C_GROUP" in await admin.groups()
            store = RemoteOffsetStore(admin.instance, "please_rename_unique_group_name_4")
            route = await admin.route("TopicTest")
            queue = MessageQueue("TopicTest", route.queue_datas[0].broker_name, 0)
            assert await store.read(queue) == 250
    finally:
        assert broker.stop() == 0
