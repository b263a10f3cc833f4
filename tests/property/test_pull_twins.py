"""The compiled pull lane (`broker.processors._pull`) against the reference
`PullProcessor.answer`: random pulls as consumers write them and as they should not (every
offset of queues that roll over small commitlog files, tag subscriptions, limits, commit and
suspend flags, unknown topics and groups, a group that may not consume, a topic that may
not be read, SQL filters, oneway requests, msgpack headers, opaques out of range). Where the
lane answers, its frame is the reference's answer encoded, byte for byte; where it parks, the
reference parks the same pull; where it declines, or finds the records out of the page
cache (False: the pull is a pull thread's), it changed nothing. And the store's
`read_hot` twins give the same answers."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from rmqpy.broker.clients import ClientManager, Subscription
from rmqpy.broker.context import RequestContext
from rmqpy.broker.groups import SubscriptionGroupConfig, SubscriptionGroupManager
from rmqpy.broker.long_polling import ParkedPull, PullRequestHoldService
from rmqpy.broker.metrics import BrokerMetrics
from rmqpy.broker.offsets import ConsumerOffsetManager
from rmqpy.broker.processors.pull import PullProcessor
from rmqpy.broker.topics import TopicConfig, TopicConfigManager
from rmqpy.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.frame import decode_frames, reference_encode_frames
from rmqpy.remoting.headers import HeaderError
from rmqpy.remoting.headers.pull import PullMessageRequestHeader
from rmqpy.remoting.wire import MAX_FRAME_LENGTH, RPC_ONEWAY
from rmqpy.store import hot_read
from rmqpy.store.message import Message, tags_code
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config
from tests.store.page_cache import drop_pages, store_tells_pages_apart

lane_module = pytest.importorskip(
    "rmqpy.broker.processors._pull", reason="the compiled core is not built"
)
hot_module = pytest.importorskip("rmqpy.store._hot_read", reason="the compiled core is not built")
hold_module = pytest.importorskip(
    "rmqpy.broker._long_polling", reason="the compiled core is not built"
)

ROOT = Path(tempfile.mkdtemp(prefix="pull-twins-"))
TOPICS = TopicConfigManager(str(ROOT / "config"), "DefaultCluster", "broker-a", 8)
TOPICS.table["TopicA"] = TopicConfig("TopicA", 4, 4)
TOPICS.table["WriteOnly"] = TopicConfig("WriteOnly", 4, 4, PERM_WRITE)
GROUPS = SubscriptionGroupManager(str(ROOT / "config"), True, 16)
GROUPS.table["Disabled"] = SubscriptionGroupConfig("Disabled", consumeEnable=False)
TAGS = ["TagA", "TagB", "TagC"]
SIZES = [10, 300, 2000, 5000]  # records of up to ~5 KiB in 16 KiB commitlog files: many rolls
COUNTS = {0: 60, 1: 7, 2: 1}  # queue 3 stays empty


def fill_store() -> MessageStore:
    store = MessageStore(small_config(ROOT / "store", warm_commitlog_files=False))
    store.start()
    n = 0
    for queue, count in COUNTS.items():
        for i in range(count):
            props = {"TAGS": TAGS[i % 3], "KEYS": f"k{n}", "UNIQ_KEY": f"UNIQ{n:08d}"}
            body = b"x" * SIZES[(i * 7 + queue) % len(SIZES)]
            store.put_message(Message("TopicA", body, queue, props, born_timestamp=n))
            n += 1
    assert store.wait_dispatched()
    return store


STORE = fill_store()
WOKEN: list[ParkedPull] = []
HOLD = PullRequestHoldService(STORE.get_max_offset_in_queue, WOKEN.extend)


def processor(compiled: bool, permission: int = PERM_READ | PERM_WRITE) -> PullProcessor:
    made = PullProcessor(
        STORE,
        TOPICS,
        GROUPS,
        ClientManager(asyncio.new_event_loop(), 120_000),
        ConsumerOffsetManager(str(ROOT / "config")),
        HOLD,
        permission,
        long_polling_enable=True,
        short_polling_ms=1000,
        is_master=True,
    )
    made.lane = lane_module.PullLane(made, ParkedPull) if compiled else None
    return made


LANE, REFERENCE = processor(True), processor(False)
CONN = SimpleNamespace(peer="127.0.0.1:40000")

PLAIN = {
    "consumerGroup": "G1",
    "topic": "TopicA",
    "queueId": "0",
    "queueOffset": "0",
    "maxMsgNums": "32",
    "sysFlag": "4",
    "commitOffset": "-1",
    "suspendTimeoutMillis": "0",
    "subscription": "*",
    "subVersion": "0",
    "expressionType": "TAG",
}
CHANGES: dict[str, Any] = {
    "consumerGroup": st.sampled_from(["G1", "G2", "Disabled"]),
    "topic": st.sampled_from(["TopicA"] * 6 + ["WriteOnly", "NoSuchTopic"]),
    "queueId": st.sampled_from(["3", "4", "-1", "x"]),
    "queueOffset": st.integers(-2, 64).map(str),
    "maxMsgNums": st.sampled_from(["0", "1", "2", "3", "32", "1000"]),
    "commitOffset": st.sampled_from(["-1", "0", "5"]),
    "suspendTimeoutMillis": st.sampled_from(["0", "20000"]),
    "subscription": st.sampled_from(["*", "TagA", "TagB || TagC", "TagZ", "", None]),
    "expressionType": st.sampled_from(["TAG", "TAG", None, "", "SQL92"]),
    "maxMsgBytes": st.sampled_from([None, "1", "400", "6000", "9000000"]),
}


SERIALIZE_TYPES = [SerializeType.ROCKETMQ] * 3 + [SerializeType.JSON] * 3 + [SerializeType.MSGPACK]


@st.composite
def pulls(draw: st.DrawFn) -> RemotingCommand:
    queue = draw(st.sampled_from(sorted(COUNTS)))
    end = COUNTS[queue]  # where a consumer keeping up pulls from: its end, or just before
    offset = draw(st.sampled_from([0, end - 1, end, end, end + 1]))
    flags = draw(st.sampled_from(["0", "1", "2", "3", "4", "5", "6", "7"]))
    ext = {**PLAIN, "queueId": str(queue), "queueOffset": str(offset), "sysFlag": flags}
    for key in draw(st.sets(st.sampled_from(sorted(CHANGES)), max_size=5)):
        value = draw(CHANGES[key])
        if value is None:
            ext.pop(key, None)
        else:
            ext[key] = value
    return RemotingCommand(
        draw(st.sampled_from([RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE])),
        opaque=draw(st.sampled_from([7, 0, -5, 2**31 - 1, 2**31])),
        flag=draw(st.sampled_from([0] * 6 + [RPC_ONEWAY])),
        ext_fields=ext,
        serialize_type=draw(st.sampled_from(SERIALIZE_TYPES)),
    )


def parked() -> list[ParkedPull]:
    """The pulls parked or woken since the last call, taken out of the hold."""
    HOLD.wake_all()
    taken = list(WOKEN)
    WOKEN.clear()
    return taken


def context(request: RemotingCommand) -> RequestContext:
    return RequestContext(CONN, request, None, 0.0)  # type: ignore[arg-type]


@settings(max_examples=600, deadline=None)
@given(pulls())
def test_the_lane_answers_as_the_reference_does(request: RemotingCommand) -> None:
    try:
        h = PullMessageRequestHeader.from_ext(request.ext_fields)
    except HeaderError:
        return  # never reaches either: `pull_read` hands the read to the executor's way
    assert LANE.lane is not None
    ours = LANE.lane.answer(context(request), h)
    our_parks = parked()
    theirs = REFERENCE.answer(context(request), h)
    their_parks = parked()
    if ours is lane_module.DECLINED or ours is False:  # the reference's, or a pull thread's
        event("declined" if ours is lane_module.DECLINED else "out of the page cache")
        assert our_parks == []
        return
    assert [(p.topic, p.queue_id, p.offset, p.subscription, p.header) for p in our_parks] == [
        (p.topic, p.queue_id, p.offset, p.subscription, p.header) for p in their_parks
    ]
    if ours is None:
        event("parked")
        assert theirs is None
        return
    assert theirs is not None
    event(f"answered {theirs.code}")
    assert isinstance(ours, tuple)
    head, body = ours
    assert head + body == b"".join(reference_encode_frames([theirs]))


class Written:
    """The answers a read's pulls had written on their connection, as `answer_frames` got
    them; `hung_up`, a connection its consumer has closed."""

    peer = CONN.peer

    def __init__(self, hung_up: bool = False) -> None:
        self.frames: list[bytes] = []
        self.handled = 0
        self.closed = SimpleNamespace(done=lambda: hung_up)

    def answer_frames(self, frames: list[bytes], handled: int) -> None:
        self.frames += frames
        self.handled += handled


def waiting(queue: int) -> RemotingCommand:
    """A pull at the end of `queue` that may wait there."""
    ext = {**PLAIN, "queueId": str(queue), "queueOffset": str(COUNTS[queue]), "sysFlag": "2"}
    return RemotingCommand(RequestCode.PULL_MESSAGE, 7, ext_fields=ext)


@settings(max_examples=400, deadline=None)
@given(st.lists(pulls(), min_size=1, max_size=4), st.sampled_from(["", " ", "+"]))
@example([waiting(0), waiting(1), waiting(0)], "")  # parked in one order, woken queue by queue
def test_a_read_of_pulls_is_served_as_each_pull_is(
    requests: list[RemotingCommand], blemish: str
) -> None:
    """`answer_read` serves a read's pulls from their header fields as `answer` serves each
    with its header parsed: the same frames, the same parks, the same pulls left to the pull
    threads; one whose header does not parse, or whose numbers are not written plainly (a
    `blemish` before one), it declines untouched."""
    if blemish:
        key = ["queueOffset", "commitOffset", "maxMsgNums"][len(requests) % 3]
        requests[0].ext_fields[key] = blemish + requests[0].ext_fields[key]
    assert LANE.lane is not None
    conn = Written()
    cold, declined = LANE.lane.answer_read(conn, requests, 0.0, None)  # type: ignore[arg-type]
    our_parks = parked()
    expected = Written()
    their_parks: list[ParkedPull] = []
    their_cold, their_declined = [], []
    for n, request in enumerate(requests):
        if blemish and n == 0:
            their_declined.append(request)  # the reference's to read, however it reads it
            continue
        try:
            h = PullMessageRequestHeader.from_ext(request.ext_fields)
        except HeaderError:
            their_declined.append(request)
            continue
        out = LANE.lane.answer(context(request), h)
        their_parks += parked()
        if isinstance(out, tuple):
            expected.answer_frames([out[0], out[1]] if out[1] else [out[0]], 1)
        elif out is False:
            their_cold.append(request)
        elif out is not None:
            their_declined.append(request)
    event(f"{len(their_declined)} declined, {len(their_parks)} parked, {expected.handled} served")
    assert [c.request for c in cold] == their_cold
    assert [c.request for c in declined] == their_declined
    assert (conn.frames, conn.handled) == (expected.frames, expected.handled)
    # the hold wakes its pulls queue by queue: compare them in the order of their requests
    place = {id(request): n for n, request in enumerate(requests)}
    assert [
        (p.ctx.request, p.offset, p.subscription, p.header)
        for p in sorted(our_parks, key=lambda p: place[id(p.ctx.request)])
    ] == [(p.ctx.request, p.offset, p.subscription, p.header) for p in their_parks]
    assert all(ctx.conn is conn and not ctx.resumed for ctx in cold + declined)  # type: ignore[comparison-overlap]


class Taken(Written):
    """`Written`, counting the requests taken straight from a read's frames as in flight."""

    max_in_flight = 1000

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0

    def taken(self, requests: int) -> None:
        self.in_flight += requests


