"""The compiled `place_singles` and `validate_groups` (`store._commitlog`) against
`CommitLog`'s own: two commitlogs of small files take the same random puts (sends of one
message to a few queues, batches, batches spanning queues, prepared transactions, messages
too large for a file or for the store, properties too long, negative queue ids, empty
batches, illegal topics, WAIT true, false or absent under SYNC_FLUSH), and end with the
same results, waits, queue offsets and files, byte for byte."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqpy.config.compiled import PURE_PYTHON
from rmqpy.store.commitlog import CommitLog
from rmqpy.store.layout import MessageConst, SysFlag
from rmqpy.store.message import Host, Message
from tests.conftest import small_config

compiled = pytest.importorskip("rmqpy.store._commitlog", reason="the compiled core is not built")

FILE_SIZE = 4096
HOSTS = [Host(b"\x0a\x00\x00\x07", 5000), Host(bytes(range(16)), 6000)]


@st.composite
def messages(draw: st.DrawFn) -> Message:
    props = {MessageConst.UNIQ_KEY: f"U{draw(st.integers(0, 99)):02d}"}
    wait = draw(st.sampled_from(["true", "false", None, None]))
    if wait is not None:
        props[MessageConst.WAIT] = wait
    return Message(
        draw(st.sampled_from(["TopicA", "TopicB", "bad topic"])),
        draw(st.sampled_from([b"x" * 10, b"y" * 700, b"z" * 1500, b"w" * 5000])),
        draw(st.integers(0, 2)),
        props,
        sys_flag=draw(st.sampled_from([0, 0, 0, SysFlag.TRANSACTION_PREPARED_TYPE])),
        born_host=draw(st.sampled_from(HOSTS)),
    )


GROUPS = st.lists(
    st.one_of(messages().map(lambda m: [m]), st.lists(messages(), min_size=2, max_size=3)),
    min_size=1,
    max_size=12,
)


def commitlog(root: Path, twin: bool, sync: bool) -> CommitLog:
    config = small_config(root, mapped_file_size_commitlog=FILE_SIZE)
    made = CommitLog(config, clock_ms=lambda: 1_700_000_000_000)
    made._place_singles = compiled.place_singles if twin else CommitLog.place_singles
    made._validate_groups = compiled.validate_groups if twin else CommitLog.validate_groups
    if sync:
        made.flush_waiter = lambda _offset: True
    return made


@settings(max_examples=200, deadline=None)
@given(st.lists(GROUPS, min_size=1, max_size=4), st.booleans())
def test_both_place_the_same_puts_in_the_same_bytes(
    puts: list[list[list[Message]]], sync: bool
) -> None:
    outcomes: list[Any] = []
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        for root, twin in ((a, False), (b, True)):
            log = commitlog(Path(root), twin, sync)
            try:
                rounds = [log._put_groups(groups) for groups in puts]
                files = [f.read(0, f.file_size) for f in log.queue.files]
                outcomes.append((rounds, dict(log.topic_queue_table), files))
            finally:
                log.shutdown()
    assert outcomes[1] == outcomes[0]


def test_the_commitlog_uses_the_twin_unless_told_not_to(tmp_path: Path) -> None:
    log = CommitLog(small_config(tmp_path))
    try:
        expected = CommitLog.place_singles if PURE_PYTHON else compiled.place_singles
        assert log._place_singles == expected
        validate = CommitLog.validate_groups if PURE_PYTHON else compiled.validate_groups
        assert log._validate_groups == validate
    finally:
        log.shutdown()


@st.composite
def odd_messages(draw: st.DrawFn) -> Message:
    """A message the store may refuse: a negative queue, a long body, long properties."""
    msg = draw(messages())
    change = draw(st.sampled_from(["none", "none", "queue", "body", "props"]))
    if change == "queue":
        msg.queue_id = -1
    elif change == "body":
        msg.body = b"b" * 5000
    elif change == "props":
        msg.props_bytes = b"p" * 32768
    return msg


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(odd_messages(), max_size=3), min_size=1, max_size=8))
def test_both_find_the_same_groups_valid(groups: list[list[Message]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        config = small_config(Path(root), mapped_file_size_commitlog=FILE_SIZE)
        log = CommitLog(replace(config, max_message_size=4000))
        try:
            theirs = CommitLog.validate_groups(log, groups)
            log._valid_topics.clear()  # what the first call learnt, learnt again
            ours = compiled.validate_groups(log, groups)
        finally:
            log.shutdown()
    assert ours == theirs


@settings(max_examples=100, deadline=None)
@given(GROUPS, st.dictionaries(st.sampled_from(["TopicA-0", "TopicB-2"]), st.integers(0, 9)))
def test_both_note_the_queue_offsets_a_failed_write_rolls_back(
    groups: list[list[Message]], before: dict[str, int]
) -> None:
    """What each placed queue's offset was before the segment: a write error restores it."""
    segments: list[Any] = []
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        for root, twin in ((a, False), (b, True)):
            log = commitlog(Path(root), twin, False)
            try:
                log.topic_queue_table.update(before)
                seg = log._segment(log.queue.create_file(0), 0)
                results: list[Any] = [None] * len(groups)
                stop = log._place_singles(log, groups, 0, results, seg, 1, False)
                segments.append((stop, results, seg.old_offsets, seg.queue_offsets, seg.size))
            finally:
                log.shutdown()
    assert segments[1] == segments[0]
