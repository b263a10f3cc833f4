"""The lock, the config JSON files and expiry, on real files and processes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rmqpy.store.config_files import ConfigFileError, load_config_file, persist_config_file
from rmqpy.store.consume_queue import ConsumeQueue
from rmqpy.store.expiry import disk_used_ratio, used_percent
from rmqpy.store.flush import ServiceThread
from rmqpy.store.mapped_file_queue import MappedFileQueue
from rmqpy.store.message import Message, decode_record
from rmqpy.store.message_store import MessageStore
from rmqpy.store.store_lock import StoreLockedError
from tests.conftest import FIXTURES, small_config

Open = Callable[..., MessageStore]
REPO = Path(__file__).resolve().parents[2]


def test_second_process_on_the_same_store_fails_clearly(open_store: Open, tmp_path: Path) -> None:
    open_store()
    code = (
        "import sys\n"
        "from rmqpy.store.message_store import MessageStore\n"
        "from tests.conftest import small_config\n"
        "from rmqpy.store.store_lock import StoreLockedError\n"
        "from pathlib import Path\n"
        "try:\n"
        f"    MessageStore(small_config(Path({str(tmp_path / 'store')!r}))).start()\n"
        "except StoreLockedError as exc:\n"
        "    print(exc); sys.exit(3)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    assert "locked by another process" in proc.stdout


def test_second_store_object_in_one_process_fails(open_store: Open, tmp_path: Path) -> None:
    open_store()
    with pytest.raises(StoreLockedError, match="already open"):
        MessageStore(small_config(tmp_path / "store")).start()


def test_config_files_read_fastjson_and_keep_a_backup(tmp_path: Path) -> None:
    java = FIXTURES / "shaoxubao-rocketmq-study" / "config"
    offsets = load_config_file(str(java / "consumerOffset.json"))
    assert offsets is not None
    table = offsets["offsetTable"]
    assert table["TopicTest@please_rename_unique_group_name_4"] == {
        "0": 250,
        "1": 250,
        "2": 250,
        "3": 250,
    }
    topics = load_config_file(str(java / "topics.json"))
    assert topics is not None and topics["topicConfigTable"]["TopicTest"]["writeQueueNums"] == 4
    path = tmp_path / "config" / "consumerOffset.json"
    persist_config_file(str(path), lambda: {"offsetTable": {"T@g": {"0": 1}}})
    persist_config_file(str(path), lambda: {"offsetTable": {"T@g": {"0": 2}}})
    assert json.loads(path.read_text())["offsetTable"]["T@g"]["0"] == 2
    assert (
        json.loads((tmp_path / "config" / "consumerOffset.json.bak").read_text())["offsetTable"][
            "T@g"
        ]["0"]
        == 1
    )
    assert "\t" in path.read_text()  # fastjson's tab indent
    path.write_text('{"offsetTable": {')  # torn write of the main file
    recovered = load_config_file(str(path))
    assert recovered is not None and recovered["offsetTable"]["T@g"]["0"] == 1
    (tmp_path / "config" / "consumerOffset.json.bak").write_text("nonsense")
    with pytest.raises(ConfigFileError):
        load_config_file(str(path))
    assert load_config_file(str(tmp_path / "missing.json")) is None


def test_expiry_deletes_old_commitlog_then_its_queues_and_index(open_store: Open) -> None:
    store = open_store(max_index_num=64)
    for i in range(400):
        assert store.put_message(Message("TopicE", b"e" * 200, 0, {"KEYS": f"k{i}"})).ok
    assert store.wait_dispatched()
    files = list(store.commitlog.queue.files)
    cq = store.consume_queues.find("TopicE", 0)
    assert cq is not None and len(cq.queue.files) > 2
    index_before = len(store.index.files)  # type: ignore[union-attr]
    old = time.time() - 80 * 3600
    for f in files[:3]:
        os.utime(f.path, (old, old))
    store.expiry.delete_expired_now()
    result = store.expiry.clean()
    assert result.commitlog_files_deleted == 3
    assert store.commitlog.min_offset() == files[3].file_from_offset
    assert not os.path.exists(files[0].path)
    assert result.consume_queue_files_deleted >= 1
    assert store.index is not None and len(store.index.files) < index_before
    low = store.get_min_offset_in_queue("TopicE", 0)
    assert low > 0
    got = store.get_message("TopicE", 0, 0, 32)
    assert got.next_begin_offset == low  # OFFSET_TOO_SMALL points at the new minimum
    past = store.get_message("TopicE", 0, 405, 32)
    assert past.next_begin_offset == 400  # the queue no longer begins at 0: its end
    assert store.get_message("TopicE", 0, low, 32).messages


def test_expiry_keeps_commitlog_files_dispatch_has_not_finished(open_store: Open) -> None:
    """Files past their reserved time (here: at once) while dispatch is behind, as when the
    broker's event loop has not yet run the rounds it was handed: the files go only once
    their messages are in the consume queues. Deleted earlier, dispatch skipped to the new
    minimum and those messages were acknowledged and never served."""
    every_hour = ";".join(f"{h:02d}" for h in range(24))
    store = open_store(file_reserved_time_hours=0.0, delete_when=every_hour)
    deferred: list[Callable[[], None]] = []

    def run_later(rounds: Callable[[], None]) -> bool:
        deferred.append(rounds)
        return True

    store.dispatch_with(run_later)
    sent = [store.put_message(Message("TopicE", b"e" * 200, 0)) for _ in range(200)]
    assert all(r.ok for r in sent) and len(store.commitlog.queue.files) > 3
    store.expiry.clean()
    for rounds in deferred:
        rounds()
    assert store.wait_dispatched()
    served: list[int] = []
    offset = 0
    while (got := store.get_message("TopicE", 0, offset, 32)).messages:
        served += [decode_record(m).physical_offset for m in got.messages]
        offset = got.next_begin_offset
    assert served == [r.wrote_offset for r in sent]
    assert store.expiry.clean().commitlog_files_deleted > 0  # now they may go


def test_expiry_waits_for_the_delete_hour(open_store: Open) -> None:
    store = open_store(delete_when=f"{(time.localtime().tm_hour + 2) % 24:02d}")
    for _ in range(200):
        store.put_message(Message("TopicE", b"e" * 200, 0))
    assert store.wait_dispatched()  # (a file dispatch has not finished is kept)
    old = time.time() - 80 * 3600
    os.utime(store.commitlog.queue.files[0].path, (old, old))
    store.expiry.disk_ratio = lambda _path: 10.0
    assert store.expiry.clean().commitlog_files_deleted == 0
    store.expiry.disk_ratio = lambda _path: 80.0  # past diskMaxUsedSpaceRatio: at once
    assert store.expiry.clean().commitlog_files_deleted == 1


def test_disk_past_the_warning_level_refuses_puts(open_store: Open) -> None:
    store = open_store()
    store.expiry.disk_ratio = lambda _path: 95.0
    store.expiry.clean()
    result = store.put_message(Message("TopicE", b"x", 0))
    assert result.status.name == "SERVICE_NOT_AVAILABLE" and "diskSpaceWarningLevelRatio" in (
        result.remark
    )
    store.expiry.disk_ratio = lambda _path: 50.0
    store.expiry.clean()
    assert store.put_message(Message("TopicE", b"x", 0)).ok


def test_a_full_disk_deletes_no_unexpired_file_unless_told_to(open_store: Open) -> None:
    """Past diskSpaceCleanForciblyRatio RocketMQ deletes the oldest files whether or not
    their retention has passed, read or not: here only with cleanFileForciblyEnable."""
    store = open_store()
    sent = [store.put_message(Message("TopicF", b"f" * 200, 0)) for _ in range(200)]
    assert all(r.ok for r in sent) and len(store.commitlog.queue.files) > 2
    assert store.wait_dispatched()
    store.expiry.disk_ratio = lambda _path: 99.0  # past every ratio
    store.expiry.delete_expired_now()
    assert store.expiry.clean().commitlog_files_deleted == 0
    assert any(p.startswith("disk usage is over") for p in store.write_problems())
    assert store.get_message("TopicF", 0, 0, 1).messages  # the first message is still there
    store.shutdown()
    forced = open_store(clean_file_forcibly_enable=True)
    forced.expiry.disk_ratio = lambda _path: 99.0
    assert forced.expiry.clean().commitlog_files_deleted > 0


def test_queries_by_key_while_expiry_deletes_index_files_never_fail(open_store: Open) -> None:
    """A QUERY_MESSAGE that meets an index file expiry deletes under it gets what the other
    files hold (what the deleted one indexed is gone too), not an exception."""
    every_hour = ";".join(f"{h:02d}" for h in range(24))
    store = open_store(
        file_reserved_time_hours=0.0, delete_when=every_hour, clean_resource_interval_ms=20
    )
    stop = threading.Event()
    failures: list[BaseException] = []
    queries = [0]

    def query() -> None:
        while not stop.is_set():
            try:
                store.query_message("TopicE", f"k{queries[0] % 50}", 32, 0, 2**62)
            except BaseException as exc:  # reported by the assertion below
                failures.append(exc)
                return
            queries[0] += 1

    querier = threading.Thread(target=query)
    querier.start()
    deadline = time.monotonic() + 2.0
    i = 0
    try:
        while time.monotonic() < deadline and not failures:
            assert store.put_message(Message("TopicE", b"e" * 300, 0, {"KEYS": f"k{i % 50}"})).ok
            i += 1
    finally:
        stop.set()
        querier.join()
    assert not failures, failures[0]
    assert queries[0] > 100 and len(store.index.files) >= 1  # type: ignore[union-attr]


def test_a_store_service_that_raises_keeps_running() -> None:
    """A flush or expiry round that raises something other than an I/O error (a bug, a file
    closed under it) is logged and the loop goes on: before, the thread ended, and with it
    flushing or the checkpoint, silently, until a restart."""

    class Flaky(ServiceThread):
        name = "flaky"

        def __init__(self) -> None:
            super().__init__()
            self.rounds = 0

        def run_once(self) -> None:
            self.rounds += 1
            if self.rounds == 1:
                raise ValueError("mmap closed or invalid")
            self._stopped.wait(0.01)

    service = Flaky()
    service.start()
    deadline = time.monotonic() + 5
    while service.rounds < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    service.shutdown()
    assert service.rounds >= 3


def test_a_config_file_that_is_no_utf8_falls_back_to_its_backup(tmp_path: Path) -> None:
    """Garbled bytes in topics.json (a bad disk, a stray write) are read like any other
    unreadable file: from the .bak, with the reason logged. Before, the UnicodeDecodeError
    stopped the broker's start."""
    path = tmp_path / "topics.json"
    persist_config_file(str(path), lambda: {"topicConfigTable": {"A": {"perm": 6}}})
    persist_config_file(str(path), lambda: {"topicConfigTable": {"B": {"perm": 6}}})
    path.write_bytes(b'{"topicConfigTable":{"\xff\xfe":{}}}')
    assert load_config_file(str(path)) == {"topicConfigTable": {"A": {"perm": 6}}}


