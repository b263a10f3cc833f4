"""Delayed messages: a DELAY level keeps a message in the schedule topic until it is due,
then it is stored again under its own topic, once, across restarts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from rmqpy.store.layout import SCHEDULE_TOPIC, GetMessageStatus
from rmqpy.store.message import Message, Record, decode_record
from rmqpy.store.message_store import MessageStore

Open = Callable[..., MessageStore]
LEVELS = "100ms 300ms 600ms"


def records(store: MessageStore, topic: str, queue_id: int = 0) -> list[Record]:
    got = store.get_message(topic, queue_id, 0, 32)
    if got.status != GetMessageStatus.FOUND:
        return []
    return [decode_record(m, 0) for m in got.messages]


def wait_for(found: Callable[[], list[Record]], timeout_s: float = 5.0) -> list[Record]:
    deadline = time.monotonic() + timeout_s
    while not (got := found()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return got


def test_a_delayed_message_comes_back_under_its_topic_when_due(open_store: Open) -> None:
    store = open_store(message_delay_level=LEVELS)
    props = {"DELAY": "2", "TAGS": "TagD", "KEYS": "later"}
    put = store.put_message(Message("DelayT", b"wait for it", 3, props))
    assert put.ok
    assert store.wait_dispatched()
    assert records(store, "DelayT", 3) == []  # not yet: it waits in the schedule topic
    [waiting] = records(store, SCHEDULE_TOPIC, 1)
    assert (waiting.properties["REAL_TOPIC"], waiting.properties["REAL_QID"]) == ("DelayT", "3")
    queue = store.consume_queues.find(SCHEDULE_TOPIC, 1)
    assert queue is not None
    [(_, _, due)] = queue.get_entries(0, 1)
    assert due == waiting.store_timestamp + 300  # the tags code is when it is due

    [back] = wait_for(lambda: records(store, "DelayT", 3))
    assert back.body == b"wait for it"
    assert back.store_timestamp >= due
    assert (back.tags, back.keys) == ("TagD", ["later"])
    assert "DELAY" not in back.properties
    # REAL_TOPIC and REAL_QID stay, as a Java broker keeps them.
    assert (back.properties["REAL_TOPIC"], back.properties["REAL_QID"]) == ("DelayT", "3")
    assert store.query_message("DelayT", "later", 8).messages  # indexed under its own topic


def test_levels_past_the_last_are_capped_and_a_bad_level_is_no_delay(open_store: Open) -> None:
    store = open_store(message_delay_level=LEVELS)
    assert store.put_message(Message("CapT", b"capped", 0, {"DELAY": "40"})).ok
    assert store.put_message(Message("CapT", b"now", 1, {"DELAY": "soon"})).ok
    assert store.wait_dispatched()
    assert [r.body for r in records(store, SCHEDULE_TOPIC, 2)] == [b"capped"]
    assert [r.body for r in records(store, "CapT", 1)] == [b"now"]


def test_delivered_messages_are_not_delivered_again_after_a_restart(
    open_store: Open, tmp_path: Path
) -> None:
    store = open_store(message_delay_level=LEVELS)
    for i in range(3):
        assert store.put_message(Message("OnceT", f"m{i}".encode(), 0, {"DELAY": "1"})).ok
    assert len(wait_for(lambda: records(store, "OnceT")[2:])) == 1  # all three are back
    store.shutdown()
    table = json.loads((tmp_path / "store" / "config" / "delayOffset.json").read_text())
    assert table == {"offsetTable": {"1": 3}}

    again = open_store(message_delay_level=LEVELS)
    time.sleep(0.5)  # several rounds of the schedule service
    assert again.schedule.delivered == 0
    assert [r.body for r in records(again, "OnceT")] == [b"m0", b"m1", b"m2"]


def test_expiry_keeps_the_files_of_delayed_messages_until_they_are_delivered(
    open_store: Open,
) -> None:
    """A fileReservedTime shorter than a delay (here every file is due at once): the file
    holding a delayed message stays until the message is delivered, then goes. Before, the
    acknowledged message was gone when due, logged as unreadable and skipped."""
    store = open_store(message_delay_level="1s 2s", file_reserved_time_hours=0.0)
    assert store.put_message(Message("DelayT", b"wait for it", 0, {"DELAY": "1"})).ok
    for _ in range(200):  # later files
        assert store.put_message(Message("Filler", b"f" * 300, 0)).ok
    assert store.wait_dispatched()
    store.expiry.delete_expired_now()
    assert store.expiry.clean().commitlog_files_deleted == 0
    [due] = wait_for(lambda: records(store, "DelayT"))
    assert due.body == b"wait for it"
    store.expiry.delete_expired_now()
    assert store.expiry.clean().commitlog_files_deleted > 0
