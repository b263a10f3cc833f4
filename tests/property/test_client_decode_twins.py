"""A pull body's messages as the client decodes them: the compiled twin
(`client._message.decode_messages`) against the reference, over record streams built from
the spec (v1 and v2 magic, IPv4 and IPv6 hosts, compressed bodies, text that is no UTF-8)
and then damaged at random: bytes flipped, the stream cut short, garbage between records."""

from __future__ import annotations

import json
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rmqpy.client.message import reference_decode_messages
from tests.spec_bytes import spec_record

compiled = pytest.importorskip("rmqpy.client._message", reason="the compiled core is not built")

HOSTS = st.sampled_from(
    [b"\x7f\x00\x00\x01", b"\x0a\x00\x00\x07", bytes(15) + b"\x01", bytes(range(16))]
)
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
NAMES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "UNIQ_CLIENT_MESSAGE_ID_KEYIDX", "k"])
# Encoded properties as a writer other than ours may leave them: a name twice (the last
# wins), parts without \x01 or shorter than three characters, no \x02 at the end.
PROPERTY_TEXT = st.lists(
    st.one_of(
        st.tuples(NAMES, TEXT).map(lambda kv: f"{kv[0]}\x01{kv[1]}"),
        st.sampled_from(["", "a", "ab\x01", "UNIQ_KEY", "XUNIQ_KEY\x01x", "UNIQ_KEY\x01a\x01b"]),
    ),
    max_size=5,
).flatmap(lambda parts: st.sampled_from(["\x02".join(parts), "\x02".join(parts) + "\x02"]))


def v2(record: bytes) -> bytes:
    """A v1 record rewritten with the v2 magic and a two-byte topic length."""
    magic_v2 = struct.pack(">i", -626843477)  # 0xDAA320AB
    sys_flag = struct.unpack_from(">i", record, 36)[0]
    hosts = (20 if sys_flag & 0x10 else 8) + (20 if sys_flag & 0x20 else 8)
    body_len_at = 48 + hosts + 8 + 12
    body_len = struct.unpack_from(">i", record, body_len_at)[0]
    topic_at = body_len_at + 4 + body_len
    topic_len = record[topic_at]
    out = record[:4] + magic_v2 + record[8:topic_at] + struct.pack(">h", topic_len)
    out += record[topic_at + 1 :]
    return struct.pack(">i", len(out)) + out[4:]


