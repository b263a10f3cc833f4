"""Dispatch writes the same consume queues and index whether it takes the commitlog's own
columns (a running store) or parses the files (a store opened on someone else's commitlog)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
import structlog.testing

from rmqpy.store import dispatch
from rmqpy.store.dispatch import Arrival
from rmqpy.store.layout import GetMessageStatus, SysFlag
from rmqpy.store.message import Message, decode_record
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config


def workload() -> list[list[list[Message]]]:
    """Puts of 8 groups each: singles over two topics and three queues, batches,
    transactions, odd keys, file rolls; then puts whose records all have one key, or none,
    and a batch holding a prepared transaction (the shapes dispatch takes column-wise), and
    two delayed messages."""
    groups: list[list[Message]] = []
    for i in range(120):
        topic = "TopicA" if i % 3 else "TopicB"
        props = {"TAGS": f"Tag{i % 4}", "UNIQ_KEY": f"U{i:030d}"}
        if i % 5:
            props["KEYS"] = f"k{i} shared  k{i}-\u00e9" if i % 7 == 0 else f"k{i}"
        flag = SysFlag.TRANSACTION_NOT_TYPE
        if i % 11 == 0:
            flag = SysFlag.TRANSACTION_PREPARED_TYPE
        elif i % 13 == 0:
            flag = SysFlag.TRANSACTION_ROLLBACK_TYPE
        msg = Message(topic, b"b" * (40 + i * 7 % 300), i // 3 % 3, props, sys_flag=flag)
        if i % 10 == 9:
            batch = [
                Message(topic, b"batch" * 20, i // 3 % 3, {**props, "KEYS": f"bk{i}-{j}"})
                for j in range(4)
            ]
            groups.append(batch)
        groups.append([msg])
    puts = [groups[i : i + 8] for i in range(0, len(groups), 8)]
    for shape in ("one key", "no key"):
        puts += [
            [
                [
                    Message(
                        "TopicA",
                        b"shaped",
                        n % 3,
                        {"UNIQ_KEY": f"S{shape[0]}{p}-{n}"}
                        | ({"KEYS": f"sk{p}-{n}"} if shape == "one key" else {}),
                    )
                ]
                for n in range(8)
            ]
            for p in range(3)
        ]
    prepared = SysFlag.TRANSACTION_PREPARED_TYPE
    mixed = [
        Message("TopicB", b"mixed", 1, {"KEYS": f"mk{j}"}, sys_flag=prepared if j == 2 else 0)
        for j in range(4)
    ]
    puts.append([mixed])
    # Delayed messages (due in hours: none is delivered during the test) wait in the schedule
    # topic, whose entries' tags code is the time each is due, on either path.
    puts.append([[Message("TopicA", b"later", 2, {"DELAY": str(level)})] for level in (17, 18)])
    return puts


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def index_bytes(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "index").iterdir())]


def put_then_compare_with_parsed(
    tmp_path: Path, put: Callable[[MessageStore], None], **config: Any
) -> MessageStore:
    """Run `put` on a live store, then dispatch a copy of its commitlog alone by parsing:
    both must write the same consume queues and index. Returns the (shut down) live store."""
    live = MessageStore(small_config(tmp_path / "live", **config))
    live.start()
    put(live)
    assert live.wait_dispatched()
    live.shutdown()

    # The same commitlog, nothing else: the store dispatches it by parsing the files.
    (tmp_path / "parsed").mkdir()
    shutil.copytree(tmp_path / "live" / "commitlog", tmp_path / "parsed" / "commitlog")
    parsed = MessageStore(small_config(tmp_path / "parsed", **config))
    parsed.start()
    assert parsed.wait_dispatched()
    assert parsed.reput.records_parsed == live.reput.records_handed_over + live.reput.records_parsed
    parsed.shutdown()

    live_cq = tree_bytes(tmp_path / "live" / "consumequeue")
    assert tree_bytes(tmp_path / "parsed" / "consumequeue") == live_cq
    assert index_bytes(tmp_path / "parsed") == index_bytes(tmp_path / "live")
    return live


def test_handed_over_and_parsed_dispatch_write_identical_files(tmp_path: Path) -> None:
    def put(store: MessageStore) -> None:
        for groups in workload():
            assert all(r.ok for r in store.put_messages(groups))

    live = put_then_compare_with_parsed(tmp_path, put, mapped_file_size_consume_queue=20 * 8)
    assert live.reput.records_handed_over > 0
    assert len(tree_bytes(tmp_path / "live" / "consumequeue")) > 6  # 2 topics x 3 queues, rolled


def test_writers_racing_dispatch_leave_the_same_files_as_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four threads put while the dispatch thread and the writers' own rounds (every 4 KiB
    here) take what they hand over: nothing is dispatched twice or skipped, and every queue
    entry is readable the moment long polling hears of it."""
    monkeypatch.setattr(dispatch, "BATCH_BYTES", 4096)
    puts = workload()
    unreadable: list[Arrival] = []

    def put(store: MessageStore) -> None:
        def check(arrivals: Sequence[Arrival]) -> None:
            for a in arrivals:
                got = store.get_message(a.topic, a.queue_id, a.next_offset - 1, 1)
                if got.status != GetMessageStatus.FOUND:
                    unreadable.append(a)

        store.register_arrival_listener(check)

        def writer(k: int) -> None:
            for groups in puts[k::4] * 3:
                assert all(r.ok for r in store.put_messages(groups))

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    live = put_then_compare_with_parsed(
        tmp_path, put, mapped_file_size_commitlog=64 * 1024, max_index_num=4096
    )
    assert live.reput.records_handed_over > 0
    assert unreadable == []


