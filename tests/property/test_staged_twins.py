"""Staged sends (`store.staged`): the compiled placement, dispatch and metrics against their
references, and the whole columnar way (the compiled lane's `stage`, `put_staged`, dispatch,
`answer_staged`) against the reference send path, byte for byte: the same commitlog, the
same consume-queue entries and index keys, the same answers and metrics, whether a run is
staged or falls back to messages (a delay, a transaction flag, WAIT mixed, a full file)."""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rmqpy.broker.context import RequestContext, deliver
from rmqpy.broker.groups import SubscriptionGroupManager
from rmqpy.broker.metrics import (
    BrokerMetrics,
    reference_tally_answered,
    reference_tally_staged,
)
from rmqpy.broker.processors.send import LaterAnswers, SendIdentity, SendProcessor
from rmqpy.broker.topics import TopicConfig, TopicConfigManager
from rmqpy.config.store_config import FlushDiskType
from rmqpy.remoting.batch_body import BatchItem, encode_batch_body
from rmqpy.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.frame import FrameDecoder, decode_frames, reference_encode_frames
from rmqpy.remoting.headers.send import SendMessageRequestHeader
from rmqpy.remoting.wire import RPC_ONEWAY
from rmqpy.store.commitlog import WrittenSegment
from rmqpy.store.dispatch_columns import DispatchColumns
from rmqpy.store.layout import MARK_NO_WAIT, MARK_SHARDING_KEY, PutMessageStatus
from rmqpy.store.message import Host, Message, send_template
from rmqpy.store.message_store import MessageStore
from rmqpy.store.staged import (
    RECORD_MIN,
    StagedSends,
    reference_add_staged,
    reference_dispatch_staged,
    reference_place_staged,
)
from tests.conftest import small_config

compiled = pytest.importorskip("rmqpy.store._staged", reason="the compiled core is not built")
lane_module = pytest.importorskip(
    "rmqpy.broker.processors._send", reason="the compiled core is not built"
)
compiled_metrics = pytest.importorskip(
    "rmqpy.broker._metrics", reason="the compiled core is not built"
)

HOSTS = [Host(b"\x7f\x00\x00\x01", 50001), Host(bytes(range(16)), 6000)]
TEMPLATES = st.builds(
    send_template,
    st.sampled_from(["TopicA", "TopicB", "T" * 130]),
    st.integers(0, 3),
    st.just(""),
    st.sampled_from([0, 1, 8]),
    st.sampled_from(HOSTS),
    st.integers(0, 3),
)


@st.composite
def staged_sends(draw: st.DrawFn, placed: bool = False) -> StagedSends:
    """Records of random bytes with their columns, now and then not matching them."""
    templates = draw(st.lists(TEMPLATES, min_size=1, max_size=4))
    n = draw(st.integers(0, 8))
    slots = array("i", draw(st.lists(st.integers(0, len(templates) - 1), min_size=n, max_size=n)))
    sizes = array("i", draw(st.lists(st.integers(RECORD_MIN, 200), min_size=n, max_size=n)))
    data = bytearray(draw(st.binary(min_size=sum(sizes), max_size=sum(sizes))))
    damage = draw(st.sampled_from(["none"] * 6 + ["slot", "size", "data"]))
    if damage == "slot" and n:
        slots[0] = draw(st.sampled_from([-1, len(templates)]))
    elif damage == "size" and n:
        sizes[0] = draw(st.sampled_from([RECORD_MIN - 1, sizes[0] + 1]))
    elif damage == "data":
        data += b"x"
    staged = StagedSends(
        data,
        templates,
        slots,
        sizes,
        array("i", [s - RECORD_MIN for s in sizes]),
        array("i", draw(st.lists(st.sampled_from([0, MARK_SHARDING_KEY]), min_size=n, max_size=n))),
        array("q", draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=n, max_size=n))),
        draw(st.lists(st.sampled_from([None, "", "U1", "AC11"]), min_size=n, max_size=n)),
        draw(st.lists(st.sampled_from(["", "k1", "k1 k2", " k3  ", "  "]), min_size=n, max_size=n)),
    )
    if placed:
        staged.phys = array("q", draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n)))
        staged.queue_offsets = array(
            "q", draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n))
        )
        staged.store_timestamp = draw(st.integers(0, 2**41))
        staged.status = draw(
            st.sampled_from([PutMessageStatus.PUT_OK] * 3 + list(PutMessageStatus))
        )
    return staged


def copy(staged: StagedSends) -> StagedSends:
    return StagedSends(
        bytearray(staged.data),
        list(staged.templates),
        array("i", staged.slots),
        array("i", staged.sizes),
        array("i", staged.body_sizes),
        array("i", staged.marks),
        array("q", staged.tags),
        list(staged.uniq_keys),
        list(staged.keys),
        array("i", staged.counts),
        phys=array("q", staged.phys),
        queue_offsets=array("q", staged.queue_offsets),
        store_timestamp=staged.store_timestamp,
        status=staged.status,
    )


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except (ValueError, IndexError) as exc:
        return type(exc)