@st.composite
def records(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(max_size=64))
    sys_flag = 0
    if draw(st.integers(0, 4)) == 0:
        body, sys_flag = zlib.compress(body), 0x1
        if draw(st.booleans()):
            body = body[: len(body) // 2]  # a compressed body that does not inflate
    props: dict[str, str] | str = draw(
        st.one_of(st.dictionaries(NAMES, TEXT, max_size=3), PROPERTY_TEXT)
    )
    record = spec_record(
        body=body,
        topic=draw(st.sampled_from(["TopicA", "Tópico", "T" * 40])),
        props=props,
        queue_id=draw(st.integers(-2, 16)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        queue_offset=draw(st.integers(-1, 2**40)),
        phys_offset=draw(st.integers(-1, 2**44)),
        sys_flag=sys_flag | draw(st.sampled_from([0, 0, 4, 8])),
        born_ts=draw(st.integers(-1, 2**42)),
        born_ip=draw(HOSTS),
        born_port=draw(st.integers(0, 65535)),
        store_ts=draw(st.integers(0, 2**42)),
        store_ip=draw(HOSTS),
        store_port=draw(st.sampled_from([10911, 10911, 20911])),
        reconsume_times=draw(st.integers(0, 16)),
    )
    if draw(st.booleans()):
        record = v2(record)
    if draw(st.integers(0, 9)) == 0:  # properties bytes that are no UTF-8
        record = record.replace("Tópico".encode(), b"T\xff\xfeico")
    return record


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    data = bytearray(b"".join(draw(st.lists(records(), max_size=6))))
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        what = draw(st.sampled_from(["flip", "cut", "garbage"]))
        at = draw(st.integers(0, len(data) - 1))
        if what == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif what == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def outcome(decode: Any, body: bytes) -> Any:
    try:
        return decode(body, "broker-a")
    except zlib.error as exc:  # a compressed body that does not inflate: raised by both
        return ("zlib.error", str(exc))


def test_the_compiled_twin_sums_bodies_where_they_lie() -> None:
    """zlib-ng's own CRC32 is found, so the bodies below are checked the compiled way."""
    assert compiled.NATIVE_CRC32


@settings(max_examples=400, deadline=None)
@given(bodies())
def test_both_decode_every_pull_body_alike(body: bytes) -> None:
    ours, theirs = outcome(compiled.decode_messages, body), outcome(reference_decode_messages, body)
    event("raised" if isinstance(theirs, tuple) else f"{min(len(theirs), 3)}+ messages")
    assert ours == theirs
    if not isinstance(theirs, tuple):  # what the properties say, asked of both
        assert [(m.msg_id, m.tags, m.keys, m.uniq_key, len(m.properties)) for m in ours] == [
            (m.msg_id, m.tags, m.keys, m.uniq_key, len(m.properties)) for m in theirs
        ]


def test_a_record_with_an_empty_topic_first_reads_as_the_reference_reads_it() -> None:
    """The topic kept from the record before starts as the empty text, not as nothing."""
    body = spec_record(body=b"x", topic="", props={}) + spec_record(body=b"y", topic="T", props={})
    ours, theirs = compiled.decode_messages(body, "b"), reference_decode_messages(body, "b")
    assert [m.topic for m in ours] == [m.topic for m in theirs] == ["", "T"]
    assert ours == theirs


def test_properties_are_split_when_first_read_and_read_as_a_dict() -> None:
    body = spec_record(body=b"x", topic="T", props="TAGS\x01a\x02KEYS\x01k1 k2\x02TAGS\x01b")
    (message,) = compiled.decode_messages(body, "b")
    assert message.properties == {"TAGS": "b", "KEYS": "k1 k2"}  # the last TAGS wins
    assert (message.tags, message.keys) == ("b", ["k1", "k2"])
    assert dict(message.properties) == message.to_json()["properties"]
    assert json.dumps(message.to_json())  # plain JSON, as `rmqpy consume --json` prints


def test_a_pull_bodys_messages_share_their_hosts_text() -> None:
    """Records of one store host give one offsetMsgId prefix and host text (kept from the
    record before), and each its own offset in the id."""
    body = b"".join(
        spec_record(body=b"m%d" % i, topic="T", props={"UNIQ_KEY": f"U{i}"}, phys_offset=i * 100)
        for i in range(3)
    )
    messages = compiled.decode_messages(body, "b")
    assert messages == reference_decode_messages(body, "b")
    assert [m.msg_id for m in messages] == ["U0", "U1", "U2"]
    assert [m.offset_msg_id[-16:] for m in messages] == [f"{i * 100:016X}" for i in range(3)]
    assert {m.store_host for m in messages} == {"127.0.0.1:10911"}


def _one_record(store_ip: bytes, store_port: int, topic: str) -> bytes:
    return spec_record(
        body=b"x",
        topic=topic,
        props={},
        born_ip=store_ip,
        born_port=store_port,
        store_ip=store_ip,
        store_port=store_port,
    )


def test_hosts_and_topic_kept_from_an_earlier_body_are_not_taken_for_another() -> None:
    """The hosts and topic of the last record read are kept from one call to the next (a
    consumer's pulls repeat them): bodies of other hosts and topics read as their own,
    whatever was read before them."""
    a = _one_record(b"\x7f\x00\x00\x01", 10911, "A")
    b = _one_record(b"\x0a\x00\x00\x07", 20911, "B")
    for body in (a, b, a, a + b, b + a, b):
        assert compiled.decode_messages(body, "x") == reference_decode_messages(body, "x")
    (message,) = compiled.decode_messages(b, "x")
    assert (message.store_host, message.born_host, message.topic) == (
        "10.0.0.7:20911",
        "10.0.0.7:20911",
        "B",
    )
    assert message.offset_msg_id.startswith("0A000007000051AF")


def test_threads_decoding_bodies_of_different_hosts_each_get_their_own() -> None:
    """What is kept across calls is shared by threads: each thread's messages still carry
    the hosts and topic of their own records."""
    bodies = [
        _one_record(b"\x7f\x00\x00\x01", 10911, "A") * 8,
        _one_record(b"\x0a\x00\x00\x07", 20911, "B") * 8,
    ]
    expected = [reference_decode_messages(body, "x") for body in bodies]

    def decode_many(which: int) -> bool:
        return all(
            compiled.decode_messages(bodies[(which + i) % 2], "x") == expected[(which + i) % 2]
            for i in range(3000)
        )

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(decode_many, [0, 1, 0, 1]))
