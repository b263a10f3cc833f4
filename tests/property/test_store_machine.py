"""A Hypothesis state machine drives put / batch / get / query / flush / delete a topic /
expire old files / crash-and-recover against a plain Python model of what the store must
hold."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rmqpy.config.store_config import FlushDiskType
from rmqpy.store.layout import GetMessageStatus
from rmqpy.store.message import Message, decode_record, tags_code
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config

QUEUES = [("TopicA", 0), ("TopicA", 1), ("TopicB", 0)]
TAGS = ["red", "green"]

Item = tuple[bytes, str, str, int]  # body, key, tag, commitlog offset

queue_st = st.sampled_from(QUEUES)
body_st = st.binary(min_size=0, max_size=3000)
key_st = st.sampled_from(["k1", "k2", "k3", "k4"])


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="rmqpy-machine-"))
        self.mode = FlushDiskType.ASYNC_FLUSH
        self.store = self._open()
        # (topic, queue) -> [(body, key, tag, commitlog offset)] in queue-offset order
        self.model: dict[tuple[str, int], list[Item]] = {q: [] for q in QUEUES}
        # (topic, key) -> commitlog offsets of the messages put with it (the index keeps a
        # deleted topic's keys; expiry takes away those below the commitlog's minimum)
        self.keyed: dict[tuple[str, str], list[int]] = {}

    def _open(self) -> MessageStore:
        store = MessageStore(
            small_config(
                self.dir,
                mapped_file_size_commitlog=8192,
                flush_disk_type=self.mode,
                file_reserved_time_hours=0.0,  # every file but the last is due when asked
            )
        )
        store.start()
        return store

    def _message(self, where: tuple[str, int], body: bytes, key: str, tag: str) -> Message:
        return Message(where[0], body, where[1], {"KEYS": key, "TAGS": tag})

    @rule(where=queue_st, body=body_st, key=key_st, tag=st.sampled_from(TAGS))
    def put(self, where: tuple[str, int], body: bytes, key: str, tag: str) -> None:
        result = self.store.put_message(self._message(where, body, key, tag))
        assert result.ok, result
        assert result.queue_offset == len(self.model[where])
        self._add(where, [(body, key, tag)], result.record_offsets)

    @rule(
        where=queue_st,
        items=st.lists(st.tuples(body_st, key_st, st.sampled_from(TAGS)), min_size=1, max_size=6),
    )
    def put_batch(self, where: tuple[str, int], items: list[tuple[bytes, str, str]]) -> None:
        result = self.store.put_batch([self._message(where, *item) for item in items])
        assert result.ok, result
        assert result.queue_offset == len(self.model[where])
        self._add(where, items, result.record_offsets)

    def _add(
        self, where: tuple[str, int], items: list[tuple[bytes, str, str]], phys: list[int]
    ) -> None:
        for (body, key, tag), phy in zip(items, phys, strict=True):
            self.model[where].append((body, key, tag, phy))
            self.keyed.setdefault((where[0], key), []).append(phy)

    def _live(self, items: list[Item]) -> list[Item]:
        """The items expiry has not taken."""
        low = self.store.commitlog.min_offset()
        return [item for item in items if item[3] >= low]

    @rule()
    def expire(self) -> None:
        """Filler sends roll the commitlog on; then every file but the last goes (once
        dispatch is past it), and the consume-queue and index files that only point at
        them."""
        for _ in range(3):
            assert self.store.put_message(Message("Filler", bytes(3000), 0)).ok
        assert self.store.wait_dispatched()
        self.store.expiry.delete_expired_now()
        self.store.expiry.clean()

    @rule(topic=st.sampled_from(["TopicA", "TopicB"]))
    def delete_topic(self, topic: str) -> None:
        """Its queues go and start over at offset 0 when it is sent to again; no restart
        brings them back."""
        self.store.delete_topic(topic)
        for where in self.model:
            if where[0] == topic:
                self.model[where] = []

    @rule()
    def flush(self) -> None:
        self.store.commitlog.queue.flush(0)
        self.store.consume_queues.flush(0)

    @rule(mode=st.sampled_from(list(FlushDiskType)))
    def clean_restart(self, mode: FlushDiskType) -> None:
        self.store.shutdown()
        self.mode = mode
        self.store = self._open()
        assert self.store.recovery_report is not None
        assert not self.store.recovery_report.abnormal

    @rule()
    def crash_and_recover(self) -> None:
        self.store.halt()
        self.store = self._open()
        report = self.store.recovery_report
        assert report is not None and report.abnormal and report.damage is None

    @precondition(lambda self: any(self.model.values()))
    @rule(where=queue_st, data=st.data())
    def get_from_offset(self, where: tuple[str, int], data: st.DataObject) -> None:
        expected = self.model[where]
        assert self.store.wait_dispatched()
        offset = data.draw(st.integers(0, len(expected) + 2))
        got = self.store.get_message(where[0], where[1], offset, 8)
        first_live = len(expected) - len(self._live(expected))
        if offset < first_live:
            assert got.status is GetMessageStatus.OFFSET_TOO_SMALL
            assert got.next_begin_offset == first_live
        elif offset < len(expected):
            assert got.status is GetMessageStatus.FOUND
            bodies = [decode_record(m).body for m in got.messages]
            assert bodies == [b for b, _, _, _ in expected[offset : offset + len(bodies)]]
            assert len(bodies) >= 1
        else:
            assert got.status is not GetMessageStatus.FOUND

    @rule(where=queue_st, tag=st.sampled_from(TAGS))
    def get_by_tag(self, where: tuple[str, int], tag: str) -> None:
        assert self.store.wait_dispatched()
        wanted = [b for b, _, t, _ in self._live(self.model[where]) if t == tag]
        seen: list[bytes] = []
        offset = 0
        while offset < len(self.model[where]):
            got = self.store.get_message(where[0], where[1], offset, 32, {tags_code(tag)})
            seen += [decode_record(m).body for m in got.messages]
            offset = got.next_begin_offset
        assert seen == wanted

    @rule(topic=st.sampled_from(["TopicA", "TopicB"]), key=key_st)
    def query(self, topic: str, key: str) -> None:
        assert self.store.wait_dispatched()
        low = self.store.commitlog.min_offset()
        expected = sum(1 for phy in self.keyed.get((topic, key), []) if phy >= low)
        hits = self.store.query_message(topic, key, 64)
        assert len(hits.messages) == min(expected, 64)

    @invariant()
    def max_offsets_match(self) -> None:
        assert self.store.wait_dispatched()
        for (topic, qid), items in self.model.items():
            assert self.store.get_max_offset_in_queue(topic, qid) == len(items)

    def teardown(self) -> None:
        if self.store.running:
            self.store.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, print_blob=True
)
TestStoreMachine = StoreMachine.TestCase