@settings(max_examples=400, deadline=None)
@given(
    staged_sends(),
    st.dictionaries(st.sampled_from(["TopicA-0", "TopicA-1", "TopicB-3"]), st.integers(0, 9)),
    st.integers(0, 2**40),
    st.integers(0, 2**41),
)
def test_both_place_staged_records_alike(
    staged: StagedSends, table: dict[str, int], start: int, stamp: int
) -> None:
    ours, theirs = copy(staged), copy(staged)
    our_table, their_table = dict(table), dict(table)
    old = outcome(compiled.place_staged, our_table, ours, start, stamp)
    expected = outcome(reference_place_staged, their_table, theirs, start, stamp)
    event("refused" if expected is ValueError else "placed")
    assert old == expected
    assert our_table == their_table
    assert ours.data == theirs.data
    assert (ours.phys, ours.queue_offsets, ours.store_timestamp) == (
        theirs.phys,
        theirs.queue_offsets,
        theirs.store_timestamp,
    )


@settings(max_examples=300, deadline=None)
@given(staged_sends(placed=True))
def test_both_dispatch_and_count_staged_records_alike(staged: StagedSends) -> None:
    if sum(staged.sizes) != len(staged.data) or not all(
        0 <= s < len(staged.templates) for s in staged.slots
    ):
        return  # a put never hands such records on
    ours, theirs = DispatchColumns(), DispatchColumns()
    compiled.add_staged(ours, staged)
    reference_add_staged(theirs, staged)
    assert ours == theirs
    our_sizes: dict[Any, Any] = {}
    their_sizes: dict[Any, Any] = {}
    compiled_metrics.tally_staged(our_sizes, staged)
    reference_tally_staged(their_sizes, staged)
    assert our_sizes == their_sizes
    # The same sends answered together: their sizes and one latency for all of them.
    our_metrics, their_metrics = BrokerMetrics(), BrokerMetrics()
    for latency in (0.0004, 0.25):
        compiled_metrics.tally_answered(our_metrics, 310, len(staged.counts), 0, latency, staged)
        reference_tally_answered(their_metrics, 310, len(staged.counts), 0, latency, staged)
    assert our_metrics.snapshot() == their_metrics.snapshot()
    stored = staged.status is PutMessageStatus.PUT_OK
    sizes_total = sum(h.total for h in their_metrics.sizes.values())
    assert sizes_total == (2 * sum(staged.body_sizes) if stored else 0)
    assert sum(sum(h.counts) for h in their_metrics.rpc.values()) == 2 * len(staged.counts)


# --- the whole way: stage, put, dispatch, answer ---------------------------------------------
ROOT = Path(tempfile.mkdtemp(prefix="staged-twins-"))
CLOCK = SimpleNamespace(now=1_700_000_000_000)


def side(name: str, compiled_lane: bool, flush: str) -> SimpleNamespace:
    topics = TopicConfigManager(str(ROOT / name / "config"), "DefaultCluster", "broker-a", 8)
    topics.table["TopicA"] = TopicConfig("TopicA", 4, 4)
    topics.table["TopicB"] = TopicConfig("TopicB", 2, 2)
    topics.table["ReadOnly"] = TopicConfig("ReadOnly", 2, 2, PERM_READ)
    groups = SubscriptionGroupManager(str(ROOT / name / "config"), True, 16)
    config = small_config(ROOT / name / "store", flush_disk_type=FlushDiskType[flush])
    store = MessageStore(config, clock_ms=lambda: CLOCK.now)
    if not compiled_lane:  # the reference's rounds too (`run_rounds`' reference)
        store.reput._rounds = store.reput._rounds_one_by_one  # type: ignore[method-assign]
    store.start()
    identity = SendIdentity("DefaultCluster", "broker-a", PERM_READ | PERM_WRITE, True)
    metrics = BrokerMetrics()
    send = SendProcessor(store, topics, groups, identity, metrics)
    send.lane = send.compiled_lane(lane_module) if compiled_lane else None
    return SimpleNamespace(send=send, store=store, metrics=metrics)


SIDES: dict[str, tuple[SimpleNamespace, SimpleNamespace]] = {}


def sides(flush: str) -> tuple[SimpleNamespace, SimpleNamespace]:
    if flush not in SIDES:
        SIDES[flush] = (side(f"lane-{flush}", True, flush), side(f"ref-{flush}", False, flush))
    return SIDES[flush]


PROPERTY_ITEMS = [
    "TAGS\x01TagA", "TAGS\x01Étiquette", "KEYS\x01k1 k2", "UNIQ_KEY\x01AC11",
    "UNIQ_CLIENT_MESSAGE_ID_KEYIDX\x01AC12", "WAIT\x01false", "DELAY\x013",
    "__SHARDINGKEY\x01g", "x", "KEYS\x01", "TAGS\x01",
]  # fmt: skip