def metered() -> PullProcessor:
    """A lane of its own, with metrics."""
    made = processor(False)
    made.metrics = BrokerMetrics()
    made.lane = lane_module.PullLane(made, ParkedPull)
    return made


FRAMES_WAY, DECODED_WAY = metered(), metered()


@st.composite
def frame_pulls(draw: st.DrawFn) -> RemotingCommand:
    """`pulls`, mostly as clients send them: PULL_MESSAGE with binary headers (ours, once
    they know the broker) or JSON ones (Java's), not oneway."""
    request = draw(pulls())
    if draw(st.integers(0, 3)):
        request.serialize_type = draw(st.sampled_from(SERIALIZE_TYPES[:6]))
        request.code = RequestCode.PULL_MESSAGE
        request.flag = 0
        if draw(st.booleans()):  # none of the changes: a pull the lane serves, or parks
            kept = ("queueId", "queueOffset", "sysFlag")
            request.ext_fields = {**PLAIN, **{k: request.ext_fields[k] for k in kept}}
    return request


def count_tables(metrics: BrokerMetrics) -> tuple[dict[Any, Any], ...]:
    """The tables a pull is counted in: requests (latency histograms), then pulls,
    messages and bytes out."""
    return metrics.rpc, metrics.pulled, metrics.messages_out, metrics.bytes_out


