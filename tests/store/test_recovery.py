"""Torn writes and bit rot on real files: recovery keeps every record before the damage and
serves nothing after it."""

from __future__ import annotations

import os
import random
import shutil
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from rmqpy.store.index_file import IndexFile
from rmqpy.store.layout import INDEX_ENTRY, INDEX_HEADER, INDEX_SLOT_SIZE, GetMessageStatus
from rmqpy.store.message import Message, decode_record
from rmqpy.store.message_store import MessageStore
from rmqpy.store.recovery import scan_file
from rmqpy.store.store_lock import abort_path
from tests.conftest import FIXTURES

Open = Callable[..., MessageStore]


def fill(store: MessageStore, n: int, queues: int = 2) -> list[int]:
    """Put n messages; returns each one's physical offset."""
    offsets = []
    for i in range(n):
        props = {"TAGS": "T", "KEYS": f"k{i}"}
        result = store.put_message(Message("TopicR", f"{i:05d}".encode() * 20, i % queues, props))
        assert result.ok
        offsets.append(result.wrote_offset)
    assert store.wait_dispatched()
    return offsets


def served(store: MessageStore, queues: int = 2) -> list[int]:
    """Every message id the store serves, in queue order, queue by queue."""
    ids = []
    for q in range(queues):
        offset = 0
        while True:
            got = store.get_message("TopicR", q, offset, 32)
            if got.status is not GetMessageStatus.FOUND:
                break
            ids += [int(decode_record(m).body[:5]) for m in got.messages]
            offset = got.next_begin_offset
    return sorted(ids)


def last_file(tmp_path: Path) -> Path:
    return sorted((tmp_path / "store" / "commitlog").iterdir())[-1]


def test_clean_restart_keeps_everything(open_store: Open) -> None:
    store = open_store()
    fill(store, 120)
    store.shutdown()
    store = open_store()
    assert store.recovery_report is not None and not store.recovery_report.abnormal
    assert served(store) == list(range(120))
    assert store.put_message(Message("TopicR", b"00120" * 20, 0)).queue_offset == 60


@pytest.mark.parametrize("damage", ["truncate", "bitflip_body", "bitflip_header", "garbage"])
def test_damaged_tail_is_cut_and_nothing_after_is_served(
    open_store: Open, tmp_path: Path, damage: str
) -> None:
    store = open_store()
    offsets = fill(store, 150)
    store.halt()  # crash: abort file stays, no final flush
    victim = 140
    file_size = store.config.mapped_file_size_commitlog
    path = last_file(tmp_path)
    start = int(path.name)
    assert start <= offsets[victim] < start + file_size
    pos = offsets[victim] - start
    with open(path, "r+b") as fh:
        if damage == "truncate":  # the tail of a write never reached the disk
            fh.seek(pos + 30)
            fh.write(bytes(file_size - pos - 30))
        elif damage == "bitflip_body":
            fh.seek(pos + 100)
            byte = fh.read(1)
            fh.seek(pos + 100)
            fh.write(bytes([byte[0] ^ 0x10]))
        elif damage == "bitflip_header":
            fh.seek(pos + 2)
            fh.write(b"\x7f")
        else:
            fh.seek(pos)
            fh.write(random.Random(7).randbytes(300))
    store = open_store()
    report = store.recovery_report
    assert report is not None and report.abnormal
    assert report.damage is not None and report.bytes_truncated > 0
    assert report.process_offset == offsets[victim]
    assert served(store) == list(range(victim))
    for i in range(victim, 150):
        assert store.query_message("TopicR", f"k{i}", 4).messages == []
    assert store.query_message("TopicR", f"k{victim - 1}", 4).messages
    # The store keeps working from the cut, and queue offsets continue without a gap.
    result = store.put_message(Message("TopicR", b"99999" * 20, victim % 2))
    assert result.ok and result.wrote_offset == offsets[victim]
    assert result.queue_offset == victim // 2
    store.shutdown()
    store = open_store()
    assert served(store) == [*range(victim), 99999]


def test_damage_in_an_earlier_file_drops_later_files(open_store: Open, tmp_path: Path) -> None:
    store = open_store()
    offsets = fill(store, 300)
    store.halt()
    files = sorted((tmp_path / "store" / "commitlog").iterdir())
    assert len(files) >= 4
    victim_file = files[-3]
    start = int(victim_file.name)
    victim = next(i for i, off in enumerate(offsets) if off >= start + 200)
    with open(victim_file, "r+b") as fh:
        fh.seek(offsets[victim] - start + 4)
        fh.write(b"\0\0\0\0")  # magic gone
    store = open_store()
    assert served(store) == list(range(victim))
    assert len(store.commitlog.queue.files) == len(files) - 2