def properties(items: list[str]) -> st.SearchStrategy[str]:
    """Encoded properties of up to four of `items`, now with a closing separator, now not."""
    return st.lists(st.sampled_from(items), max_size=4).map(
        lambda chosen: "\x02".join(chosen) + ("\x02" if chosen and len(chosen) % 2 else "")
    )


PROPERTIES = properties(PROPERTY_ITEMS)
# What a run that is staged more often than not carries: no delay, WAIT as the default.
CALM_PROPERTIES = properties([p for p in PROPERTY_ITEMS if not p.startswith(("DELAY", "WAIT"))])


BODIES = st.sampled_from([b"", b"hello", b"\x00" * 300, b"y" * 5000])
CALM_BODIES = st.sampled_from([b"", b"hello", b"\x00" * 300])


@st.composite
def batch_bodies(draw: st.DrawFn, calm: bool = False) -> bytes:
    """A batch body as a Java producer encodes it: items with their own properties; now
    and then cut short, empty, or with properties that are not UTF-8."""
    items = draw(
        st.lists(
            st.builds(
                BatchItem,
                st.integers(-(2**31), 2**31 - 1),
                CALM_BODIES if calm else BODIES,
                CALM_PROPERTIES if calm else PROPERTIES,
            ),
            min_size=1,
            max_size=4,
        )
    )
    body = encode_batch_body(items)
    damage = draw(st.sampled_from(["none"] if calm else ["none"] * 8 + ["cut", "empty", "utf8"]))
    if damage == "cut":
        return body[:-1]
    if damage == "empty":
        return b""
    if damage == "utf8":
        return encode_batch_body([BatchItem(0, b"x", "TAGS\x01ZZ")]).replace(b"ZZ", b"\xff\xfe")
    return body


@st.composite
def plain_sends(draw: st.DrawFn, calm: bool = False, v2: bool = False) -> RemotingCommand:
    """A send of one message or a batch as a Java producer writes it, with random
    properties, topic, queue and body, and now and then a transaction flag, a body over
    the limit or a malformed batch; `calm`: none of those, no delay and no WAIT; `v2`:
    a SEND_MESSAGE_V2."""
    code = draw(
        st.sampled_from(
            [RequestCode.SEND_MESSAGE_V2]
            if v2
            else [RequestCode.SEND_MESSAGE_V2] * 2
            + [RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE]
        )
    )
    keys = SendMessageRequestHeader.ext_keys(v2=code != RequestCode.SEND_MESSAGE)
    fields = {
        "producer_group": "PG",
        "topic": draw(
            st.sampled_from(
                ["TopicA", "TopicB"] if calm else ["TopicA"] * 4 + ["TopicB", "ReadOnly", "Fresh"]
            )
        ),
        "default_topic": "TBW102",
        "default_topic_queue_nums": "4",
        "queue_id": str(draw(st.integers(0, 1 if calm else 4))),
        "sys_flag": draw(st.sampled_from(["0"] if calm else ["0"] * 6 + ["8", "4", "1"])),
        "born_timestamp": str(draw(st.integers(0, 2**42))),
        "flag": str(draw(st.integers(-(2**31), 2**31 - 1))),
        "properties": draw(CALM_PROPERTIES if calm else PROPERTIES),
        "reconsume_times": draw(st.sampled_from(["0", "2"])),
    }
    batch = code == RequestCode.SEND_BATCH_MESSAGE
    if code == RequestCode.SEND_MESSAGE_V2 and draw(st.integers(0, 5)) == 0:
        batch = True  # the batch flag of SEND_MESSAGE_V2
        fields["batch"] = "true"
    body = draw(batch_bodies(calm) if batch else BODIES)
    return RemotingCommand(
        code,
        opaque=draw(st.integers(0, 2**31 - 1)),
        ext_fields={keys[k]: v for k, v in fields.items()},
        body=body,
        serialize_type=draw(st.sampled_from(list(SerializeType))),
    )


def written(store: MessageStore, start: int) -> bytes:
    commitlog = store.commitlog
    out = b""
    offset = start
    while offset < commitlog.max_offset():
        mapped = commitlog.queue.find_mapped_file_by_offset(offset)
        assert mapped is not None
        chunk = mapped.read(offset - mapped.file_from_offset, mapped.wrote_position)
        out += chunk[: mapped.wrote_position - (offset - mapped.file_from_offset)]
        offset = mapped.file_from_offset + mapped.wrote_position
        if mapped.is_full():
            offset = mapped.end_offset
    return out