def counted(metrics: BrokerMetrics) -> tuple[Any, ...]:
    """What the metrics counted, but the latencies' sums (times differ between runs)."""
    rpc, *rest = count_tables(metrics)
    return {key: hist.counts for key, hist in rpc.items()}, *rest


def forget_counts(*metrics: BrokerMetrics) -> None:
    """Each example's counts on their own (one that differed would make every later one
    differ too)."""
    for m in metrics:
        for table in count_tables(m):
            table.clear()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(frame_pulls(), min_size=1, max_size=5),
    st.integers(1, 5),
    st.one_of(st.none(), st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 255))),
    st.sampled_from([0, 0, 0, 1, 9, 40]),
)
def test_pulls_taken_straight_from_a_reads_frames_are_served_as_decoded(
    requests: list[RemotingCommand], room: int, damage: tuple[int, int] | None, cut: int
) -> None:
    """`answer_frames` takes the whole frames at the start of a read that are PULL_MESSAGE
    requests (binary or JSON headers) the lane serves, at most `room` of them, and serves
    them as `answer_read` serves the same frames decoded: the same answers written
    together, the same parks and the same pulls for the pull threads (their requests
    decoded from their frames), the same metrics, each counted as taken; in a read as
    clients write it, the frame it stops at is one `answer_read` would not serve either
    (or not a pull it reads). A changed byte or a cut tail: it takes nothing the decoder
    would refuse."""
    requests = [r for r in requests if -(2**31) <= r.opaque < 2**31]  # (no frame holds more)
    if not requests:
        return
    data = b"".join(b"".join(reference_encode_frames([r])) for r in requests)
    if damage is not None:
        at = damage[0] % len(data)
        data = data[:at] + bytes([damage[1]]) + data[at + 1 :]
    data = data[: max(len(data) - cut, 0)]
    assert FRAMES_WAY.lane is not None and DECODED_WAY.lane is not None
    forget_counts(FRAMES_WAY.metrics, DECODED_WAY.metrics)  # type: ignore[arg-type]
    conn = Taken()
    used, our_cold = FRAMES_WAY.lane.answer_frames(
        conn,  # type: ignore[arg-type]
        memoryview(data),
        MAX_FRAME_LENGTH,
        0.0,
        None,
        room,
    )
    our_parks = parked()
    taken, end, error = decode_frames(data[:used], 0, MAX_FRAME_LENGTH, False)
    assert (end, error) == (used, None)  # whole frames, each one the decoder takes
    assert len(taken) <= room
    assert conn.in_flight == len(taken)
    expected = Taken()
    cold, declined = DECODED_WAY.lane.answer_read(expected, taken, 0.0, None)  # type: ignore[arg-type]
    their_parks = parked()
    event(f"{len(taken)} taken of {len(requests)}, {len(their_parks)} parked")
    assert declined == []
    assert [c.request for c in our_cold] == [c.request for c in cold]
    assert all(c.conn is conn and not c.resumed for c in our_cold)  # type: ignore[comparison-overlap]
    assert (conn.frames, conn.handled) == (expected.frames, expected.handled)
    assert counted(FRAMES_WAY.metrics) == counted(DECODED_WAY.metrics)  # type: ignore[arg-type]
    place = {id(p.ctx.request): n for n, p in enumerate(our_parks)}
    assert [
        (p.ctx.request, p.ctx.conn is conn, p.offset, p.subscription, p.header)  # type: ignore[comparison-overlap]
        for p in sorted(our_parks, key=lambda p: place[id(p.ctx.request)])
    ] == [(p.ctx.request, True, p.offset, p.subscription, p.header) for p in their_parks]
    rest, _, _ = decode_frames(data[used:], 0, MAX_FRAME_LENGTH, False)
    if rest and len(taken) < room and damage is None:  # (a changed byte may leave a header
        # the decoder still reads, of a shape the lane leaves to it: JSON spaced otherwise)
        first = rest[0]
        if (
            first.serialize_type in (SerializeType.ROCKETMQ, SerializeType.JSON)
            and first.code == RequestCode.PULL_MESSAGE
            and not first.flag & RPC_ONEWAY
        ):
            probe = Taken()
            left_cold, left_declined = DECODED_WAY.lane.answer_read(probe, [first], 0.0, None)  # type: ignore[arg-type]
            assert parked() == [] and probe.handled == 0
            assert left_cold or left_declined