def test_a_config_file_nested_too_deep_to_parse_falls_back_to_its_backup(tmp_path: Path) -> None:
    """`[[[[...` a hundred thousand deep overflows the JSON parser's recursion: that is an
    unreadable file like any other, not a traceback at the broker's start."""
    path = tmp_path / "topics.json"
    persist_config_file(str(path), lambda: {"topicConfigTable": {"A": {"perm": 6}}})
    persist_config_file(str(path), lambda: {"topicConfigTable": {"B": {"perm": 6}}})
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert load_config_file(str(path)) == {"topicConfigTable": {"A": {"perm": 6}}}


def test_an_unreadable_deleted_topics_file_does_not_stop_the_store(
    open_store: Open, tmp_path: Path
) -> None:
    store = open_store()
    assert store.put_message(Message("Kept", b"x", 0)).ok
    store.delete_topic("Gone")
    store.shutdown()
    config = tmp_path / "store" / "config"
    for name in ("deletedTopics.json", "deletedTopics.json.bak"):
        if (config / name).exists():
            (config / name).write_text("{ torn")
    store = open_store()
    assert store.deleted_topics.below == {}
    assert store.get_message("Kept", 0, 0, 1).messages


def test_deletions_whose_records_expired_are_forgotten(open_store: Open, tmp_path: Path) -> None:
    """config/deletedTopics.json keeps a deleted topic only while its records may still be
    in the commitlog; a broker that creates and deletes topics all day keeps it small."""
    store = open_store(file_reserved_time_hours=0.0)  # every file but the last is due
    assert store.put_message(Message("Early", b"e", 0)).ok
    store.delete_topic("Early")
    for _ in range(200):
        assert store.put_message(Message("TopicE", b"e" * 200, 0)).ok
    assert store.wait_dispatched()
    store.expiry.delete_expired_now()
    assert store.expiry.clean().commitlog_files_deleted > 0
    store.delete_topic("Late")
    table = json.loads((tmp_path / "store" / "config" / "deletedTopics.json").read_text())
    assert set(table["deletedTopics"]) == {"Late"}