def entries(store: MessageStore, topic: str, queue_id: int, start: int) -> list[Any]:
    """The records the queue serves from `start`, as a consumer pulls them."""
    got = store.get_message(topic, queue_id, start, 64)
    return [bytes(m) for m in got.messages] if got.messages else [got.status]


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.lists(plain_sends(), min_size=1, max_size=8),
        st.lists(plain_sends(calm=True), min_size=1, max_size=8),
    ),
    st.sampled_from(["127.0.0.1:50001", "[::1]:6000"]),
    st.data(),
)
def test_a_staged_run_stores_and_answers_as_the_reference_does(
    flush: str, requests: list[RemotingCommand], peer: str, data: st.DataObject
) -> None:
    lane, ref = sides(flush)
    CLOCK.now += data.draw(st.integers(1, 3))  # never long enough for a delay to come due
    starts = [s.store.commitlog.max_offset() for s in (lane, ref)]
    queue_starts = {
        (t, q): ref.store.get_max_offset_in_queue(t, q)
        for t in ("TopicA", "TopicB")
        for q in range(4)
    }
    conn: Any = SimpleNamespace(peer=peer)
    answers = []
    staged_before = lane.send.lane is not None and lane.send.lane.stage(
        [RequestContext(conn, r, None) for r in requests]  # type: ignore[arg-type]
    )
    batches = any(
        r.code == RequestCode.SEND_BATCH_MESSAGE or r.ext_fields.get("batch") for r in requests
    )
    event(("staged" if staged_before else "as messages") + (", with batches" if batches else ""))
    for s in (lane, ref):
        random.seed(7)
        group = [RequestContext(conn, r, None) for r in requests]  # type: ignore[arg-type]
        answers.append(reference_encode_frames([a for a in s.send(group) if a is not None]))
    assert answers[0] == answers[1]
    assert starts[0] == starts[1]
    assert written(lane.store, starts[0]) == written(ref.store, starts[1])
    for s in (lane, ref):
        assert s.store.wait_dispatched()
    for (topic, queue_id), start in queue_starts.items():
        assert entries(lane.store, topic, queue_id, start) == entries(
            ref.store, topic, queue_id, start
        )
    assert lane.metrics.sizes == ref.metrics.sizes
    assert lane.send.lane is not None
    assert lane.store.commitlog.topic_queue_table == ref.store.commitlog.topic_queue_table


DIRECT_SIDES = (side("direct-lane", True, "ASYNC_FLUSH"), side("direct-ref", False, "ASYNC_FLUSH"))


class ReadConnection:
    """What `SendProcessor.send_read` uses of the connection a read came from: its peer,
    and the answer frames it writes."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.frames: list[bytes] = []
        self.handled = 0
        self.in_flight = 0  # requests counted in flight and not yet answered

    def answer_frames(self, frames: list[bytes], handled: int) -> None:
        self.frames += frames
        self.handled += handled
        self.in_flight -= handled

    def respond_all(self, pairs: list[tuple[RemotingCommand, RemotingCommand]]) -> None:
        answers = [answer for request, answer in pairs if not request.flag & RPC_ONEWAY]
        self.answer_frames(reference_encode_frames(answers), len(pairs))


# A read of sends (as a producer pipelines them, or calm ones more often staged), and
# which of them are oneway.
READS = st.one_of(
    st.lists(plain_sends(), min_size=1, max_size=8),
    st.lists(plain_sends(calm=True), min_size=1, max_size=8),
)
ONEWAYS = st.lists(st.booleans(), min_size=8, max_size=8)


def mark_oneway(requests: list[RemotingCommand], oneway: list[bool]) -> None:
    for request, quiet in zip(requests, oneway, strict=False):
        if quiet:
            request.flag |= RPC_ONEWAY


@settings(max_examples=150, deadline=None)
@given(
    READS,
    ONEWAYS,
    st.sampled_from(["127.0.0.1:50001", "[::1]:6000"]),
)
def test_a_read_of_sends_stored_at_once_is_stored_and_answered_as_the_executor_does(
    requests: list[RemotingCommand], oneway: list[bool], peer: str
) -> None:
    """A read's sends stored and answered straight from the read (`send_read`) write the
    bytes, records and metrics the send executor's way writes, answering no oneway send;
    a read it declines leaves the store as it was, for the executor's way."""
    lane, ref = DIRECT_SIDES
    mark_oneway(requests, oneway)
    starts = [s.store.commitlog.max_offset() for s in (lane, ref)]
    conn = ReadConnection(peer)
    taken = lane.send.send_read(conn, requests, 0.0, None)
    event("stored at once" if taken else "declined")
    if not taken:
        assert lane.store.commitlog.max_offset() == starts[0] and conn.handled == 0
        random.seed(7)
        lane.send([RequestContext(conn, r, None) for r in requests])  # type: ignore[arg-type]
    random.seed(7)
    group = [RequestContext(conn, r, None) for r in requests]  # type: ignore[arg-type]
    answers = ref.send(group)
    if taken:
        expected = [a for r, a in zip(requests, answers, strict=True) if not r.flag & RPC_ONEWAY]
        assert b"".join(conn.frames) == b"".join(reference_encode_frames(expected))
        assert conn.handled == len(requests)
        codes = [r.code for r in requests]
        for code in set(codes):
            assert lane.metrics.rpc[(code, 0, False)].count >= codes.count(code)
    assert written(lane.store, starts[0]) == written(ref.store, starts[1])
    assert lane.metrics.sizes == ref.metrics.sizes
    assert lane.store.commitlog.topic_queue_table == ref.store.commitlog.topic_queue_table


