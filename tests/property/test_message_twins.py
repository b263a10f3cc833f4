"""The compiled `fill` (`store._message`) against `MessageTemplate.fill`: random templates
(topics, queues, flags, born hosts, added properties) and random messages (properties with
the names the store reads, repeated, malformed, non-ASCII; flags and born times past their
fields), the same message fields to the byte or the same error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmqpy.store.message
from rmqpy.config.compiled import PURE_PYTHON
from rmqpy.store.layout import MessageConst
from rmqpy.store.message import Host, Message, MessageTemplate, RecordEncoder

compiled = pytest.importorskip("rmqpy.store._message", reason="the compiled core is not built")

NAMES = st.sampled_from(
    [
        MessageConst.TAGS,
        MessageConst.KEYS,
        MessageConst.UNIQ_KEY,
        MessageConst.LEGACY_UNIQ_KEY,
        MessageConst.DELAY,
        MessageConst.WAIT,
        MessageConst.SHARDING_KEY,
        "T",
        "TAG",
        "",
    ]
)
VALUES = st.one_of(
    st.text(max_size=8),
    st.sampled_from(
        ["", "a", "k1 k2", "Tag\x01A", "标签", "\U0001f600", "x" * 40, "false", "False", "false "]
    ),
)


@st.composite
def property_texts(draw: st.DrawFn) -> str:
    items = draw(st.lists(st.tuples(NAMES, VALUES, st.booleans()), max_size=6))
    text = "".join(f"{n}\x01{v}" + ("\x02" if ended else "") for n, v, ended in items)
    return text if draw(st.booleans()) else text + draw(st.sampled_from(["", "\x02", "\x01", "zz"]))


TEMPLATES = st.builds(
    MessageTemplate,
    st.sampled_from(["T", "TopicTest", "主题", "t" * 127, "t" * 200]),
    st.integers(0, 2**31 - 1),
    st.one_of(st.just(""), st.just("CLUSTER\x01DefaultCluster\x02"), property_texts()),
    sys_flag=st.sampled_from([0, 0x1, 0x4, 0x8, 0xC, 0x10, 0x20, 0x83]),
    born_host=st.sampled_from([Host(b"\x7f\x00\x00\x01", 5), Host(bytes(range(16)), 65535)]),
    reconsume_times=st.integers(0, 16),
)
INTS = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.sampled_from([2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**80]),
)
SLOTS = [s for s in Message.__slots__ if s != "_properties"]


def made(
    fill: Any, template: MessageTemplate, body: bytes, flag: int, props: str, born: int
) -> object:
    msg: Message = object.__new__(Message)
    msg._properties = None
    try:
        fill(template, msg, body, flag, props, born)
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))
    return {name: getattr(msg, name) for name in SLOTS}


@settings(max_examples=500, deadline=None)
@given(
    TEMPLATES,
    st.binary(max_size=64),
    INTS,
    property_texts(),
    st.one_of(st.integers(0, 2**45), st.sampled_from([-1, 2**63 - 1, 2**63, -(2**63) - 1])),
)
def test_both_fills_make_the_same_message(
    template: MessageTemplate, body: bytes, flag: int, props: str, born: int
) -> None:
    reference = made(MessageTemplate.fill, template, body, flag, props, born)
    assert made(compiled.fill, template, body, flag, props, born) == reference


def test_a_sent_message_is_read_for_its_tags_keys_and_id() -> None:
    template = MessageTemplate("TopicTest", 3, "CLUSTER\x01c\x02")
    props = "TAGS\x01TagA\x02KEYS\x01order-1 order-2\x02UNIQ_KEY\x01AC11\x02"
    got = made(compiled.fill, template, b"hello", 0, props, 1)
    assert isinstance(got, dict)
    assert got["tags_code"] == 2_598_919  # "TagA".hashCode() in Java: 31-based, over chars
    assert got["keys"] == "order-1 order-2"
    assert got["uniq_key"] == "AC11"
    assert got["props_bytes"] == (props + "CLUSTER\x01c\x02").encode()


def test_the_store_uses_the_twins_unless_told_not_to() -> None:
    expected = (
        (MessageTemplate.fill, RecordEncoder.encode)
        if PURE_PYTHON
        else (compiled.fill, compiled.encode)
    )
    assert (rmqpy.store.message.fill_message, rmqpy.store.message.encode_records) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(TEMPLATES, st.binary(max_size=300), st.integers(-(2**31), 2**31 - 1),
                  property_texts(), st.integers(0, 2**45)),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([Host(b"\x0a\x00\x00\x07", 10911), Host(bytes(range(16, 32)), 10911)]),
    st.integers(0, 2**62),
    st.integers(0, 2**45),
    st.data(),
)  # fmt: skip
def test_both_encoders_lay_out_the_same_records(
    sends: list[tuple[MessageTemplate, bytes, int, str, int]],
    store_host: Host,
    first_phy: int,
    store_timestamp: int,
    data: st.DataObject,
) -> None:
    records = [t.message(body, flag, props, born) for t, body, flag, props, born in sends]
    queue_offsets = data.draw(st.lists(st.integers(0, 2**62), min_size=len(records),
                                       max_size=len(records)))  # fmt: skip
    phys = [first_phy + 1000 * i for i in range(len(records))]
    encoder = RecordEncoder(store_host)
    out: list[list[bytes]] = [[], []]
    for encode, parts in zip((RecordEncoder.encode, compiled.encode), out, strict=True):
        encode(encoder, parts, records, queue_offsets, phys, store_timestamp)
    assert b"".join(out[1]) == b"".join(out[0])
    assert len(b"".join(out[0])) == sum(r.lengths[store_host.is_v6] for r in records)