def test_disk_usage_is_measured_as_df_measures_it(tmp_path: Path) -> None:
    # 1,000 blocks, 420 in use, 200 of the 580 free ones reserved for root: df says 52.5%
    # (420 of the 800 this process can use); counting the reserved ones as used said 62%.
    assert used_percent(blocks=1000, free=580, available=380) == pytest.approx(52.5)
    assert used_percent(blocks=1000, free=200, available=0) == 100.0  # ENOSPC for us: full
    df = subprocess.run(
        ["df", "--output=pcent", str(tmp_path)], capture_output=True, text=True, check=True
    )
    shown = int(df.stdout.splitlines()[-1].strip().rstrip("%"))
    assert abs(math.ceil(disk_used_ratio(str(tmp_path))) - shown) <= 1  # df rounds up


def test_a_new_consume_queue_file_is_named_durably_by_the_flush_not_by_its_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dispatch creates a queue's files on the broker's event loop, where a directory fsync
    can wait tens of milliseconds on the file system's journal: the new name is made
    durable by the queue's next flush instead, before its entries are (once, not at every
    flush), as a commitlog file still is by its creator."""
    synced: list[str] = []
    fsync = os.fsync

    def watched(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", watched)
    cq = ConsumeQueue(str(tmp_path), "T", 0, 20 * 10)
    directory = os.path.join(str(tmp_path), "T", "0")
    cq.put_columns(list(range(12)), [100 * i for i in range(12)], [100] * 12, [0] * 12)
    assert len(cq.queue.files) == 2 and directory not in synced  # two files created, no fsync
    assert cq.flush(0)
    assert synced == [directory]
    cq.put_columns([12], [1200], [100], [0])
    cq.flush(0)
    assert synced == [directory]  # no new file: no second fsync
    cq.close()

    commitlog = MappedFileQueue(str(tmp_path / "commitlog"), 4096)
    commitlog.create_file(0)
    assert synced == [directory, str(tmp_path / "commitlog")]  # made durable as created
    commitlog.close()