def damaged(data: bytes, at: int, value: int) -> bytes:
    """`data` with the byte at `at` (within it) set to `value`."""
    at %= len(data)
    return data[:at] + bytes([value]) + data[at + 1 :]


# A read whose first sends are SEND_MESSAGE_V2s (as our clients pipeline them), then any.
FRAME_READS = st.tuples(
    st.one_of(
        st.lists(plain_sends(v2=True), min_size=1, max_size=5),
        st.lists(plain_sends(calm=True, v2=True), min_size=1, max_size=5),
    ),
    st.lists(plain_sends(), max_size=3),
).map(lambda parts: parts[0] + parts[1])


@settings(max_examples=300, deadline=None)
@given(
    FRAME_READS,
    st.one_of(st.just([False] * 8), ONEWAYS),
    st.booleans(),
    st.one_of(st.none(), st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 255))),
    st.sampled_from([0, 0, 0, 1, 7, 40]),
)
def test_sends_taken_straight_from_a_reads_frames_are_stored_and_answered_as_decoded(
    requests: list[RemotingCommand],
    oneway: list[bool],
    binary: bool,
    damage: tuple[int, int] | None,
    cut: int,
) -> None:
    """The sends at the start of a read taken straight from its bytes (`send_frames`, no
    command decoded) are stored and answered byte for byte as the executor's way stores
    and answers the same frames once decoded; the frames it leaves (another serialize
    type, a batch, a oneway send, a byte changed anywhere, an unfinished frame) are left
    whole for the decoder, and a read it takes nothing of leaves the store as it was."""
    lane, ref = DIRECT_SIDES
    mark_oneway(requests, oneway)
    if binary:  # as our clients write them (Java's write JSON)
        for request in requests:
            request.serialize_type = SerializeType.ROCKETMQ
    data = b"".join(reference_encode_frames(requests))
    if damage is not None:
        data = damaged(data, *damage)
    data = data[: len(data) - cut] if cut < len(data) else data
    starts = [s.store.commitlog.max_offset() for s in (lane, ref)]
    conn = ReadConnection("127.0.0.1:50001")
    used = lane.send.send_frames(conn, memoryview(data), 0.0, None)
    event("took all" if used == len(data) else "took some" if used else "took none")
    decoded, end, _error = decode_frames(data, 0, 1 << 24, False)
    if not used:
        assert lane.store.commitlog.max_offset() == starts[0] and not conn.frames
    else:  # whole frames, the decoder's own, each a send the lane answers
        taken = decode_frames(data[:used], 0, 1 << 24, False)[0]
        assert used <= end and decoded[: len(taken)] == taken
        assert conn.in_flight == 0
    took = len(decode_frames(data[:used], 0, 1 << 24, False)[0])
    rest = decoded[took:]
    if rest:
        random.seed(7)
        lane.send([RequestContext(conn, r, None) for r in rest])  # type: ignore[arg-type]
    random.seed(7)
    group = [RequestContext(conn, r, None) for r in decoded]  # type: ignore[arg-type]
    answers = ref.send(group)
    if used:  # none of them oneway: each answered, in order
        expected = [a for a in answers[:took] if a is not None]
        assert len(expected) == took
        assert b"".join(conn.frames[:took]) == b"".join(reference_encode_frames(expected))
    assert written(lane.store, starts[0]) == written(ref.store, starts[1])
    assert lane.store.commitlog.topic_queue_table == ref.store.commitlog.topic_queue_table


@pytest.mark.parametrize("kind", [SerializeType.ROCKETMQ, SerializeType.JSON])
def test_the_bench_producers_reads_are_taken_straight_from_their_frames(
    kind: SerializeType, tmp_path: Path
) -> None:
    """A read of the bench producer's sends (binary headers, or JSON ones as Java clients
    write them; UNIQ_KEY and KEYS, WAIT false) is stored and answered whole from its
    bytes."""
    with compiled_sender(tmp_path) as (store, send):
        store.put_message(Message("TopicA", b"first", 0, {}))  # (the commitlog's first file)
        answers = read_of_bench_sends(send, kind)
    assert [(a.code, a.opaque) for a in answers] == [(0, i) for i in range(5)]


def test_a_json_send_without_an_opaque_is_answered_with_opaque_0(tmp_path: Path) -> None:
    """A JSON header may leave out its opaque; the decoder reads it as 0, and the send taken
    straight from the read's bytes is answered so (not with whatever the answer's place
    held)."""
    request = producer_send("WAIT\x01false\x02UNIQ_KEY\x01AC11\x02", b"b" * 10).request
    request.opaque, request.serialize_type = 5, SerializeType.JSON
    frame = b"".join(reference_encode_frames([request]))
    header_len = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
    header = frame[8 : 8 + header_len].replace(b',"opaque":5', b"")
    assert len(header) == header_len - 11
    body = frame[8 + header_len :]
    data = (
        (4 + len(header) + len(body)).to_bytes(4, "big")
        + ((int(SerializeType.JSON) << 24) | len(header)).to_bytes(4, "big")
        + header
        + body
    )
    with compiled_sender(tmp_path) as (store, send):
        store.put_message(Message("TopicA", b"first", 0, {}))  # (the commitlog's first file)
        for _ in range(20):  # (answers' places reused, whatever they held)
            conn = ReadConnection("127.0.0.1:50001")
            assert send.send_frames(conn, memoryview(data * 3), 0.0, None) == 3 * len(data)  # type: ignore[arg-type]
            decoder = FrameDecoder()
            decoder.receive_data(b"".join(conn.frames))
            assert [(a.code, a.opaque) for a in decoder.next_commands(10)] == [(0, 0)] * 3


