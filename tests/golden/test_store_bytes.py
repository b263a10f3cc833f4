"""Golden bytes: our encoders produce exactly RocketMQ's store formats, built field by field."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rmqpy.client.message import UniqKeyFactory
from rmqpy.store.checkpoint import StoreCheckpoint
from rmqpy.store.commitlog import CommitLog
from rmqpy.store.index_file import IndexFile, index_key_hash
from rmqpy.store.java_hash import java_string_hash
from rmqpy.store.layout import BLANK, BLANK_MAGIC, CQ_ENTRY
from rmqpy.store.message import Host, Message, decode_record, encode_group, encode_record, tags_code
from rmqpy.store.message_id import UniqKey, create_offset_msg_id, decode_offset_msg_id
from tests.conftest import FIXTURES, small_config
from tests.spec_bytes import spec_blank, spec_cq_entry, spec_record

PROPS = {"TAGS": "TagA", "KEYS": "order-1 order-2", "UNIQ_KEY": "AB12"}


def encode(msg: Message, queue_offset: int, phy: int, store_ts: int, host: Host) -> bytes:
    out = bytearray()
    encode_record(out, msg, queue_offset, phy, store_ts, host)
    return bytes(out)


def test_tags_code_is_java_string_hashcode() -> None:
    assert tags_code("TagA") == 2598919
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Hello World") == -862545276  # overflows: wraps to negative
    # The famous string whose hashCode is Integer.MIN_VALUE; abs() leaves it negative -> 0.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0
    # UTF-16 code units: a non-BMP character hashes as its surrogate pair.
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00
    assert tags_code(None) == 0


def test_ipv4_record_matches_the_spec_layout() -> None:
    born = Host(bytes([10, 0, 0, 7]), 50123)
    msg = Message(
        "TopicTest",
        b"Hello RocketMQ",
        3,
        PROPS,
        flag=5,
        born_timestamp=1700000000123,
        born_host=born,
    )
    store_host = Host(bytes([192, 168, 1, 2]), 10911)
    got = encode(msg, 42, 4096, 1700000000456, store_host)
    expected = spec_record(
        body=b"Hello RocketMQ",
        topic="TopicTest",
        props=PROPS,
        queue_id=3,
        flag=5,
        queue_offset=42,
        phys_offset=4096,
        born_ts=1700000000123,
        born_ip=bytes([10, 0, 0, 7]),
        born_port=50123,
        store_ts=1700000000456,
        store_ip=bytes([192, 168, 1, 2]),
        store_port=10911,
    )
    assert got == expected
    assert len(got) == 91 + len(b"Hello RocketMQ") + len("TopicTest") + len(
        "TAGS\x01TagA\x02KEYS\x01order-1 order-2\x02UNIQ_KEY\x01AB12\x02"
    )
    assert got[4:8] == bytes.fromhex("DAA320A7")


def test_ipv6_record_matches_the_spec_layout() -> None:
    born = Host.parse("[2001:db8::1]:40000")
    store_host = Host.parse("[::1]:10911")
    msg = Message("T6", b"v6 body", 0, {"TAGS": "x"}, born_timestamp=1, born_host=born)
    got = encode(msg, 0, 0, 2, store_host)
    expected = spec_record(
        body=b"v6 body",
        topic="T6",
        props={"TAGS": "x"},
        born_ts=1,
        born_ip=born.ip,
        born_port=40000,
        store_ts=2,
        store_ip=store_host.ip,
        store_port=10911,
    )
    assert got == expected
    record = decode_record(got)
    assert record.sys_flag & 0x30 == 0x30
    assert record.store_timestamp == 2 and record.born_host == born


def test_a_group_of_records_matches_the_spec_layout_record_by_record() -> None:
    """What the commitlog writes for one put: born hosts that change within the group (IPv4,
    IPv6, IPv4 again), consecutive queue offsets for queued records, and 0 for a prepared
    transaction's record, which takes no queue offset (RocketMQ's CommitLog)."""
    v4, v6 = Host(bytes([10, 0, 0, 7]), 50123), Host.parse("[2001:db8::1]:40000")
    prepared = 0x04  # TRANSACTION_PREPARED_TYPE
    shapes = [(v4, 0), (v6, 0), (v4, prepared), (v4, 0)]
    group = [
        Message("TopicG", f"body {i}".encode(), 2, {"TAGS": f"T{i}"}, born_host=h, sys_flag=f)
        for i, (h, f) in enumerate(shapes)
    ]
    store_host = Host(bytes([192, 168, 1, 2]), 10911)
    parts: list[bytes] = []
    offsets, next_queue_offset = encode_group(parts, group, 7, 1000, 55, store_host)
    expected, phys, queue_offset = b"", 1000, 7
    for i, (born, flag) in enumerate(shapes):
        record = spec_record(
            body=f"body {i}".encode(),
            topic="TopicG",
            props={"TAGS": f"T{i}"},
            queue_id=2,
            queue_offset=0 if flag else queue_offset,
            phys_offset=phys,
            sys_flag=flag,
            born_ip=born.ip,
            born_port=born.port,
            store_ts=55,
            store_ip=store_host.ip,
        )
        assert offsets[i] == phys
        expected += record
        phys += len(record)
        queue_offset += 0 if flag else 1
    assert b"".join(parts) == expected
    assert next_queue_offset == 10


def test_blank_filler_and_consume_queue_entry() -> None:
    assert BLANK.pack(300, BLANK_MAGIC) == spec_blank(300)
    assert CQ_ENTRY.pack(123456789, 172, 2598919) == spec_cq_entry(123456789, 172, 2598919)
    assert len(spec_cq_entry(0, 0, 0)) == 20


def test_index_header_and_entry_bytes(tmp_path: Path) -> None:
    path = tmp_path / "20240101000000000"
    index = IndexFile(str(path), hash_slot_num=8, index_num=16, create=True)
    assert index.put_key("T#k1", 1000, 1_700_000_000_000)
    assert index.put_key("T#k1", 2000, 1_700_000_003_500)
    index.flush()
    index.close()
    raw = path.read_bytes()
    assert len(raw) == 40 + 8 * 4 + 16 * 20
    header = raw[:40]
    assert header == (
        (1_700_000_000_000).to_bytes(8, "big")  # beginTimestamp
        + (1_700_000_003_500).to_bytes(8, "big")  # endTimestamp
        + (1000).to_bytes(8, "big")  # beginPhyOffset
        + (2000).to_bytes(8, "big")  # endPhyOffset
        + (1).to_bytes(4, "big")  # hashSlotCount
        + (3).to_bytes(4, "big")  # indexCount: starts at 1, two entries
    )
    key_hash = index_key_hash("T#k1")
    slot = 40 + (key_hash % 8) * 4
    assert raw[slot : slot + 4] == (2).to_bytes(4, "big")  # newest entry number
    entry2 = raw[40 + 32 + 2 * 20 : 40 + 32 + 3 * 20]
    assert entry2 == (
        key_hash.to_bytes(4, "big")
        + (2000).to_bytes(8, "big")
        + (3).to_bytes(4, "big")
        # prevIndex = entry 1, diff = 3 s
        + (1).to_bytes(4, "big")
    )


def test_checkpoint_bytes(tmp_path: Path) -> None:
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"))
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 11, 22, 33
    cp.flush()
    cp.close()
    raw = (tmp_path / "checkpoint").read_bytes()
    assert len(raw) == 4096
    assert raw[:24] == (11).to_bytes(8, "big") + (22).to_bytes(8, "big") + (33).to_bytes(8, "big")
    assert raw[24:] == bytes(4096 - 24)


def test_java_checkpoint_reads(tmp_path: Path) -> None:
    src = FIXTURES / "shaoxubao-rocketmq-study" / "checkpoint"
    (tmp_path / "checkpoint").write_bytes(src.read_bytes())
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"))
    assert cp.physic_msg_timestamp == 0x0000016944217872
    assert cp.logics_msg_timestamp == 0x0000016944217872
    assert cp.index_msg_timestamp == 0
    cp.close()
    assert os.path.getsize(tmp_path / "checkpoint") == 4096


def test_offset_msg_id() -> None:
    host = Host(bytes([10, 1, 30, 38]), 8123)
    msg_id = create_offset_msg_id(host, 172)
    assert msg_id == "0A011E2600001FBB00000000000000AC"
    assert decode_offset_msg_id(msg_id) == (host, 172)
    v6 = Host.parse("[::1]:10911")
    long_id = create_offset_msg_id(v6, 1)
    assert len(long_id) == 56 and decode_offset_msg_id(long_id) == (v6, 1)


def test_uniq_key_layout() -> None:
    key = UniqKey(bytes([192, 168, 0, 1]), 1234, -559038737, 86_400_000, 7)
    text = key.encode()
    assert text == "C0A8000104D2DEADBEEF05265C000007"
    assert UniqKey.decode(text) == key


def test_a_uniq_key_late_in_a_month_keeps_its_time_as_java_writes_it() -> None:
    """Past 2^31 ms (day 25 of a month) Java's int cast writes the count's bits as they are."""
    late = UniqKey(bytes([192, 168, 0, 1]), 1234, 7, 2_600_000_000, 7)
    assert late.encode()[20:28] == "9AF8DA00"
    assert UniqKey.decode(late.encode()) == late


def test_a_producer_makes_uniq_keys_on_the_last_day_of_a_month() -> None:
    factory = UniqKeyFactory("192.168.0.1")
    now_ms = int(time.time() * 1000)
    factory._month_start_ms = now_ms - 31 * 86_400_000 + 60_000  # 30 days 23:59 ago
    factory._next_month_ms = now_ms + 60_000
    since = UniqKey.decode(factory.next()).ms_since_month_start
    assert 31 * 86_400_000 - 60_000 <= since < 31 * 86_400_000


def test_one_put_of_sends_and_batches_writes_the_spec_bytes_across_a_file_end(
    tmp_path: Path,
) -> None:
    """The commitlog's own files, byte for byte, after one put of many groups: single sends
    from IPv4 and IPv6 peers to several queues, prepared transactions alone and within
    batches, and a file end crossed in the middle (BLANK filler, the group on the next file).
    Offsets come from a plain model of the spec, not from the store."""
    file_size, store_ip, prepared = 4096, bytes([192, 168, 1, 2]), 0x04
    config = small_config(
        tmp_path, mapped_file_size_commitlog=file_size, store_host="192.168.1.2:10911"
    )
    commitlog = CommitLog(config, clock_ms=lambda: 77)
    v4, v6 = Host(bytes([10, 0, 0, 7]), 50123), Host.parse("[2001:db8::1]:40000")

    def message(i: int, queue: int, born: Host, sys_flag: int = 0) -> Message:
        props = {"TAGS": f"T{i}", "UNIQ_KEY": f"U{i:04d}"}
        body = bytes([i]) * (100 + i % 13 * 9)
        return Message("TopicG", body, queue, props, born_host=born, sys_flag=sys_flag)

    groups: list[list[Message]] = []
    for i in range(24):
        if i % 5 == 3:
            flags = [0, prepared, 0]
            groups.append([message(100 + 3 * i + k, 2, v4, f) for k, f in enumerate(flags)])
        else:
            flag = prepared if i % 7 == 5 else 0
            groups.append([message(i, i % 2, v6 if i % 3 == 0 else v4, flag)])
    try:
        results = commitlog.put_groups(groups)
        files = [f.read(0, f.file_size) for f in commitlog.queue.files]
    finally:
        commitlog.shutdown()

    def spec_group(group: list[Message], phys: int, queue_offset: int) -> tuple[bytes, int]:
        """The group's records from `phys`, and the queue offset after them."""
        records = b""
        for m in group:
            held = m.sys_flag & prepared
            records += spec_record(
                body=m.body,
                topic="TopicG",
                props=m.properties,
                queue_id=m.queue_id,
                queue_offset=0 if held else queue_offset,
                phys_offset=phys + len(records),
                sys_flag=m.sys_flag,
                born_ip=m.born_host.ip,
                born_port=m.born_host.port,
                store_ts=77,
                store_ip=store_ip,
            )
            queue_offset += 0 if held else 1
        return records, queue_offset

    expected = [bytearray(file_size)]
    pos, next_queue_offset = 0, {0: 0, 1: 0, 2: 0}
    for group, result in zip(groups, results, strict=True):
        queue_id = group[0].queue_id
        base = (len(expected) - 1) * file_size
        records, after = spec_group(group, base + pos, next_queue_offset[queue_id])
        if pos + len(records) > file_size - 8:  # a BLANK's 8 bytes must still fit
            expected[-1][pos : pos + 8] = spec_blank(file_size - pos)
            expected.append(bytearray(file_size))
            base, pos = base + file_size, 0
            records, after = spec_group(group, base, next_queue_offset[queue_id])
        assert result.ok
        assert (result.wrote_offset, result.queue_offset) == (
            base + pos,
            next_queue_offset[queue_id],
        )
        expected[-1][pos : pos + len(records)] = records
        pos += len(records)
        next_queue_offset[queue_id] = after
    assert len(files) == len(expected) >= 2
    assert files == [bytes(e) for e in expected]