def test_a_failing_round_is_logged_once_and_dispatch_resumes_after_it(
    open_store: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers retry a failing round with every put: the failure shows in `stuck_reason`
    (the health check) and in one log line with the traceback as text; once the fault is
    gone the next round catches up and clears it."""
    monkeypatch.setattr(dispatch, "BATCH_BYTES", 1)  # every put runs the rounds itself
    captured = structlog.testing.CapturingLogger()
    monkeypatch.setattr(dispatch, "log", structlog.wrap_logger(captured, processors=[]))
    store = open_store()
    assert store.index is not None
    build_index = store.index.build_index

    def broken(*args: Any) -> None:
        raise RuntimeError("index on fire")

    monkeypatch.setattr(store.index, "build_index", broken)
    for i in range(5):
        msg = Message("FailT", b"x", 0, {"KEYS": f"k{i}"})
        assert store.put_message(msg).ok  # the commitlog takes it; dispatch is behind
    assert store.reput.stuck_reason == "dispatch failed: RuntimeError('index on fire')"
    failures = [c for c in captured.calls if c.kwargs["event"] == "dispatch failed"]
    assert len(failures) == 1
    assert "index on fire" in failures[0].kwargs["traceback"]

    monkeypatch.setattr(store.index, "build_index", build_index)
    store.put_message(Message("FailT", b"y", 0, {"KEYS": "k5"}))
    assert store.wait_dispatched(timeout=5)
    assert store.reput.stuck_reason is None
    assert captured.calls[-1].kwargs["event"] == "dispatch resumed"
    got = store.get_message("FailT", 0, 0, 32)
    assert [decode_record(m, 0).body for m in got.messages] == [b"x"] * 5 + [b"y"]


def test_a_writer_that_can_schedule_work_runs_its_own_rounds_later(tmp_path: Path) -> None:
    """The broker's event loop offers the store a scheduler: the dispatch of puts made on
    that thread waits for the scheduled call (after the answers), with no dispatch thread
    involved; a put from any other thread is declined by the scheduler and the dispatch
    thread takes it; a clean shutdown dispatches a scheduled round that never ran."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    owner = threading.get_ident()
    scheduled: list[Callable[[], None]] = []

    def scheduler(fn: Callable[[], None]) -> bool:
        if threading.get_ident() != owner:
            return False
        scheduled.append(fn)
        return True

    store.dispatch_with(scheduler)
    for n in range(3):
        assert store.put_message(Message("LoopT", b"x", 0, {"KEYS": f"k{n}"})).ok
    time.sleep(0.05)  # a woken dispatch thread takes a put within 2 ms
    assert store.get_max_offset_in_queue("LoopT", 0) == 0
    assert len(scheduled) == 3
    scheduled[0]()
    assert store.get_max_offset_in_queue("LoopT", 0) == 3
    assert len(store.query_message("LoopT", "k2", 32).messages) == 1

    other = threading.Thread(target=store.put_message, args=(Message("LoopT", b"y", 0),))
    other.start()
    other.join()
    deadline = time.monotonic() + 5
    while store.get_max_offset_in_queue("LoopT", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.get_max_offset_in_queue("LoopT", 0) == 4

    assert store.put_message(Message("LoopT", b"z", 0)).ok
    store.shutdown()
    scheduled[-1]()  # too late: the store is shut down, and the round is not run
    assert not (tmp_path / "abort").exists()
    reopened = MessageStore(small_config(tmp_path))
    reopened.start()
    try:
        assert reopened.get_max_offset_in_queue("LoopT", 0) == 5
        report = reopened.recovery_report
        assert report is not None and report.entries_redispatched == 0  # nothing was missing
    finally:
        reopened.shutdown()
