"""Putting and getting messages the way the broker will: real files, small file sizes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import rmqpy.store.consume_queue_store as cq_store
from rmqpy.config.store_config import FlushDiskType
from rmqpy.store.commitlog import PutMessageResult
from rmqpy.store.consume_queue import BoundaryType
from rmqpy.store.consume_queue_store import SYNC_FILE_SYSTEM_AT
from rmqpy.store.dispatch import Arrival
from rmqpy.store.fileio import sync_file_system
from rmqpy.store.layout import GetMessageStatus, PutMessageStatus, SysFlag
from rmqpy.store.message import LOCALHOST, FieldRangeError, Host, Message, decode_record, tags_code
from rmqpy.store.message_store import MessageStore
from tests.store.page_cache import PAGE, drop_pages, store_tells_pages_apart

Open = Callable[..., MessageStore]


def msg(
    i: int, topic: str = "TopicA", queue: int = 0, tags: str = "TagA", size: int = 100
) -> Message:
    props = {"TAGS": tags, "KEYS": f"key-{i}", "UNIQ_KEY": f"UNIQ{i:08d}"}
    return Message(topic, f"{i}:".encode() + b"x" * size, queue, props, born_timestamp=i)


def bodies(store: MessageStore, topic: str, queue: int, offset: int, n: int) -> list[int]:
    got = store.get_message(topic, queue, offset, n)
    return [int(decode_record(m).body.split(b":")[0]) for m in got.messages]


def test_put_then_pull_in_order_across_file_rolls(
    open_store: Open, flush_type: FlushDiskType
) -> None:
    store = open_store(flush_disk_type=flush_type)
    results = [store.put_message(msg(i)) for i in range(400)]
    assert all(r.status is PutMessageStatus.PUT_OK for r in results)
    assert [r.queue_offset for r in results] == list(range(400))
    assert len(store.commitlog.queue.files) > 3  # 16 KiB files: rolled several times
    assert store.wait_dispatched()
    seen: list[int] = []
    offset = 0
    while offset < 400:
        got = store.get_message("TopicA", 0, offset, 32)
        assert got.status is GetMessageStatus.FOUND
        seen += [int(decode_record(m).body.split(b":")[0]) for m in got.messages]
        offset = got.next_begin_offset
    assert seen == list(range(400))


def test_file_roll_writes_blank_filler(open_store: Open) -> None:
    store = open_store()
    for i in range(200):
        store.put_message(msg(i))
    first = store.commitlog.queue.files[0]
    data = first.read(0, first.file_size)
    pos = 0
    while int.from_bytes(data[pos + 4 : pos + 8], "big") != 0xCBD43194:
        pos += int.from_bytes(data[pos : pos + 4], "big")
    assert int.from_bytes(data[pos : pos + 4], "big") == first.file_size - pos


def test_batch_gets_consecutive_offsets_in_one_file(open_store: Open) -> None:
    store = open_store()
    store.put_message(msg(0))
    result = store.put_batch([msg(i) for i in range(1, 11)])
    assert result.ok and result.queue_offset == 1 and result.msg_num == 10
    assert len(result.msg_ids) == 10 and result.msg_id.count(",") == 9
    assert store.wait_dispatched()
    assert bodies(store, "TopicA", 0, 0, 32) == list(range(11))


def test_many_groups_in_one_call_keep_per_queue_offsets(open_store: Open) -> None:
    store = open_store()
    groups = [[msg(i, queue=i % 3)] for i in range(30)]
    results = store.put_messages(groups)
    assert [r.queue_offset for r in results] == [i // 3 for i in range(30)]
    assert store.wait_dispatched()
    assert bodies(store, "TopicA", 2, 0, 32) == list(range(2, 30, 3))


def test_bad_input_is_refused_with_a_clear_status(open_store: Open) -> None:
    store = open_store(max_message_size=1024)
    cases = {
        "bad topic!": PutMessageStatus.MESSAGE_ILLEGAL,
        "": PutMessageStatus.MESSAGE_ILLEGAL,
        "T" * 128: PutMessageStatus.MESSAGE_ILLEGAL,
    }
    for topic, status in cases.items():
        result = store.put_message(Message(topic, b"x", 0))
        assert result.status is status and "topic" in result.remark
    big = store.put_message(Message("TopicA", b"x" * 1025, 0))
    assert big.status is PutMessageStatus.MESSAGE_ILLEGAL and "1025" in big.remark
    props = store.put_message(Message("TopicA", b"x", 0, {"P": "v" * 40000}))
    assert props.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    mixed = store.put_batch([msg(1, queue=0), msg(2, queue=1)])
    assert mixed.status is PutMessageStatus.MESSAGE_ILLEGAL
    # In a batch, one bad message refuses the whole batch, wherever it is.
    big_in_batch = store.put_batch([msg(1), Message("TopicA", b"x" * 1025, 0), msg(3)])
    assert big_in_batch.status is PutMessageStatus.MESSAGE_ILLEGAL and "1025" in big_in_batch.remark
    props_in_batch = store.put_batch(
        [msg(1), msg(2), Message("TopicA", b"x", 0, {"P": "v" * 40000})]
    )
    assert props_in_batch.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    bad_topic_batch = store.put_batch([Message("bad topic!", b"x", 0)] * 3)
    assert bad_topic_batch.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert "topic" in bad_topic_batch.remark
    # Nothing was written, and the store still takes good messages.
    assert store.commitlog.max_offset() == 0
    assert store.put_message(msg(1)).ok
    assert store.get_max_offset_in_queue("TopicA", 0) in (0, 1)


def test_message_too_large_for_a_file_is_refused(open_store: Open) -> None:
    store = open_store(mapped_file_size_commitlog=4096)
    result = store.put_message(Message("TopicA", b"x" * 5000, 0))
    assert result.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_message(msg(0)).ok


def test_pull_statuses_follow_rocketmq(open_store: Open) -> None:
    store = open_store()
    assert store.get_message("Nope", 0, 0, 32).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    for i in range(5):
        store.put_message(msg(i))
    assert store.wait_dispatched()
    one = store.get_message("TopicA", 0, 5, 32)
    assert (one.status, one.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 5)
    # Past the end of a queue that begins at 0 (say its topic was deleted and sent to again,
    # and a consumer still holds the old offset): back to 0, as RocketMQ 4.x answers, so
    # nothing sent since is skipped; past the end of one whose start expired: to its end.
    bad = store.get_message("TopicA", 0, 9, 32)
    assert (bad.status, bad.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0)
    got = store.get_message("TopicA", 0, 2, 32)
    assert (got.status, got.next_begin_offset, got.min_offset, got.max_offset) == (
        GetMessageStatus.FOUND,
        5,
        0,
        5,
    )


def test_a_record_that_disagrees_with_its_queue_entry_is_not_served(open_store: Open) -> None:
    store = open_store()
    results = [store.put_message(msg(i)) for i in range(3)]
    assert store.wait_dispatched()
    assert bodies(store, "TopicA", 0, 0, 32) == [0, 1, 2]  # hot, sliced from the mapping
    second = results[1].wrote_offset
    mapped = store.commitlog.queue.find_mapped_file_by_offset(second)
    assert mapped is not None
    mapped.write_at(second - mapped.file_from_offset + 4, b"\x00\x00\x00\x00")  # its magic
    got = store.get_message("TopicA", 0, 0, 32)
    assert got.status is GetMessageStatus.FOUND
    assert [int(decode_record(m).body.split(b":")[0]) for m in got.messages] == [0]
    damaged_first = store.get_message("TopicA", 0, 1, 32)
    assert damaged_first.status is GetMessageStatus.MESSAGE_WAS_REMOVING
    assert damaged_first.messages == []


def test_sliced_pulls_equal_record_by_record_pulls(open_store: Open) -> None:
    """A pull without a tag filter copies its records out of the mapping in one go (one
    slice for records back to back, one per record otherwise); with a filter that takes
    every tag it goes record by record. Both must answer the same, for single sends and
    batches of queues interleaved in the commitlog, across file rolls and at byte limits."""
    store = open_store()
    tags = ["TagA", "TagB", "TagC"]
    i = 0
    for put in range(100):
        batch = 1 + put % 7  # singles interleave queues; batches lie back to back
        queue = put % 3
        store.put_messages(
            [
                [
                    msg(j, queue=queue, tags=tags[queue], size=40 + j % 7 * 60)
                    for j in range(i, i + batch)
                ]
            ]
        )
        i += batch
    assert store.wait_dispatched()
    assert len(store.commitlog.queue.files) > 3
    every_tag = {tags_code(t) for t in tags}
    for queue in range(3):
        for offset in range(0, 60, 3):
            for n, cap in [(32, None), (5, None), (1, None), (32, 2000), (1, 100)]:
                sliced = store.get_message("TopicA", queue, offset, n, max_total_bytes=cap)
                by_record = store.get_message(
                    "TopicA", queue, offset, n, every_tag, max_total_bytes=cap
                )
                assert sliced == by_record
                assert sliced.messages


def test_tag_filter_skips_but_advances(open_store: Open) -> None:
    store = open_store()
    for i in range(10):
        store.put_message(msg(i, tags="TagA" if i % 2 else "TagB"))
    assert store.wait_dispatched()
    got = store.get_message("TopicA", 0, 0, 32, tag_codes={tags_code("TagA")})
    assert [int(decode_record(m).body.split(b":")[0]) for m in got.messages] == [1, 3, 5, 7, 9]
    assert got.next_begin_offset == 10
    none = store.get_message("TopicA", 0, 0, 32, tag_codes={tags_code("TagC")})
    assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 10


def test_pull_respects_count_and_byte_limits(open_store: Open) -> None:
    store = open_store()
    for i in range(50):
        store.put_message(msg(i, size=1000))
    assert store.wait_dispatched()
    assert len(store.get_message("TopicA", 0, 0, 8).messages) == 8
    capped = store.get_message("TopicA", 0, 0, 32, max_total_bytes=5000)
    assert len(capped.messages) == 4 and capped.next_begin_offset == 4


@pytest.mark.parametrize("count", [0, -1, -5, -(2**31)])
@pytest.mark.parametrize("cap", [None, 0, -1])
def test_a_pull_asking_for_no_messages_gets_one_as_rocketmq_gives(
    open_store: Open, count: int, cap: int | None
) -> None:
    """RocketMQ's `isTheBatchFull` takes the first message before it looks at maxMsgNums or
    a byte limit: a pull asking for 0 or fewer messages (or bytes) gets exactly one, and the
    next offset after it, whether the records are sliced in one go or filtered by tag."""
    store = open_store()
    for i in range(20):
        store.put_message(msg(i))
    assert store.wait_dispatched()
    for offset in (0, 7, 19):
        for tag_codes in (None, {tags_code("TagA")}):
            got = store.get_message("TopicA", 0, offset, count, tag_codes, max_total_bytes=cap)
            assert got.status is GetMessageStatus.FOUND
            assert [int(decode_record(m).body.split(b":")[0]) for m in got.messages] == [offset]
            assert got.next_begin_offset == offset + 1


def test_query_by_key_and_unique_key(open_store: Open) -> None:
    store = open_store()
    for i in range(300):  # index files hold 256 entries: several files
        store.put_message(msg(i % 100))
    assert store.wait_dispatched()
    assert len(store.index.files) > 1  # type: ignore[union-attr]
    hits = store.query_message("TopicA", "key-7", 32)
    assert len(hits.messages) == 3
    offsets = [decode_record(m).queue_offset for m in hits.messages]
    assert offsets == sorted(offsets, reverse=True)  # newest first
    assert len(store.query_message("TopicA", "UNIQ00000042", 32).messages) == 3
    assert len(store.query_message("TopicA", "key-7", 2).messages) == 2
    assert store.query_message("OtherTopic", "key-7", 32).messages == []


def test_lookup_by_physical_offset(open_store: Open) -> None:
    store = open_store()
    result = store.put_message(msg(1))
    raw = store.look_message_by_offset(result.wrote_offset)
    assert raw is not None and decode_record(raw).keys == ["key-1"]
    assert store.look_message_by_offset(result.wrote_offset + 1) is None
    assert store.look_message_by_offset(10**9) is None


def test_search_offset_by_time(open_store: Open) -> None:
    now = [1_000_000]
    store = open_store()
    store.commitlog._clock_ms = lambda: now[0]
    for i in range(10):
        now[0] = 1_000_000 + i * 1000
        store.put_message(msg(i))
    assert store.wait_dispatched()
    find = store.get_offset_in_queue_by_time
    assert find("TopicA", 0, 1_003_000) == 3
    assert find("TopicA", 0, 1_003_500, BoundaryType.LOWER) == 4
    assert find("TopicA", 0, 1_003_500, BoundaryType.UPPER) == 3
    assert find("TopicA", 0, 2_000_000, BoundaryType.LOWER) == 10
    assert find("TopicA", 0, 2_000_000, BoundaryType.UPPER) == 9
    assert find("TopicA", 0, 0, BoundaryType.LOWER) == 0
    assert store.get_earliest_message_time("TopicA", 0) == 1_000_000
    assert store.get_earliest_message_time("TopicA", 5) == -1


def test_sync_flush_acknowledges_after_fsync(open_store: Open) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    result = store.put_message(msg(1))
    assert result.ok
    assert store.commitlog.queue.flushed_where >= result.wrote_offset + result.wrote_bytes
    assert store.group_commit is not None and store.group_commit.fsyncs >= 1


def test_arrival_listener_hears_which_queues_grew(open_store: Open) -> None:
    store = open_store()
    heard: dict[tuple[str, int], int] = {}
    codes: set[int] = set()

    def listener(arrivals: Sequence[Arrival]) -> None:
        for a in arrivals:
            heard[(a.topic, a.queue_id)] = max(heard.get((a.topic, a.queue_id), 0), a.next_offset)
            codes.update(a.tags_codes)

    store.register_arrival_listener(listener)
    store.put_messages([[msg(i, queue=i % 2)] for i in range(6)])
    assert store.wait_dispatched()
    assert heard == {("TopicA", 0): 3, ("TopicA", 1): 3}
    assert codes == {tags_code("TagA")}


def test_a_pull_of_records_out_of_the_page_cache_is_told_apart(open_store: Open) -> None:
    """The broker runs a pull on its event loop only when `pull_reads_memory` says it will
    not wait for the disk; records dropped from the page cache must make it say so. (No
    warming thread here: one bringing a file's pages back in would make them cached.)"""
    store_tells_pages_apart()
    store = open_store(warm_commitlog_files=False)
    for i in range(40):
        store.put_message(msg(i))
    assert store.wait_dispatched()
    assert store.pull_reads_memory("TopicA", 0, 0)
    assert store.pull_reads_memory("TopicA", 0, 40)  # nothing there yet: a status only
    assert store.pull_reads_memory("NoSuchTopic", 0, 0)
    store.commitlog.queue.flush(0)
    files = store.commitlog.queue.files
    # Clean pages dropped (asked without reading: see page_cache), the store's mappings first
    # letting go of any a read mapped in.
    fds, mappings = [f.fd for f in files], [f.mapping for f in files]
    if not drop_pages(fds, files[0].fd, PAGE, mappings=mappings):
        pytest.skip("this filesystem keeps the pages (tmpfs)")
    assert not store.pull_reads_memory("TopicA", 0, 0)
    got = store.get_message("TopicA", 0, 0, 32)  # what a pull thread then reads from disk
    assert got.status is GetMessageStatus.FOUND and len(got.messages) == 32


def test_a_sync_put_whose_flush_stalls_past_the_timeout_is_told_so(open_store: Open) -> None:
    """SYNC_FLUSH answers FLUSH_DISK_TIMEOUT once `syncFlushTimeout` passes without the
    fsync (as RocketMQ does: stored, durability not confirmed); the store goes on."""
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=300)
    assert store.put_message(msg(0)).status is PutMessageStatus.PUT_OK
    mapped = store.commitlog.queue.last()
    assert mapped is not None
    with mapped._flush_lock:  # a stalled disk: the group commit cannot start its fsync
        started = time.monotonic()
        stalled = store.put_message(msg(1))
        waited = time.monotonic() - started
    assert stalled.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert 0.3 <= waited < 3
    assert store.put_message(msg(2)).status is PutMessageStatus.PUT_OK
    assert store.wait_dispatched()
    got = store.get_message("TopicA", 0, 0, 32)
    assert [decode_record(m, 0).body for m in got.messages] == [msg(i).body for i in range(3)]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"flag": 2**31}, "flag"),
        ({"born_timestamp": 2**63}, "bornTimestamp"),
        ({"sys_flag": -(2**31) - 1}, "sysFlag"),
        ({"reconsume_times": 2**40}, "reconsumeTimes"),
        ({"prepared_transaction_offset": 2**64}, "preparedTransactionOffset"),
    ],
)
def test_a_message_whose_field_overflows_its_record_is_refused_when_made(
    open_store: Open, fields: dict[str, Any], named: str
) -> None:
    """Made with a number wider than its record field, a message is refused at once with the
    field's name, so the store is never handed one it cannot encode."""
    store = open_store()
    with pytest.raises(FieldRangeError, match=named):
        Message("TopicA", b"x", 0, {}, **fields)
    assert store.put_message(Message("TopicA", b"y", 0, {}, flag=2**31 - 1)).ok
    with pytest.raises(FieldRangeError, match="queueId"):
        Message("TopicA", b"x", 2**31)