def test_a_consumers_pulls_are_taken_straight_from_their_frames() -> None:
    """The pulls a consumer keeping up sends (binary headers as ours, JSON as Java's, commit
    and suspend flags, a subscription) are all served from their frames: found ones
    answered, those at the queue's end parked."""
    assert FRAMES_WAY.lane is not None
    requests = []
    kinds = [SerializeType.ROCKETMQ, SerializeType.JSON, SerializeType.JSON, SerializeType.ROCKETMQ]
    for (queue, offset), kind in zip(((0, 0), (0, 59), (1, 7), (2, 0)), kinds, strict=True):
        ext = {**PLAIN, "queueId": str(queue), "queueOffset": str(offset), "sysFlag": "7"}
        ext["suspendTimeoutMillis"] = "20000"
        requests.append(RemotingCommand(RequestCode.PULL_MESSAGE, 100 + queue, ext_fields=ext,
                                        serialize_type=kind))  # fmt: skip
    data = b"".join(b"".join(reference_encode_frames([r])) for r in requests)
    conn = Taken()
    used, cold = FRAMES_WAY.lane.answer_frames(conn, data, MAX_FRAME_LENGTH, 0.0, None, 64)  # type: ignore[arg-type]
    assert (used, cold) == (len(data), [])
    assert (conn.in_flight, conn.handled) == (4, 3)
    assert [(p.queue_id, p.offset) for p in parked()] == [(1, 7)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(pulls(), st.booleans()), min_size=1, max_size=4))