def read_of_bench_sends(send: SendProcessor, kind: SerializeType) -> list[RemotingCommand]:
    """The answers to five of the bench producer's sends in one read, taken from its bytes."""
    quiet = "WAIT\x01false\x02UNIQ_KEY\x01AC11\x02KEYS\x01k1\x02"
    requests = [producer_send(quiet, b"b" * 100).request for _ in range(5)]
    for opaque, request in enumerate(requests):
        request.opaque = opaque
        request.serialize_type = kind
    data = b"".join(reference_encode_frames(requests))
    conn = ReadConnection("127.0.0.1:50001")
    assert send.send_frames(conn, memoryview(data), 0.0, None) == len(data)  # type: ignore[arg-type]
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(conn.frames))
    return decoder.next_commands(10)


SYNC_LOOP = asyncio.new_event_loop()
SYNC_SIDES = (side("sync-lane", True, "SYNC_FLUSH"), side("sync-ref", False, "SYNC_FLUSH"))
SYNC_SIDES[0].send.later = LaterAnswers(SYNC_LOOP, deliver, 5.0)


@settings(max_examples=60, deadline=None)
@given(
    READS,
    ONEWAYS,
)
def test_under_sync_flush_a_read_stored_at_once_is_answered_once_flushed(
    requests: list[RemotingCommand], oneway: list[bool]
) -> None:
    """Under SYNC_FLUSH, a read's sends stored straight from the read are answered on the
    loop once the group commit has flushed them (at once for WAIT false), with the bytes
    the send executor's way answers and stores (there waiting for its flush in place)."""
    lane, ref = SYNC_SIDES
    mark_oneway(requests, oneway)
    starts = [s.store.commitlog.max_offset() for s in (lane, ref)]
    conn = ReadConnection("127.0.0.1:50001")

    async def read() -> bool:
        taken = lane.send.send_read(conn, requests, 0.0, SYNC_LOOP)
        for _ in range(2000):
            if not taken or conn.handled == len(requests):
                break
            await asyncio.sleep(0.001)
        return bool(taken)

    taken = SYNC_LOOP.run_until_complete(read())
    event("stored at once" if taken else "declined")
    if not taken:  # the executor's way, here waiting for its flush in place
        assert lane.store.commitlog.max_offset() == starts[0] and conn.handled == 0
        later, lane.send.later = lane.send.later, None
        try:
            random.seed(7)
            lane.send([RequestContext(conn, r, None) for r in requests])  # type: ignore[arg-type]
        finally:
            lane.send.later = later
    elif not any("WAIT\x01false" in r.ext_fields.get("i", r.ext_fields.get("properties", ""))
                 for r in requests):  # fmt: skip
        assert lane.store.commitlog.queue.flushed_where >= lane.store.commitlog.max_offset()
    random.seed(7)
    group = [RequestContext(conn, r, None) for r in requests]  # type: ignore[arg-type]
    answers = ref.send(group)
    if taken:
        expected = [a for r, a in zip(requests, answers, strict=True) if not r.flag & RPC_ONEWAY]
        assert conn.handled == len(requests)
        assert b"".join(conn.frames) == b"".join(reference_encode_frames(expected))
    assert written(lane.store, starts[0]) == written(ref.store, starts[1])
    assert lane.metrics.sizes == ref.metrics.sizes


@contextmanager
def compiled_sender(tmp_path: Path) -> Iterator[tuple[MessageStore, SendProcessor]]:
    """A store of its own and a send processor on the compiled lane, with TopicA."""
    store = MessageStore(small_config(tmp_path / "store"))
    store.start()
    try:
        send = SendProcessor(
            store,
            TopicConfigManager(str(tmp_path / "config"), "DefaultCluster", "broker-a", 8),
            SubscriptionGroupManager(str(tmp_path / "config"), True, 16),
            SendIdentity("DefaultCluster", "broker-a", PERM_READ | PERM_WRITE, True),
        )
        send.topics.table["TopicA"] = TopicConfig("TopicA", 4, 4)
        send.lane = send.compiled_lane(lane_module)
        yield store, send
    finally:
        store.shutdown()