@pytest.mark.parametrize("store_host", ["127.0.0.1:10911", "[::1]:10911"])
@pytest.mark.parametrize(
    ("sys_flag", "born_host"),
    [
        (SysFlag.STOREHOST_V6, LOCALHOST),
        (SysFlag.BORNHOST_V6, LOCALHOST),
        (-1, LOCALHOST),
        (SysFlag.STOREHOST_V6, Host.parse("[::1]:4000")),
        (0, Host.parse("[::1]:4000")),
    ],
)
def test_host_width_flags_follow_the_hosts_not_the_sender(
    open_store: Open, store_host: str, sys_flag: int, born_host: Host
) -> None:
    """The sysFlag bits that say a host is IPv6 (0x10 born, 0x20 store) decide how a record
    is laid out, so they follow the hosts written whatever the sender put in its sysFlag.
    Before, a send carrying 0x20 to an IPv4 store was acknowledged, could not be read, and
    the next start cut the commitlog there, losing it and every message after it."""
    store = open_store(store_host=store_host)
    odd = Message("TopicA", b"odd", 0, {"KEYS": "odd"}, sys_flag=sys_flag, born_host=born_host)
    puts = [msg(0), odd, msg(1)]
    results = [store.put_message(m) for m in puts]
    assert all(r.ok for r in results)
    assert store.wait_dispatched()
    store.shutdown()
    store = open_store(store_host=store_host)
    report = store.recovery_report
    assert report is not None and report.bytes_truncated == 0
    stored = [decode_record(store.look_message_by_offset(r.wrote_offset) or b"") for r in results]
    assert [r.body for r in stored] == [m.body for m in puts]
    served = store.get_message("TopicA", 0, 0, 32).messages
    assert decode_record(served[-1]).body == msg(1).body  # served after the odd one
    flags = stored[1].sys_flag
    assert bool(flags & SysFlag.BORNHOST_V6) == born_host.is_v6
    assert bool(flags & SysFlag.STOREHOST_V6) == store_host.startswith("[")


