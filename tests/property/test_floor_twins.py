"""The protocol floor's compiled twin (`bench._floor.FloorState`) against the reference: the
same reads (sends and pulls with binary headers, SEND_MESSAGE and V2, other requests, frames
cut anywhere) give the same served lengths, the same bytes written to each connection, the
same queues and the same parked pulls."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqpy.bench.floor import FloorState
from rmqpy.remoting.codes import RequestCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.frame import encode_frame

compiled = pytest.importorskip("rmqpy.bench._floor", reason="the compiled core is not built")
BINARY = SerializeType.ROCKETMQ


class Connection:
    """What the state writes to one connection, in order."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))


def send(opaque: int, queue_id: int, body: bytes, v2: bool) -> bytes:
    if v2:
        code, ext = RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "T", "e": str(queue_id)}
    else:
        code, ext = RequestCode.SEND_MESSAGE, {"producerGroup": "PG", "topic": "T",
                                              "queueId": str(queue_id)}  # fmt: skip
    cmd = RemotingCommand(code, opaque=opaque, ext_fields=ext, body=body, serialize_type=BINARY)
    return encode_frame(cmd)


def pull(opaque: int, queue_id: int, offset: int, most: int) -> bytes:
    ext = {"consumerGroup": "G", "topic": "T", "queueId": str(queue_id),
           "queueOffset": str(offset), "maxMsgNums": str(most), "sysFlag": "2"}  # fmt: skip
    cmd = RemotingCommand(
        RequestCode.PULL_MESSAGE, opaque=opaque, ext_fields=ext, serialize_type=BINARY
    )
    return encode_frame(cmd)


def other(opaque: int, json: bool) -> bytes:
    kind = SerializeType.JSON if json else BINARY
    cmd = RemotingCommand(RequestCode.HEART_BEAT, opaque=opaque, serialize_type=kind)
    return encode_frame(cmd)


frame = st.one_of(
    st.builds(send, st.integers(0, 2**31 - 1), st.integers(0, 3), st.binary(max_size=64),
              st.booleans()),
    st.builds(pull, st.integers(0, 2**31 - 1), st.integers(0, 3), st.integers(0, 6),
              st.integers(1, 4)),
    st.builds(other, st.integers(0, 2**31 - 1), st.booleans()),
)  # fmt: skip


def serve(state: Any, reads: list[bytes]) -> tuple[list[int], list[list[bytes]], list[Any]]:
    """Each read served on a connection of its own, as `FloorProtocol` does (what is left of
    a read after a frame the state does not serve is dropped, as the protocol answers it)."""
    served, conns = [], []
    for data in reads:
        conn = Connection()
        conns.append(conn)
        buf = bytearray(data)
        served.append(state.serve_read(conn, buf))
    parked = sorted((q, p[1:4]) for q, p in state.parked.items())
    queues = sorted((q, state.max_offset(q), bytes(state.data[q])) for q in state.data)
    return served, [c.written for c in conns], [parked, queues, state.phy]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(frame, max_size=6), st.integers(0, 200)), max_size=8))
def test_both_serve_the_same_reads_the_same_way(reads: list[tuple[list[bytes], int]]) -> None:
    cut = [b"".join(frames)[: len(b"".join(frames)) - trim] for frames, trim in reads]
    assert serve(compiled.FloorState(), cut) == serve(FloorState(), cut)


def test_a_parked_pull_is_answered_by_the_send_that_reaches_its_queue() -> None:
    for state in (FloorState(), compiled.FloorState()):
        consumer, producer = Connection(), Connection()
        assert state.serve_read(consumer, bytearray(pull(7, 2, 0, 32))) > 0
        assert consumer.written == [] and 2 in state.parked
        state.serve_read(producer, bytearray(send(8, 2, b"hello", True)))
        assert 2 not in state.parked and len(consumer.written) == 1
        assert consumer.written[0].endswith(b"hello" + bytes([5]) + b"floor" + b"\x00\x00")
        assert state.expired(float("inf")) == []