def test_dispatch_catches_up_after_a_crash(open_store: Open, tmp_path: Path) -> None:
    """Consume queues lost (as after a power cut) are rebuilt from the commitlog."""
    store = open_store()
    fill(store, 100)
    store.halt()
    for cq in (tmp_path / "store" / "consumequeue" / "TopicR").iterdir():
        for f in cq.iterdir():
            f.unlink()
    for f in (tmp_path / "store" / "index").iterdir():
        f.unlink()
    store = open_store()
    report = store.recovery_report
    assert report is not None and report.entries_redispatched == 100
    assert served(store) == list(range(100))
    assert len(store.query_message("TopicR", "k42", 4).messages) == 1


def test_consume_queue_entries_past_the_commitlog_are_trimmed(
    open_store: Open, tmp_path: Path
) -> None:
    store = open_store()
    offsets = fill(store, 60)
    store.halt()
    path = last_file(tmp_path)
    start = int(path.name)
    keep = next(i for i, off in enumerate(offsets) if off >= start + 100)
    with open(path, "r+b") as fh:  # the commitlog lost its tail, the consume queues did not
        fh.seek(offsets[keep] - start)
        fh.write(bytes(store.config.mapped_file_size_commitlog - (offsets[keep] - start)))
    store = open_store()
    report = store.recovery_report
    assert report is not None and report.consume_queue_entries_trimmed == 60 - keep
    assert served(store) == list(range(keep))
    assert (
        store.get_max_offset_in_queue("TopicR", 0) + store.get_max_offset_in_queue("TopicR", 1)
        == keep
    )


def test_abort_file_marks_an_unclean_exit(open_store: Open, tmp_path: Path) -> None:
    store = open_store()
    assert os.path.exists(abort_path(str(tmp_path / "store")))
    store.shutdown()
    assert not os.path.exists(abort_path(str(tmp_path / "store")))