def test_deleting_a_topic_while_producers_send_to_it_loses_nothing_sent_after(
    open_store: Open,
) -> None:
    """An operator deletes a topic that producers still send to (RocketMQ recreates it on
    the next send). What is acknowledged after the delete must be in the new queues at the
    offset its put named, and dispatch must keep going for everyone."""
    store = open_store()
    stop = threading.Event()
    deletes_done = [0]  # how many deletes had finished when a put began
    sent: list[tuple[int, int, PutMessageResult]] = []
    failures: list[BaseException] = []

    def produce(queue: int) -> None:
        i = 0
        while not stop.is_set():
            epoch = deletes_done[0]
            try:
                result = store.put_message(msg(i, "Doomed", queue))
            except BaseException as exc:
                failures.append(exc)
                return
            assert result.ok, result
            sent.append((epoch, queue, result))
            i += 1

    producers = [threading.Thread(target=produce, args=(q,)) for q in range(4)]
    for p in producers:
        p.start()
    try:
        for _ in range(15):
            time.sleep(0.03)
            store.delete_topic("Doomed")
            deletes_done[0] += 1
            assert store.reput.stuck_reason is None
        time.sleep(0.2)
    finally:
        stop.set()
        for p in producers:
            p.join()
    assert not failures
    assert store.wait_dispatched()
    assert store.reput.stuck_reason is None
    after = [(q, r) for epoch, q, r in sent if epoch == deletes_done[0]]
    assert len(after) > 50
    for queue, result in after:
        got = store.get_message("Doomed", queue, result.queue_offset, 1)
        assert got.status is GetMessageStatus.FOUND, (result, got.status)
        assert decode_record(got.messages[0]).physical_offset == result.wrote_offset


def test_a_thorough_flush_of_many_queues_is_one_file_system_sync(
    open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SYNC_FILE_SYSTEM_AT queues, the checkpoint's flush marks each queue file
    flushed and makes them durable with one syncfs, not an fdatasync each."""
    store = open_store(flush_consume_queue_thorough_interval_ms=3_600_000)  # ours alone
    queues = SYNC_FILE_SYSTEM_AT + 6
    for q in range(queues):
        assert store.put_message(Message(f"Many{q % 7}", b"m", q // 7)).ok
    assert store.wait_dispatched()
    synced: list[str] = []
    monkeypatch.setattr(cq_store, "sync_file_system", synced.append)
    assert store.consume_queues.flush(0)
    assert synced == [store.consume_queues.root_dir]
    for cq in store.consume_queues:
        [mapped] = cq.queue.files
        assert mapped.flushed_position == mapped.wrote_position > 0
    assert not store.consume_queues.flush(0)  # nothing new: no sync at all
    assert synced == [store.consume_queues.root_dir]


def test_the_file_system_sync_reports_its_errors(tmp_path: Path) -> None:
    sync_file_system(str(tmp_path))  # a real syncfs of the test's file system
    with pytest.raises(OSError):
        sync_file_system(str(tmp_path / "missing"))