def test_woken_pulls_are_answered_as_each_pull_is(
    woken: list[tuple[RemotingCommand, bool]],
) -> None:
    """`answer_parked` runs woken pulls again as `answer` runs each: the same frames, written
    together per connection, the same pulls left to the pull threads or declined; a pull whose
    consumer hung up while it waited is dropped; each one's hold ends at the given time."""
    assert LANE.lane is not None
    ours, theirs = (Written(), Written(hung_up=True)), (Written(), Written(hung_up=True))
    our_pulls: list[ParkedPull] = []
    their_cold, their_declined = [], []
    for request, hung_up in woken:
        try:
            h = PullMessageRequestHeader.from_ext(request.ext_fields)
        except HeaderError:
            continue  # never parked: `pull_read` leaves it to the pull threads
        sub = Subscription.parse(h.topic, h.subscription or "*", h.sub_version)
        for conn in (ours[hung_up], theirs[hung_up]):
            ctx = RequestContext(conn, request, None, 1.0, resumed=True)  # type: ignore[arg-type]
            pull = ParkedPull(ctx, h.topic, h.queue_id, h.queue_offset, sub, 0.0, h)
            if conn is ours[hung_up]:
                our_pulls.append(pull)
                continue
            if hung_up:
                continue
            out = LANE.lane.answer(ctx, h)
            if isinstance(out, tuple):
                conn.answer_frames([out[0], out[1]] if out[1] else [out[0]], 1)
            elif out is False:
                their_cold.append(request)
            elif out is not None:
                their_declined.append((request, h))
    cold, declined = LANE.lane.answer_parked(our_pulls, 3.0)
    event(f"{len(their_declined)} declined, {theirs[0].handled} answered")
    assert parked() == []  # a woken pull never parks again
    assert [pull.ctx.request for pull in cold] == their_cold
    assert [(ctx.request, h) for ctx, h in declined] == their_declined
    assert (ours[0].frames, ours[0].handled) == (theirs[0].frames, theirs[0].handled)
    assert (ours[1].frames, ours[1].handled) == ([], 0)
    assert all((p.ctx.held_s, p.ctx.received_s) == (2.0, 3.0) for p in our_pulls)


