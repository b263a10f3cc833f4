"""The load generator's compiled twins (`bench._load`) against the reference: requests
rendered with random opaques, born times and key numbers (binary and JSON headers, with
KEYS and stamps), and read buffers of random answers cut anywhere, give the same bytes and
the same (opaque, code, frame) calls."""

from __future__ import annotations

import time
from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmqpy.bench.load
from rmqpy.bench.load import (
    Patchable,
    count_records,
    send_frames,
    split_responses,
    tally_answers,
)
from rmqpy.config.compiled import PURE_PYTHON
from rmqpy.remoting.codes import ResponseCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.frame import encode_frame
from rmqpy.store.message import Host, Message, encode_record

compiled = pytest.importorskip("rmqpy.bench._load", reason="the compiled core is not built")


@settings(max_examples=200, deadline=None)
@given(
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.integers(1, 3),
    st.integers(1_000_000_000, 2**31 - 1),
    st.integers(0, 9_999_999_999_999).map(lambda n: b"%13d" % n),
    st.integers(0, 10**15),
    st.binary(max_size=16),
)
def test_both_render_the_same_request(
    json_headers: bool, keys: bool, stamp: bool, batch: int, opaque: int, born: bytes,
    key_base: int, stamp_bytes: bytes,
) -> None:  # fmt: skip
    frames = send_frames("T", 64, batch, [0, 1], keys=keys, stamp=stamp, json_headers=json_headers)
    for frame in frames:
        twin = Patchable(bytearray(frame.frame))
        expected = frame.render(opaque, born, key_base, stamp_bytes)
        assert compiled.render(twin, opaque, born, key_base, stamp_bytes) == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**31 - 1), st.sampled_from(list(ResponseCode)),
                  st.sampled_from([SerializeType.ROCKETMQ, SerializeType.JSON])),
        max_size=6,
    ),
    st.integers(0, 400),
    st.booleans(),
)  # fmt: skip
def test_both_split_the_same_answers(
    answers: list[tuple[int, int, SerializeType]], cut: int, frames: bool
) -> None:
    data = b"".join(
        encode_frame(RemotingCommand(code, opaque=opaque, flag=1, serialize_type=kind))
        for opaque, code, kind in answers
    )
    data = data[: len(data) - cut % (len(data) + 1)]
    calls: list[list[tuple[int, int, bytes]]] = [[], []]
    bufs = [bytearray(data), bytearray(data)]
    for split, buf, seen in zip(
        (split_responses, compiled.split_responses), bufs, calls, strict=True
    ):
        split(buf, lambda o, c, f, seen=seen: seen.append((o, c, f)), frames)
    assert calls[1] == calls[0]
    assert bufs[1] == bufs[0]


def test_the_generator_uses_the_twins_unless_told_not_to() -> None:
    expected = (
        (Patchable.render, split_responses, count_records)
        if PURE_PYTHON
        else (compiled.render, compiled.split_responses, compiled.count_records)
    )
    load = rmqpy.bench.load
    assert (load.render_frame, load.split_frames, load.count_pulled) == expected


JSON_PARTS = st.sampled_from(
    ['"code":0', '"code":-17', '"code": 1', '"opaque":42', '"opaque":-1', '"opaque":2147483647',
     '"opaque":' + "9" * 19, '"extFields":{"code":"x","opaque":"7"}', '"xcode":5', '"remark":"a"',
     '"code":"3"', '""code":8', '"flag":1']
)  # fmt: skip


@given(st.lists(st.lists(JSON_PARTS, max_size=6), min_size=1, max_size=4))
def test_both_read_a_json_answers_opaque_and_code_alike(headers: list[list[str]]) -> None:
    """JSON headers in any shape: fields in any order, names inside ext fields and values,
    spaces, long numbers, one missing (the reference raises; so must the twin)."""
    data = b""
    for parts in headers:  # length, serialize type and header length, header
        header = ("{" + ",".join(parts) + "}").encode()
        data += (4 + len(header)).to_bytes(4, "big")
        data += (int(SerializeType.JSON) << 24 | len(header)).to_bytes(4, "big") + header
    outcomes: list[object] = []
    for split in (split_responses, compiled.split_responses):
        seen: list[tuple[int, int, bytes]] = []

        def on_response(opaque: int, code: int, frame: bytes, seen: list[Any] = seen) -> None:
            seen.append((opaque, code, frame))

        try:
            split(bytearray(data), on_response, True)
            outcomes.append(seen)
        except (KeyError, ValueError) as exc:
            outcomes.append(type(exc))
    assert outcomes[1] == outcomes[0]