def test_recovery_reads_a_file_through_its_mapping_not_a_copy(
    open_store: Open, tmp_path: Path
) -> None:
    """Scanning a commitlog file after a crash must not hold the file in memory: at the
    default size that is 1 GiB for every file scanned."""
    size = 4 * 1024 * 1024
    store = open_store(mapped_file_size_commitlog=size)
    fill(store, 200)
    store.halt()
    store = open_store(mapped_file_size_commitlog=size)
    mapped = store.commitlog.queue.files[0]
    tracemalloc.start()
    try:
        scan = scan_file(mapped, check_crc=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert scan.records == 200 and not scan.damage
    assert peak < size // 8, f"scanning a {size}-byte file peaked at {peak} bytes"


def test_a_deleted_topic_stays_deleted_across_restarts(open_store: Open, tmp_path: Path) -> None:
    """Its records stay in the commitlog until they expire, but no restart re-dispatches
    them: after a clean stop the re-dispatch starts past the furthest remaining queue, which
    the deleted topic's last sends lay beyond; after a crash it starts from the checkpoint."""
    store = open_store()
    fill(store, 20)
    for i in range(30):
        assert store.put_message(Message("Gone", b"old-%d" % i, 0, {"KEYS": f"g{i}"})).ok
    assert store.wait_dispatched()
    store.delete_topic("Gone")
    store.shutdown()
    for stop in ("clean", "crash"):
        store = open_store()
        assert store.get_message("Gone", 0, 0, 32).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert served(store) == list(range(20))
        if stop == "clean":
            store.shutdown()
        else:
            store.halt()


def test_a_topic_sent_to_again_after_its_deletion_keeps_its_new_messages_through_a_crash(
    open_store: Open, tmp_path: Path
) -> None:
    """Deleted, then sent to again (its queue starts over at offset 0), then a power cut
    loses the consume-queue pages. Re-dispatch must not put the old records back at the
    offsets the new ones were acknowledged with, pushing those out as already present."""
    store = open_store()
    for i in range(40):
        assert store.put_message(Message("Again", b"old-%d" % i, 0)).ok
    store.delete_topic("Again")
    new = [store.put_message(Message("Again", b"new-%d" % i, 0)) for i in range(25)]
    assert [r.queue_offset for r in new] == list(range(25))
    assert store.wait_dispatched()
    store.halt()
    for f in (tmp_path / "store" / "consumequeue" / "Again" / "0").iterdir():
        f.unlink()  # the queue's pages never reached the disk
    store = open_store()
    got = store.get_message("Again", 0, 0, 32)
    assert [decode_record(m).body for m in got.messages] == [b"new-%d" % i for i in range(25)]
    assert store.put_message(Message("Again", b"next", 0)).queue_offset == 25


def test_a_deletion_past_where_recovery_cuts_the_commitlog_hides_nothing_written_after(
    open_store: Open, tmp_path: Path
) -> None:
    """A topic deleted when the commitlog ended at E, then a crash that cuts the commitlog
    short of E: the records written from the cut on are new, whatever their topic, and a
    later re-dispatch must queue them."""
    store = open_store()
    fill(store, 10)
    cut = store.put_message(Message("Cut", b"old", 0)).wrote_offset
    for _ in range(5):
        assert store.put_message(Message("Cut", b"old", 0)).ok
    store.delete_topic("Cut")
    store.halt()
    path = last_file(tmp_path)
    with open(path, "r+b") as fh:  # the tail never reached the disk
        fh.seek(cut - int(path.name))
        fh.write(bytes(store.config.mapped_file_size_commitlog - (cut - int(path.name))))
    store = open_store()
    new = [store.put_message(Message("Cut", b"new-%d" % i, 0)) for i in range(3)]
    assert new[0].wrote_offset == cut
    assert store.wait_dispatched()
    store.halt()
    for f in (tmp_path / "store" / "consumequeue" / "Cut" / "0").iterdir():
        f.unlink()
    store = open_store()
    got = store.get_message("Cut", 0, 0, 32)
    assert [decode_record(m).body for m in got.messages] == [b"new-0", b"new-1", b"new-2"]


def test_a_flipped_byte_in_a_records_properties_costs_that_record_only(
    open_store: Open, tmp_path: Path
) -> None:
    """The body CRC does not cover topic or properties, so recovery keeps such a record; no
    reader can decode it. Dispatch steps over it (as RocketMQ's reput does). Before, the
    UnicodeDecodeError stopped dispatch, and with it the store's start, for every topic."""
    store = open_store()
    offsets = fill(store, 30, queues=1)
    store.halt()
    for f in (tmp_path / "store" / "consumequeue" / "TopicR" / "0").iterdir():
        f.unlink()  # the queue is rebuilt by parsing the commitlog
    path = last_file(tmp_path)
    data = bytearray(path.read_bytes())
    victim = offsets[10] - int(path.name)
    data[data.index(b"KEYS", victim)] = 0xFF
    path.write_bytes(bytes(data))
    store = open_store()
    assert store.reput.stuck_reason is None and store.reput.records_skipped == 1
    assert served(store, queues=1) == [i for i in range(30) if i != 10]
    assert store.put_message(Message("TopicR", b"00030" * 20, 0)).queue_offset == 30


@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_an_index_file_of_the_wrong_size_is_rebuilt_not_fatal(
    open_store: Open, tmp_path: Path, stop: str
) -> None:
    """An index file cut short (or left from other maxHashSlotNum/maxIndexNum settings) is
    dropped with the files after it and the keys are indexed again from the commitlog.
    Before, the store would not start."""
    store = open_store(max_index_num=64)
    fill(store, 200)
    store.shutdown() if stop == "clean" else store.halt()
    index_files = sorted((tmp_path / "store" / "index").iterdir())
    assert len(index_files) > 2
    with open(index_files[1], "r+b") as fh:
        fh.truncate(1000)
    store = open_store(max_index_num=64)
    report = store.recovery_report
    assert report is not None and report.index_files_dropped >= len(index_files) - 1
    for i in (0, 60, 199):
        [found] = store.query_message("TopicR", f"k{i}", 4).messages
        assert decode_record(found).body[:5] == f"{i:05d}".encode()


def _damage_header(path: Path) -> None:
    """indexCount far past maxIndexNum: queries and writes would reach past the file."""
    with open(path, "r+b") as fh:
        fh.seek(INDEX_HEADER.size - 4)
        fh.write((10**6).to_bytes(4, "big"))


def _damage_chain(path: Path) -> None:
    """Link every used entry to the next and the newest back to the first (64 hash slots):
    one cycle through every chain."""
    with open(path, "r+b") as fh:
        data = bytearray(fh.read())
        count = int.from_bytes(data[INDEX_HEADER.size - 4 : INDEX_HEADER.size], "big")
        entries_at = INDEX_HEADER.size + 64 * INDEX_SLOT_SIZE
        for n in range(1, count):
            at = entries_at + n * INDEX_ENTRY.size + INDEX_ENTRY.size - 4
            data[at : at + 4] = (n + 1 if n + 1 < count else 1).to_bytes(4, "big")
        fh.seek(0)
        fh.write(data)


@pytest.mark.parametrize("damage", [_damage_header, _damage_chain])
def test_an_index_file_that_cannot_be_trusted_is_rebuilt(
    open_store: Open, tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    """A header no writer leaves, in any file, or a slot or chain that points where none can
    in the newest file (a crash or a bad write lands there): the file is dropped with those
    after it and its keys indexed again. Before, the header made every query and the next
    index write raise (dispatch stuck), and the cycle made a query by key spin forever."""
    store = open_store(max_hash_slot_num=64, max_index_num=64)
    fill(store, 200)
    store.shutdown()
    index_files = sorted((tmp_path / "store" / "index").iterdir())
    assert len(index_files) > 2
    damage(index_files[-1] if damage is _damage_chain else index_files[1])
    store = open_store(max_hash_slot_num=64, max_index_num=64)
    report = store.recovery_report
    assert report is not None and report.index_files_dropped >= 1
    for i in range(0, 200, 7):
        [found] = store.query_message("TopicR", f"k{i}", 4).messages
        assert decode_record(found).body[:5] == f"{i:05d}".encode()
    assert store.put_message(Message("TopicR", b"after", 0, {"KEYS": "k-after"})).ok


def test_a_query_never_follows_a_chain_forwards(open_store: Open, tmp_path: Path) -> None:
    """Damage that appears while the store runs: a prevIndex pointing at a later entry ends
    the walk (chains only run backwards), so a query returns instead of spinning."""
    store = open_store(max_hash_slot_num=64, max_index_num=1000)
    fill(store, 100)
    [path] = sorted((tmp_path / "store" / "index").iterdir())
    _damage_chain(path)
    answers: list[int] = []

    def query() -> None:
        for i in range(10):
            answers.append(len(store.query_message("TopicR", f"missing{i}", 32).messages))

    querier = threading.Thread(target=query, daemon=True)
    querier.start()
    querier.join(10)
    assert not querier.is_alive(), "a query by key spun on the damaged chain"
    assert answers == [0] * 10


def test_index_files_written_by_rocketmq_rust_are_trusted() -> None:
    [path] = (FIXTURES / "mxsm-rocketmq-rust-v0.9.0" / "local-file" / "index").iterdir()
    f = IndexFile(str(path), 32, 128, create=False)
    try:
        assert f.damage(entries_too=True) is None
    finally:
        f.close()


@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_a_consume_queue_file_of_the_wrong_size_is_rebuilt_not_fatal(
    open_store: Open, tmp_path: Path, stop: str
) -> None:
    """A queue's files are derived from the commitlog: one cut short is dropped with the
    files after it and refilled by re-dispatch. Before, the store would not start (the
    commitlog's own files still stop it: they hold the data)."""
    store = open_store()
    fill(store, 300)
    store.shutdown() if stop == "clean" else store.halt()
    queue_dir = tmp_path / "store" / "consumequeue" / "TopicR" / "1"
    files = sorted(queue_dir.iterdir())
    assert len(files) > 2
    with open(files[1], "r+b") as fh:
        fh.truncate(100)
    store = open_store()
    assert served(store) == list(range(300))
    assert store.put_message(Message("TopicR", b"00300" * 20, 1)).queue_offset == 150


def test_a_deletion_cut_short_by_a_crash_is_finished_at_the_next_start(
    open_store: Open, tmp_path: Path
) -> None:
    """Killed after the deletion was recorded but before the topic's queue files were all
    gone: the next start removes what is left of them."""
    store = open_store()
    for i in range(20):
        assert store.put_message(Message("Half", b"h%d" % i, i % 2)).ok
    assert store.wait_dispatched()
    queues = tmp_path / "store" / "consumequeue" / "Half"
    left_behind = tmp_path / "left-behind"
    shutil.copytree(queues, left_behind)
    store.delete_topic("Half")
    store.halt()
    shutil.copytree(left_behind, queues)  # as if the unlinks had not happened yet
    store = open_store()
    for qid in (0, 1):
        got = store.get_message("Half", qid, 0, 32)
        assert got.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert not queues.exists()
    assert store.put_message(Message("Half", b"new", 0)).queue_offset == 0


@pytest.mark.parametrize("left", [8, 20, 47])
def test_records_ending_just_short_of_their_files_end_are_no_damage(
    open_store: Open, left: int
) -> None:
    """A crash after a record that leaves fewer bytes in its file than a record's head (the
    filler that closes a file is written only by the put that does not fit): the zeros after
    it are the end of the data, not damage."""
    store = open_store(mapped_file_size_commitlog=8192)
    probe = store.put_message(Message("TopicR", b"", 0))
    assert probe.ok
    record_size = probe.wrote_bytes  # of an empty body; each body byte adds one
    while (free := 8192 - store.commitlog.max_offset() % 8192) > 3000 + record_size + left:
        assert store.put_message(Message("TopicR", bytes(2000), 0)).ok
    last = store.put_message(Message("TopicR", bytes(free - left - record_size), 0))
    assert last.ok and store.commitlog.max_offset() % 8192 == 8192 - left
    count = last.queue_offset + 1
    store.halt()
    store = open_store(mapped_file_size_commitlog=8192)
    report = store.recovery_report
    assert report is not None and report.abnormal and report.damage is None
    assert report.process_offset == last.wrote_offset + last.wrote_bytes
    got = store.get_message("TopicR", 0, 0, count)
    assert got.status is GetMessageStatus.FOUND and len(got.messages) == count