def frame_of(request: RemotingCommand) -> bytes:
    return b"".join(reference_encode_frames([request]))


def is_frame_pull(request: RemotingCommand) -> bool:
    """A pull the lane may take straight from its frame, as clients send them."""
    return (
        request.code == RequestCode.PULL_MESSAGE
        and request.serialize_type in (SerializeType.ROCKETMQ, SerializeType.JSON)
        and not request.flag & RPC_ONEWAY
        and -(2**31) <= request.opaque < 2**31
    )


# A lane that parks the pulls it takes from their frames as those frames (as the broker's
# does), and one that parks them decoded, with their headers: the same pulls must come of
# both.
AS_FRAMES, AS_REQUESTS = metered(), metered()
AS_FRAMES.lane = lane_module.PullLane(AS_FRAMES, hold_module.ParkedPull)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(frame_pulls(), st.booleans()), min_size=1, max_size=4))
def test_pulls_parked_as_their_frames_are_answered_as_parked_requests(
    woken: list[tuple[RemotingCommand, bool]],
) -> None:
    """A pull the lane parks as its frame is served again from it as a pull parked with its
    request and header is: the same frames written, the same pulls left to the pull threads
    or declined (their requests, contexts held until the wake and headers made then), the
    same metrics; one whose consumer hung up is dropped."""
    assert AS_FRAMES.lane is not None and AS_REQUESTS.lane is not None
    forget_counts(AS_FRAMES.metrics, AS_REQUESTS.metrics)  # type: ignore[arg-type]
    ours, theirs = (Written(), Written(hung_up=True)), (Written(), Written(hung_up=True))
    as_frames: list[Any] = []
    as_requests: list[ParkedPull] = []
    for request, hung_up in woken:
        if not is_frame_pull(request):
            continue
        try:
            h = PullMessageRequestHeader.from_ext(request.ext_fields)
        except HeaderError:
            continue  # the lane declines it: never parked
        sub = Subscription.parse(h.topic, h.subscription or "*", h.sub_version)
        as_frames.append(
            hold_module.ParkedPull(
                None, h.topic, h.queue_id, h.queue_offset, sub, 0.0, None,
                frame_of(request), ours[hung_up], 1.0, None,
            )
        )  # fmt: skip
        ctx = RequestContext(theirs[hung_up], request, None, 1.0, resumed=True)  # type: ignore[arg-type]
        as_requests.append(ParkedPull(ctx, h.topic, h.queue_id, h.queue_offset, sub, 0.0, h))
    cold, declined = AS_FRAMES.lane.answer_parked(as_frames, 3.0)
    their_cold, their_declined = AS_REQUESTS.lane.answer_parked(as_requests, 3.0)
    event(f"{len(declined)} declined, {ours[0].handled} answered, {len(cold)} cold")
    assert parked() == []
    assert (ours[0].frames, ours[0].handled) == (theirs[0].frames, theirs[0].handled)
    assert (ours[1].frames, ours[1].handled) == ([], 0)
    assert [(p.ctx.request, p.header) for p in cold] == [
        (p.ctx.request, p.header) for p in their_cold
    ]
    assert [(ctx.request, h) for ctx, h in declined] == [
        (ctx.request, h) for ctx, h in their_declined
    ]
    for ctx in [p.ctx for p in cold] + [ctx for ctx, _ in declined]:
        assert (ctx.held_s, ctx.received_s, ctx.resumed) == (2.0, 3.0, True)
        assert ctx.conn is ours[0]  # type: ignore[comparison-overlap]
    assert counted(AS_FRAMES.metrics) == counted(AS_REQUESTS.metrics)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.lists(frame_pulls(), min_size=1, max_size=5))
