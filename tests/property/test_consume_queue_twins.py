"""The compiled `encode_entries` (`store._consume_queue`) against the reference: the same
bytes for any columns a dispatch round can hold (offsets and tags as wide as a long, sizes
as an int). And `max_offset_in`, which parked pulls ask, against
`MessageStore.get_max_offset_in_queue`: queues that grow across files, and queues, topics
and files that are not there."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmqpy.store.consume_queue
from rmqpy.config.compiled import PURE_PYTHON
from rmqpy.store.consume_queue import encode_entries
from rmqpy.store.message import Message
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config

compiled = pytest.importorskip(
    "rmqpy.store._consume_queue", reason="the compiled core is not built"
)

LONGS = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(LONGS, st.integers(-(2**31), 2**31 - 1), LONGS), max_size=40))
def test_both_encode_the_same_entries(entries: list[tuple[int, int, int]]) -> None:
    phys, sizes, tags = ([e[i] for e in entries] for i in range(3))
    assert compiled.encode_entries(phys, sizes, tags) == encode_entries(phys, sizes, tags)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["TopicA", "TopicB"]), st.integers(0, 2)), max_size=30))
def test_both_tell_a_queues_max_offset_alike(puts: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = MessageStore(small_config(Path(root), mapped_file_size_consume_queue=20 * 4))
        store.start()
        try:
            store.consume_queues.find_or_create("Empty", 0)  # a queue with no file yet
            for topic, queue_id in puts:
                store.put_message(Message(topic, b"x", queue_id, {}))
            assert store.wait_dispatched()
            table = store.consume_queues.table
            for topic in ("TopicA", "TopicB", "Empty", "NoSuchTopic"):
                for queue_id in range(4):
                    assert compiled.max_offset_in(table, topic, queue_id) == (
                        store.get_max_offset_in_queue(topic, queue_id)
                    )
            assert sum(store.get_max_offset_in_queue(t, q) for t in ("TopicA", "TopicB")
                       for q in range(3)) == len(puts)  # fmt: skip
        finally:
            store.shutdown()


def test_consume_queues_use_the_twin_unless_told_not_to() -> None:
    expected = encode_entries if PURE_PYTHON else compiled.encode_entries
    assert rmqpy.store.consume_queue.encode is expected
    assert rmqpy.store.consume_queue.max_offset_in is (
        None if PURE_PYTHON else compiled.max_offset_in
    )