def test_a_read_whose_store_fails_is_answered_system_error(tmp_path: Path) -> None:
    """A failure past staging (here the store raising) answers each send of the read with
    SYSTEM_ERROR and the reason, as the executor answers a processor that failed, instead
    of losing the connection."""
    with compiled_sender(tmp_path) as (store, send):

        def broken(*_args: Any) -> bool:
            raise RuntimeError("the disk went away")

        store.put_staged = broken  # type: ignore[method-assign, assignment]
        conn = ReadConnection("127.0.0.1:50001")
        requests = [producer_send("UNIQ_KEY\x01U\x02").request for _ in range(3)]
        assert send.send_read(conn, requests, 0.0, None)  # type: ignore[arg-type]
        decoder = FrameDecoder()
        decoder.receive_data(b"".join(conn.frames))
        answers = decoder.next_commands(10)
        assert conn.handled == 3
        assert [a.code for a in answers] == [1, 1, 1]
        assert all("the disk went away" in (a.remark or "") for a in answers)


def test_staged_bodies_are_summed_where_they_lie() -> None:
    """The lane sums each body with zlib-ng's own crc32, taken from the loaded `zlib_ng`
    module (no slice of a batch body per item); the records above match the reference's
    `zlib_ng.crc32` either way."""
    assert lane_module.NATIVE_CRC32


def producer_send(props: str, body: bytes = b"b" * 1024) -> RequestContext:
    """A SEND_MESSAGE_V2 to TopicA's queue 1 as a Java producer writes it."""
    fields = {"producer_group": "PG", "topic": "TopicA", "default_topic": "TBW102",
              "default_topic_queue_nums": "4", "queue_id": "1", "sys_flag": "0",
              "born_timestamp": "1", "flag": "0", "properties": props}  # fmt: skip
    keys = SendMessageRequestHeader.ext_keys(v2=True)
    ext = {keys[name]: value for name, value in fields.items()}
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=ext, body=body)
    conn: Any = SimpleNamespace(peer="127.0.0.1:50001")
    return RequestContext(conn, request, None)  # type: ignore[arg-type]


def test_the_bench_producers_runs_are_staged() -> None:
    """What a producer's pipelined sends look like (UNIQ_KEY, TAGS, WAIT false) is staged,
    and a run mixing WAIT false and true is not."""
    lane, _ = sides("ASYNC_FLUSH")
    send = producer_send
    quiet = "TAGS\x01T\x02UNIQ_KEY\x01AC11\x02WAIT\x01false\x02"
    staged = lane.send.lane.stage([send(quiet), send(quiet)])
    assert isinstance(staged, StagedSends) and len(staged) == 2
    assert list(staged.marks) == [MARK_NO_WAIT, MARK_NO_WAIT]
    assert staged.uniq_keys == ["AC11", "AC11"]
    assert lane.send.lane.stage([send(quiet), send("WAIT\x01true\x02")]) is None
    assert lane.send.lane.stage([send("DELAY\x012\x02")]) is None


def test_a_staged_put_whose_write_fails_is_refused_and_rolled_back(tmp_path: Path) -> None:
    """A write error (here: the file's descriptor turned read-only) refuses the whole run,
    takes its queue offsets back and leaves the commitlog read-only, as for messages."""
    with compiled_sender(tmp_path) as (store, send):
        [first] = send([producer_send("UNIQ_KEY\x01U\x02", b"first")])
        assert first is not None and first.code == 0
        table = dict(store.commitlog.topic_queue_table)
        end = store.commitlog.max_offset()
        mapped = store.commitlog.queue.last()
        assert mapped is not None
        writable_fd = mapped.fd
        mapped.fd = os.open(mapped.path, os.O_RDONLY)
        try:
            sends = [producer_send("UNIQ_KEY\x01U\x02", b"first") for _ in range(3)]
            assert send.lane is not None
            staged = send.lane.stage(sends)
            assert staged is not None
            answers = send(sends)
        finally:
            os.close(mapped.fd)
            mapped.fd = writable_fd
        assert [a.code for a in answers if a is not None] == [14, 14, 14]
        assert all("commitlog write failed" in (a.remark or "") for a in answers if a)
        assert store.commitlog.topic_queue_table == table
        assert store.commitlog.max_offset() == end
        [late] = send([producer_send("UNIQ_KEY\x01U\x02", b"late")])
        assert late is not None and late.code == 14 and "read-only" in (late.remark or "")


# --- a dispatch round of staged puts, in one call ---------------------------------------------
ROUND_TEMPLATES = [
    send_template("TopicA", 0, "", 0, HOSTS[0], 0),
    send_template("TopicA", 1, "", 0, HOSTS[1], 0),
    send_template("TopicB", 0, "", 0, HOSTS[0], 2),
]
ROUND_SIZES = (RECORD_MIN, 300)  # (only the entries say how long a record is)