def test_a_read_of_pulls_parks_them_as_frames_where_it_would_park_them_decoded(
    requests: list[RemotingCommand],
) -> None:
    """The pulls of a read the lane parks as their frames are those it parks decoded (the
    same offsets and subscriptions; their frames those of the requests), with the same
    answers and metrics for the others; woken at once (their queues unchanged), each is
    answered as the decoded one is."""
    requests = [r for r in requests if is_frame_pull(r)]
    if not requests:
        return
    data = b"".join(frame_of(r) for r in requests)
    assert AS_FRAMES.lane is not None and AS_REQUESTS.lane is not None
    forget_counts(AS_FRAMES.metrics, AS_REQUESTS.metrics)  # type: ignore[arg-type]
    ours, theirs = Taken(), Taken()
    read = memoryview(data)
    used, cold = AS_FRAMES.lane.answer_frames(ours, read, MAX_FRAME_LENGTH, 1.0, None, 64)  # type: ignore[arg-type]
    our_parks = parked()
    lane = AS_REQUESTS.lane
    their_used, their_cold = lane.answer_frames(theirs, read, MAX_FRAME_LENGTH, 1.0, None, 64)  # type: ignore[arg-type]
    their_parks = parked()
    event(f"{len(our_parks)} parked of {len(requests)}")
    assert (used, ours.in_flight) == (their_used, theirs.in_flight)
    assert [c.request for c in cold] == [c.request for c in their_cold]
    assert (ours.frames, ours.handled) == (theirs.frames, theirs.handled)
    assert all(p.ctx is None and p.header is None for p in our_parks)
    by_frame = sorted(our_parks, key=lambda p: data.index(p.frame or b""))
    by_request = sorted(their_parks, key=lambda p: data.index(frame_of(p.ctx.request)))
    expected: list[tuple[Any, ...]] = [
        (frame_of(p.ctx.request), p.offset, p.subscription, ours, 1.0) for p in by_request
    ]
    assert [(p.frame, p.offset, p.subscription, p.conn, p.received_s) for p in by_frame] == expected
    assert counted(AS_FRAMES.metrics) == counted(AS_REQUESTS.metrics)  # type: ignore[arg-type]
    AS_FRAMES.lane.answer_parked(by_frame, 3.0)
    AS_REQUESTS.lane.answer_parked(by_request, 3.0)
    assert (ours.frames, ours.handled) == (theirs.frames, theirs.handled)
    assert counted(AS_FRAMES.metrics) == counted(AS_REQUESTS.metrics)  # type: ignore[arg-type]


def test_the_common_pulls_are_answered_by_the_lane() -> None:
    """A consumer keeping up never reaches the reference: the lane is what runs."""
    assert LANE.lane is not None
    for serialize in (SerializeType.ROCKETMQ, SerializeType.JSON):
        for offset, flags in ((0, "5"), (59, "5"), (60, "7")):
            ext = {**PLAIN, "queueOffset": str(offset), "sysFlag": flags, "commitOffset": "3"}
            ext["suspendTimeoutMillis"] = "20000"
            request = RemotingCommand(RequestCode.PULL_MESSAGE, 9, ext_fields=ext,
                                      serialize_type=serialize)  # fmt: skip
            ours = LANE.lane.answer(context(request), PullMessageRequestHeader.from_ext(ext))
            assert ours is not lane_module.DECLINED, (serialize, offset)
            conn = Written()
            cold, declined = LANE.lane.answer_read(conn, [request], 0.0, None)  # type: ignore[arg-type]
            assert (cold, declined) == ([], []), (serialize, offset)
            assert conn.handled == (offset < 60)
    # the pulls at the queue's end parked, once by each way
    assert [p.offset for p in parked()] == [60, 60, 60, 60]