@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.sampled_from([0, 1, 14, -3]),
                  st.sampled_from([SerializeType.ROCKETMQ, SerializeType.JSON])),
        max_size=8,
    ),
    st.dictionaries(st.integers(0, 40), st.floats(0, 100), max_size=20),
    st.sampled_from([None, frozenset({0}), frozenset({0, 14})]),
    st.integers(0, 300),
)  # fmt: skip
def test_both_tally_a_producers_answers_alike(
    answers: list[tuple[int, int, SerializeType]],
    sent: dict[int, float],
    ok_codes: frozenset[int] | None,
    cut: int,
) -> None:
    """Answers to requests sent and not sent, codes that count and that do not, a frame cut
    short at the end: the same counts, round trips, requests still waiting and leftovers."""
    data = b"".join(
        encode_frame(RemotingCommand(code, opaque=opaque, flag=1, serialize_type=kind))
        for opaque, code, kind in answers
    )
    data = data[: len(data) - cut % (len(data) + 1)]
    outcomes = []
    for tally in (tally_answers, compiled.tally_answers):
        buf, waiting, samples = bytearray(data), dict(sent), array("d")
        counts = tally(buf, waiting, samples, ok_codes, 123.5)
        outcomes.append((counts, samples, waiting, buf))
    assert outcomes[1] == outcomes[0]


def pull_answer(bodies: list[bytes], v6: list[bool], tail: bytes) -> bytes:
    """A pull's answer frame: one stored record per body (IPv6 born and store hosts where
    `v6` says), then `tail` (what a record's place may hold instead: nothing, a cut record,
    a size of zero)."""
    records = bytearray()
    for n, (body, six) in enumerate(zip(bodies, v6, strict=True)):
        host = Host(b"\x20\x01" + b"\x00" * 13 + b"\x01", 9876) if six else Host(b"\x7f\0\0\1", 1)
        message = Message("T", body, 0, born_host=host)
        encode_record(records, message, n, len(records), 1_700_000_000_000, host)
    return encode_frame(RemotingCommand(0, flag=1, body=bytes(records) + tail))


BODIES = st.one_of(
    st.integers(0, 10**16 - 1).map(lambda n: b"%016d" % n + b"rest of the body"),
    st.binary(max_size=24),
    st.sampled_from([b"1234567890123456", b"123456789012345", b"12345678901234x6", b""]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(BODIES, st.booleans()), max_size=5),
    st.sampled_from([b"", b"\0\0\0\0", b"\0\0\0", b"\0\0\0\x40" + b"\0" * 30]),
    st.booleans(),
)
def test_both_count_a_pulls_records_and_read_their_stamps_alike(
    records: list[tuple[bytes, bool]], tail: bytes, stamp: bool
) -> None:
    """Stamped and other bodies, IPv4 and IPv6 hosts, and a body ending in nothing, a zero
    size or a cut record: the same count, size and latencies (the clock read once by each,
    so the latencies are compared against each one's own sent stamps), or both refuse."""
    frame = pull_answer([b for b, _ in records], [six for _, six in records], tail)
    outcomes: list[tuple[int, int] | str] = []
    latencies = []
    for count in (count_records, compiled.count_records):
        e2e = array("d")
        before_us = time.time_ns() // 1000
        try:
            outcomes.append(count(frame, stamp, e2e))
        except Exception:  # the reference's struct.error, the twin's ValueError
            outcomes.append("refused")
        latencies.append([before_us - round(x * 1000) for x in e2e])
    assert outcomes[1] == outcomes[0]
    assert len(latencies[1]) == len(latencies[0])
    for ours, theirs in zip(latencies[0], latencies[1], strict=True):
        assert abs(ours - theirs) < 1_000_000  # the same sent stamp, read a moment apart