@st.composite
def staged_rounds(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Rounds of segments of records: which template, tags code, keys; now and then a
    queue offset jumps (a gap: the queue's entries go one by one) or steps back (entries
    already present), or a segment's columns do not agree."""
    record = st.fixed_dictionaries(
        {
            "slot": st.integers(0, len(ROUND_TEMPLATES) - 1),
            "size": st.sampled_from(ROUND_SIZES),
            "tags": st.integers(-(2**40), 2**40),
            "uniq": st.sampled_from([None, "", "U1", "AC11"]),
            "keys": st.sampled_from(["", "k1", "k1 k2", " k3  "]),
            "jump": st.sampled_from([0] * 12 + [3, -2]),
        }
    )
    segment = st.fixed_dictionaries(
        {
            "records": st.lists(record, min_size=1, max_size=6),
            "damage": st.sampled_from(["none"] * 20 + ["slot", "columns"]),
        }
    )
    return draw(st.lists(st.lists(segment, min_size=1, max_size=3), min_size=1, max_size=5))


def run_rounds(store: MessageStore, rounds: list[list[dict[str, Any]]], fn: Any) -> list[Any]:
    """Each round's segments placed from where dispatch is, handed to `fn` as the reput
    service would hand them: what each round returned (or raised), with what the listeners
    were told."""
    reput = store.reput
    told: list[Any] = []
    reput.listeners.append(told.append)
    table: dict[str, int] = {}
    stamp = 1_700_000_000_000
    out: list[Any] = []
    for round_ in rounds:
        segments = []
        start = reput.reput_from_offset
        for spec in round_:
            records = spec["records"]
            stamp += 1000
            phys, queue_offsets = array("q"), array("q")
            pos = start
            for r in records:
                key = ROUND_TEMPLATES[r["slot"]].queue_key
                table[key] = max(table.get(key, 0) + r["jump"], 0)
                queue_offsets.append(table[key])
                table[key] += 1
                phys.append(pos)
                pos += r["size"]
            staged = StagedSends(
                bytearray(pos - start),
                ROUND_TEMPLATES,
                array("i", [r["slot"] for r in records]),
                array("i", [r["size"] for r in records]),
                tags=array("q", [r["tags"] for r in records]),
                uniq_keys=[r["uniq"] for r in records],
                keys=[r["keys"] for r in records],
                phys=phys,
                queue_offsets=queue_offsets,
                store_timestamp=stamp,
            )
            if spec["damage"] == "slot":
                staged.slots[0] = len(ROUND_TEMPLATES)
            elif spec["damage"] == "columns":
                staged.keys.append("")
            segments.append(WrittenSegment(start, pos, [], [], stamp, False, staged, done=True))
            start = pos
        with reput._round_lock:
            result = outcome(fn, reput, segments)
        out.append((result, told[:]))
        told.clear()
        if isinstance(result, type):  # refused whole: the next round starts past it
            reput.reput_from_offset = start
    return out


def queue_files(store: MessageStore) -> dict[str, bytes]:
    root = Path(store.config.store_path_root_dir) / "consumequeue"
    return {
        str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("0*")) if f.is_file()
    }


def queue_tails(store: MessageStore) -> dict[tuple[str, int, int], tuple[int, Any, bool]]:
    """Each consume-queue file's write position, the newest bytes it keeps for readers, and
    whether its appends go through a mapping (until it is full)."""
    return {
        (cq.topic, cq.queue_id, f.file_from_offset): (
            f.wrote_position,
            f._recent,
            bool(f._append_at),
        )
        for cq in store.consume_queues
        for f in cq.queue.files
    }


@settings(max_examples=120, deadline=None)
@given(staged_rounds())
def test_both_dispatch_a_round_of_staged_puts_alike(
    tmp_path_factory: pytest.TempPathFactory, rounds: list[list[dict[str, Any]]]
) -> None:
    """The compiled round against the reference's (the columns and `finish_round`): the
    same consume-queue files byte for byte, index keys, arrivals, counts and positions,
    whether the entries continue their queues, leave gaps, repeat, or do not add up."""
    stores = []
    for name in ("compiled", "reference"):
        root = tmp_path_factory.mktemp(name)
        store = MessageStore(small_config(root, mapped_file_size_consume_queue=20 * 8))
        store.start()
        stores.append(store)
    try:
        ours = run_rounds(stores[0], rounds, compiled.dispatch_staged)
        theirs = run_rounds(stores[1], rounds, reference_dispatch_staged)
        event(f"fell back: {any(r['jump'] for rs in rounds for s in rs for r in s['records'])}")
        assert ours == theirs
        assert queue_files(stores[0]) == queue_files(stores[1])
        assert queue_tails(stores[0]) == queue_tails(stores[1])
        a, b = stores[0].reput, stores[1].reput
        assert (a.dispatched_entries, a.last_store_timestamp, a.reput_from_offset) == (
            b.dispatched_entries,
            b.last_store_timestamp,
            b.reput_from_offset,
        )
        our_index, their_index = stores[0].index, stores[1].index
        assert our_index is not None and their_index is not None
        for key in ("U1", "AC11", "k1", "k2", "k3"):
            for topic in ("TopicA", "TopicB"):
                assert our_index.query_offset(topic, key, 64, 0, 2**62) == (
                    their_index.query_offset(topic, key, 64, 0, 2**62)
                )
    finally:
        for store in stores:
            store.shutdown()