def read_hot_cases() -> st.SearchStrategy[tuple[int, int, int, int, int, frozenset[int] | None]]:
    return st.tuples(
        st.sampled_from(sorted(COUNTS)),  # (queue 3 has no consume queue)
        st.integers(-1, 64),
        st.integers(1, 900),
        st.integers(1, 40),
        st.integers(1, 20_000),
        st.one_of(st.none(), st.frozensets(st.sampled_from([tags_code(t) for t in TAGS]))),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(read_hot_cases(), st.booleans())
def test_both_read_hot_the_same(
    case: tuple[int, int, int, int, int, frozenset[int] | None], memory_only: bool
) -> None:
    queue, offset, entries, count, size, codes = case
    cq = STORE.consume_queues.find("TopicA", queue)
    assert cq is not None
    args = (cq, STORE.commitlog, offset, entries, codes, count, size, memory_only)
    ours, theirs = hot_module.read_hot(*args), hot_read.reference_read_hot(*args)
    event(f"status {theirs[0]}" if theirs else f"{theirs}")
    assert ours == theirs


def test_read_hot_leaves_records_out_of_the_page_cache_to_the_full_way(tmp_path: Path) -> None:
    """On the event loop (`memory_only`), a read that would wait for the disk is left to the
    pull threads; off it, the same read is made."""
    store_tells_pages_apart()
    store = MessageStore(small_config(tmp_path / "store", warm_commitlog_files=False))
    store.start()
    try:
        for _ in range(40):
            store.put_message(Message("TopicA", b"x" * 100, 0, {"TAGS": "TagA"}))
        assert store.wait_dispatched()
        store.commitlog.queue.flush(0)
        first = store.commitlog.queue.files[0].fd
        mapping = store.commitlog.queue.files[0].mapping  # where a read that was made went
        cq = store.consume_queues.find("TopicA", 0)
        assert cq is not None
        written = store.commitlog.max_offset()

        for read_hot in (hot_module.read_hot, hot_read.reference_read_hot):
            # Clean pages dropped, the store's mapping first letting go of any that a read
            # mapped in.
            if not drop_pages([first], first, written, mappings=[mapping]):  # every page
                pytest.skip("this filesystem keeps the pages (tmpfs)")
            assert read_hot(cq, store.commitlog, 0, 32, None, 32, 1 << 20, True) is False
        found = hot_read.reference_read_hot(cq, store.commitlog, 0, 32, None, 32, 1 << 20, False)
        assert found and len(found[5]) == 32
    finally:
        store.shutdown()


def test_a_pull_parked_as_its_frame_whose_records_left_the_page_cache_goes_to_a_pull_thread(
    tmp_path: Path,
) -> None:
    """Woken once its records were written and have left the page cache, a pull parked as
    its frame is handed to the pull threads as one parked decoded is: its request decoded
    from the frame, its header parsed, its context held from its first read to the wake;
    nothing is answered on the loop."""
    store_tells_pages_apart()
    store = MessageStore(small_config(tmp_path / "store", warm_commitlog_files=False))
    store.start()
    woken: list[Any] = []
    hold = PullRequestHoldService(store.get_max_offset_in_queue, woken.extend)
    loop = asyncio.new_event_loop()
    made = PullProcessor(
        store,
        TOPICS,
        GROUPS,
        ClientManager(loop, 120_000),
        ConsumerOffsetManager(str(tmp_path / "config")),
        hold,
        PERM_READ | PERM_WRITE,
        long_polling_enable=True,
        short_polling_ms=1000,
        is_master=True,
    )
    lane = lane_module.PullLane(made, hold_module.ParkedPull)
    try:
        for _ in range(40):
            store.put_message(Message("TopicA", b"x" * 100, 0, {"TAGS": "TagA"}))
        assert store.wait_dispatched()
        ext = {**PLAIN, "queueOffset": "40", "sysFlag": "2", "suspendTimeoutMillis": "20000"}
        request = RemotingCommand(RequestCode.PULL_MESSAGE, 9, ext_fields=ext)
        conn = Taken()
        frame = frame_of(request)
        taken = lane.answer_frames(conn, memoryview(frame), MAX_FRAME_LENGTH, 1.0, None, 64)
        assert taken == (len(frame), [])  # parked
        hold.wake_all()
        assert [p.frame for p in woken] == [frame]
        for _ in range(40):
            store.put_message(Message("TopicA", b"y" * 100, 0, {"TAGS": "TagA"}))
        assert store.wait_dispatched()
        store.commitlog.queue.flush(0)
        first = store.commitlog.queue.files[0]
        if not drop_pages(
            [first.fd], first.fd, store.commitlog.max_offset(), mappings=[first.mapping]
        ):
            pytest.skip("this filesystem keeps the pages (tmpfs)")
        cold, declined = lane.answer_parked(woken, 3.0)
        assert (cold, declined) == (woken, [])
        ctx = cold[0].ctx
        assert ctx.request == decode_frames(frame, 0, MAX_FRAME_LENGTH, False)[0][0]
        assert cold[0].header == PullMessageRequestHeader.from_ext(ext)
        assert (ctx.conn, ctx.held_s, ctx.received_s, ctx.resumed) == (conn, 2.0, 3.0, True)
        assert (conn.frames, conn.handled, conn.in_flight) == ([], 0, 1)
    finally:
        store.shutdown()
        loop.close()
