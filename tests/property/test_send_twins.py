"""The compiled send lane (`broker.processors._send`) against the reference
`SendProcessor`: random sends as Java and our clients write them and as they should not
(both namings, batches, retry, DLQ, system and missing topics, read-only topics, odd
numbers, transaction flags, properties that already carry CLUSTER), then random put
results. The same messages, the same refusals, and answers that encode to the same bytes
in every serialize type."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rmqpy.broker.context import RequestContext
from rmqpy.broker.groups import SubscriptionGroupManager
from rmqpy.broker.processors.send import SendIdentity, SendProcessor
from rmqpy.broker.topics import TopicConfig, TopicConfigManager
from rmqpy.config.compiled import PURE_PYTHON
from rmqpy.remoting.batch_body import BatchItem, encode_batch_body
from rmqpy.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.frame import reference_encode_frames
from rmqpy.remoting.headers.send import SendMessageRequestHeader
from rmqpy.store.commitlog import PutMessageResult
from rmqpy.store.layout import PutMessageStatus
from rmqpy.store.message import Host, Message
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config

lane_module = pytest.importorskip(
    "rmqpy.broker.processors._send", reason="the compiled core is not built"
)

ROOT = Path(tempfile.mkdtemp(prefix="send-twins-"))
TOPICS = TopicConfigManager(str(ROOT / "config"), "DefaultCluster", "broker-a", 8)
TOPICS.table["TopicA"] = TopicConfig("TopicA", 4, 4)
TOPICS.table["ReadOnly"] = TopicConfig("ReadOnly", 2, 2, PERM_READ)
GROUPS = SubscriptionGroupManager(str(ROOT / "config"), True, 16)
STORE = MessageStore(small_config(ROOT / "store"))


def processor(writable: bool, compiled: bool) -> SendProcessor:
    perm = PERM_READ | (PERM_WRITE if writable else 0)
    identity = SendIdentity("DefaultCluster", "broker-a", perm, auto_create_topic=True)
    made = SendProcessor(STORE, TOPICS, GROUPS, identity)
    made.lane = made.compiled_lane(lane_module) if compiled else None
    return made


NUMBERS = st.one_of(
    st.integers(-3, 6).map(str),
    st.sampled_from(["2147483647", "2147483648", "-2147483649", "9" * 19, "+1", " 1", "x", ""]),
)
TOPIC_NAMES = st.sampled_from(
    ["TopicA", "ReadOnly", "Fresh", "%RETRY%g1", "%DLQ%g1", "TBW102", "SCHEDULE_TOPIC_XXXX",
     "bad topic", ""]
)  # fmt: skip
PROPERTIES = st.one_of(
    st.just(""),
    st.lists(
        st.sampled_from(
            ["TAGS\x01TagA", "KEYS\x01k1 k2", "UNIQ_KEY\x01AC11", "WAIT\x01true", "DELAY\x013",
             "TRAN_MSG\x01true", "TRAN_MSG\x01false", "CLUSTER\x01Other", "x", "MAX_OFFSET\x01"]
        ),
        max_size=4,
    ).map(lambda items: "\x02".join(items) + "\x02"),
    st.text(max_size=12),
)  # fmt: skip


PLAIN = {
    "producer_group": "PG",
    "topic": "TopicA",
    "default_topic": "TBW102",
    "default_topic_queue_nums": "4",
    "queue_id": "1",
    "sys_flag": "0",
    "born_timestamp": "1700000000000",
    "flag": "0",
    "properties": "TAGS\x01TagA\x02UNIQ_KEY\x01AC11\x02WAIT\x01true\x02",
    "reconsume_times": "0",
    "unit_mode": "false",
    "batch": "false",
}
CHANGES = {
    "topic": TOPIC_NAMES,
    "default_topic_queue_nums": st.sampled_from(["4", "x"]),
    "queue_id": NUMBERS,
    "sys_flag": st.sampled_from(["0", "4", "8", "12", "16", "2"]),
    "born_timestamp": st.sampled_from(["1700000000000", "-1", "9" * 18, "9" * 19, "1.5"]),
    "flag": NUMBERS,
    "properties": PROPERTIES,
    "reconsume_times": st.sampled_from(["0", "3", "x", None]),
    "max_reconsume_times": st.sampled_from([None, "16", "x"]),
    "batch": st.sampled_from(["false", "true", "TRUE", None]),
    "producer_group": st.sampled_from(["PG", None]),
    "default_topic": st.sampled_from(["TBW102", None]),
}


@st.composite
def batch_bodies(draw: st.DrawFn) -> bytes:
    """A batch as Java encodes it, or now and then one cut short, with a byte or a size
    changed, or empty."""
    items = st.builds(
        BatchItem, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=16), PROPERTIES
    )
    body = encode_batch_body(draw(st.lists(items, max_size=4)))
    damage = draw(st.sampled_from(["none"] * 4 + ["cut", "byte", "size"]))
    if damage == "size" and body:  # the first item's totalSize one off
        body = (int.from_bytes(body[:4], "big") + draw(st.sampled_from([-1, 1]))).to_bytes(
            4, "big", signed=True
        ) + body[4:]
    elif damage == "cut" and body:
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif damage == "byte" and body:
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([draw(st.integers(0, 255))]) + body[at + 1 :]
    return body


@st.composite
def sends(draw: st.DrawFn) -> RemotingCommand:
    """Mostly a send as a Java producer writes it, then its properties and up to three of
    its fields changed, dropped or added."""
    code = draw(
        st.sampled_from(
            [RequestCode.SEND_MESSAGE_V2] * 5
            + [RequestCode.SEND_MESSAGE] * 3
            + [RequestCode.SEND_BATCH_MESSAGE] * 3
        )
    )
    fields: dict[str, Any] = dict(PLAIN)
    if draw(st.booleans()):  # what the store and the lane read most closely
        fields["properties"] = draw(PROPERTIES)
    for name in draw(st.lists(st.sampled_from(sorted(CHANGES)), max_size=3)):
        fields[name] = draw(CHANGES[name])
    keys = SendMessageRequestHeader.ext_keys(v2=code == RequestCode.SEND_MESSAGE_V2)
    ext = {keys[k]: v for k, v in fields.items() if v is not None}
    body = draw(st.binary(max_size=24))
    if code == RequestCode.SEND_BATCH_MESSAGE or fields["batch"] in ("true", "TRUE"):
        body = draw(batch_bodies())
    return RemotingCommand(
        code,
        opaque=draw(st.integers(0, 2**31 - 1)),
        ext_fields=ext,
        body=body,
        serialize_type=draw(st.sampled_from(list(SerializeType))),
    )


PEERS = st.sampled_from(["127.0.0.1:50001", "10.0.0.7:7", "[::1]:6000"])


def contexts(requests: list[RemotingCommand], peer: str) -> list[RequestContext]:
    conn: Any = SimpleNamespace(peer=peer)
    return [RequestContext(conn, r, None) for r in requests]  # type: ignore[arg-type]


def fields_of(puts: list[list[Message]]) -> list[list[dict[str, object]]]:
    return [
        [{s: getattr(m, s) for s in Message.__slots__ if s != "_properties"} for m in msgs]
        for msgs in puts
    ]


def made(send: SendProcessor, group: list[RequestContext]) -> tuple[Any, ...]:
    random.seed(7)  # a send without a queue gets a random one, on both paths alike
    answers: list[RemotingCommand | None] = [None] * len(group)
    if send.lane is None:
        puts, owners = send._group_messages(group, answers)
    else:
        puts, owners = send.lane.group_messages(group, answers, send._messages_or_refusal)
    return puts, owners, answers


RESULTS = st.builds(
    PutMessageResult,
    st.one_of(st.just(PutMessageStatus.PUT_OK), st.sampled_from(list(PutMessageStatus))),
    st.integers(0, 2**40),
    st.integers(1, 5000),
    st.integers(0, 2**40),
    st.integers(1, 3),
    st.integers(0, 2**41),
    st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=3),
    st.sampled_from([Host(b"\x7f\x00\x00\x01", 10911), Host(bytes(range(16)), 1), None]),
    st.sampled_from(["", "disk full"]),
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(sends(), min_size=1, max_size=6), PEERS, st.booleans(), st.data())
def test_both_paths_make_the_same_messages_and_answers(
    requests: list[RemotingCommand], peer: str, writable: bool, data: st.DataObject
) -> None:
    group = contexts(requests, peer)
    compiled, reference = processor(writable, True), processor(writable, False)
    c_puts, c_owners, c_answers = made(compiled, group)
    r_puts, r_owners, r_answers = made(reference, group)
    event(f"{len(r_puts)} of {len(group)} stored")
    assert (c_owners, c_answers) == (r_owners, r_answers)
    assert fields_of(c_puts) == fields_of(r_puts)

    results = [data.draw(RESULTS) for _ in r_puts]
    timed_out = data.draw(st.booleans())
    for send, answers in ((compiled, c_answers), (reference, r_answers)):
        send._answer_all(group, r_owners, r_puts, results, answers, timed_out)
    assert c_answers == r_answers
    frames = [a for a in r_answers if a is not None]
    assert reference_encode_frames([a for a in c_answers if a is not None]) == (
        reference_encode_frames(frames)
    )


def test_a_java_send_is_made_by_the_lane_not_handed_back() -> None:
    """The common send never reaches the reference: the lane is what runs in production."""
    keys = SendMessageRequestHeader.ext_keys(v2=True)
    ext = {
        keys["producer_group"]: "PG",
        keys["topic"]: "TopicA",
        keys["default_topic"]: "TBW102",
        keys["default_topic_queue_nums"]: "4",
        keys["queue_id"]: "3",
        keys["sys_flag"]: "0",
        keys["born_timestamp"]: "1700000000000",
        keys["flag"]: "0",
        keys["properties"]: "TAGS\x01TagA\x02UNIQ_KEY\x01AC11\x02WAIT\x01true\x02",
        keys["reconsume_times"]: "0",
        keys["unit_mode"]: "false",
        keys["batch"]: "false",
    }
    group = contexts([RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=ext)], "1.2.3.4:5")
    send = processor(True, True)
    assert send.lane is not None

    def handed_back(ctx: RequestContext) -> RemotingCommand:
        raise AssertionError(f"the lane handed back {ctx.request.ext_fields}")

    puts, owners = send.lane.group_messages(group, [None], handed_back)
    assert owners == [0]
    (msg,) = puts[0]
    assert (msg.topic, msg.queue_id, msg.uniq_key) == ("TopicA", 3, "AC11")
    assert msg.props_bytes.endswith(b"CLUSTER\x01DefaultCluster\x02")


def test_the_broker_sends_through_the_lane_unless_told_not_to() -> None:
    identity = SendIdentity("DefaultCluster", "broker-a", PERM_READ | PERM_WRITE, True)
    lane = SendProcessor(STORE, TOPICS, GROUPS, identity).lane
    assert (lane is None) if PURE_PYTHON else isinstance(lane, lane_module.SendLane)


@pytest.mark.parametrize(
    ("code", "properties"),
    [
        (RequestCode.SEND_BATCH_MESSAGE, "DELAY\x013\x02"),  # a batch cannot take a delay
        (RequestCode.SEND_BATCH_MESSAGE, "DELAY\x010\x02"),  # level 0 is no delay
        (RequestCode.SEND_MESSAGE_V2, "DELAY\x013\x02"),  # a single one goes to the schedule
        (RequestCode.SEND_MESSAGE_V2, "TRAN_MSG\x01true\x02"),  # a half message: refused
        (RequestCode.SEND_MESSAGE_V2, "TRAN_MSG\x01false\x02"),
        (RequestCode.SEND_MESSAGE, "CLUSTER\x01Other\x02"),  # the broker's own CLUSTER wins
        (RequestCode.SEND_BATCH_MESSAGE, "CLUSTER\x01Other\x02WAIT\x01true\x02"),
    ],
)
def test_the_properties_the_lane_hands_back_are_handled_as_the_reference_does(
    code: int, properties: str
) -> None:
    keys = SendMessageRequestHeader.ext_keys(v2=code != RequestCode.SEND_MESSAGE)
    ext = {keys[k]: v for k, v in {**PLAIN, "properties": properties}.items()}
    body = encode_batch_body([BatchItem(0, b"one", "TAGS\x01a\x02"), BatchItem(1, b"two", "")])
    group = contexts([RemotingCommand(code, ext_fields=ext, body=body)], "10.0.0.7:7")
    c_puts, c_owners, c_answers = made(processor(True, True), group)
    r_puts, r_owners, r_answers = made(processor(True, False), group)
    assert (c_owners, c_answers, fields_of(c_puts)) == (r_owners, r_answers, fields_of(r_puts))
