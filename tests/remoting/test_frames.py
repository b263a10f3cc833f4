"""Frames as Java and JavaScript clients put them on the wire, and what a decoder
does with bytes that are not frames."""

from __future__ import annotations

import json
import re
import struct

import msgpack
import pytest

from rmqpy.remoting.codes import LanguageCode, RequestCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import ForeignProtocolError, RemoteProtocolError
from rmqpy.remoting.frame import FrameDecoder, encode_frame
from rmqpy.remoting.headers import HeaderError
from rmqpy.remoting.headers.pull import PullMessageRequestHeader
from rmqpy.remoting.headers.send import SendMessageRequestHeader
from rmqpy.remoting.wire import MAX_FRAME_LENGTH

JAVA_ROUTE_QUERY = (
    b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":1,'
    b'"serializeTypeCurrentRPC":"JSON","version":401}'
)


def frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), kind << 24 | len(header)) + header + body


def decode_all(data: bytes) -> list[RemotingCommand]:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    out = []
    while (cmd := decoder.next_command()) is not None:
        out.append(cmd)
    return out


def route_query(kind: SerializeType) -> RemotingCommand:
    return RemotingCommand(
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        opaque=1,
        ext_fields={"topic": "T"},
        language=LanguageCode.JAVA,
        version=401,
        serialize_type=kind,
    )


def test_json_frame_matches_the_spec_example() -> None:
    assert len(JAVA_ROUTE_QUERY) == 123
    data = encode_frame(route_query(SerializeType.JSON))
    assert data[:8] == bytes.fromhex("0000007f0000007b")
    assert data[8:] == JAVA_ROUTE_QUERY
    (cmd,) = decode_all(data)
    assert cmd == route_query(SerializeType.JSON)


def test_binary_frame_matches_the_spec_example() -> None:
    header = bytes.fromhex(
        "0069000191000000010000000000000000" + "0000000c0005746f7069630000000154"
    )
    assert len(header) == 33
    data = encode_frame(route_query(SerializeType.ROCKETMQ))
    assert data == struct.pack(">ii", 4 + 33, 0x01000021) + header
    (cmd,) = decode_all(data)
    assert cmd == route_query(SerializeType.ROCKETMQ)


def test_json_numbers_and_unknown_keys_are_accepted() -> None:
    header = json.dumps(
        {
            "code": "310",
            "opaque": 7,
            "flag": 0,
            "language": "NODE_JS",
            "version": 1,
            "somethingNew": [1, 2],
            "extFields": {
                "a": "pg",
                "b": "T",
                "c": "TBW102",
                "d": 4,
                "e": 0,
                "f": 0,
                "g": 1700000000000,
                "h": 0,
                "m": False,
                "bname": "b",
            },
        }
    ).encode()
    (cmd,) = decode_all(frame(header, b"hello"))
    assert cmd.code == RequestCode.SEND_MESSAGE_V2 and cmd.language is LanguageCode.NODE_JS
    assert cmd.body == b"hello"
    send = SendMessageRequestHeader.from_ext(cmd.ext_fields, v2=True)
    assert (send.topic, send.queue_id, send.born_timestamp, send.batch) == (
        "T",
        0,
        1_700_000_000_000,
        False,
    )


def test_a_response_keeps_the_request_opaque_and_type_and_always_has_ext_fields() -> None:
    request = route_query(SerializeType.JSON)
    response = request.response(17, "No topic route info in name server for the topic: T")
    (cmd,) = decode_all(encode_frame(response))
    assert cmd.is_response and cmd.opaque == 1 and cmd.code == 17
    assert b'"extFields":{}' in encode_frame(response)


def test_a_missing_required_header_field_names_it() -> None:
    with pytest.raises(HeaderError, match="consumerGroup"):
        PullMessageRequestHeader.from_ext({"topic": "T"})
    with pytest.raises(HeaderError, match="queueId"):
        PullMessageRequestHeader.from_ext(
            {
                "consumerGroup": "g",
                "topic": "T",
                "queueId": "x",
                "queueOffset": "0",
                "maxMsgNums": "32",
                "sysFlag": "0",
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
                "subVersion": "0",
            }
        )


def test_a_partial_frame_waits_for_more_bytes() -> None:
    data = encode_frame(route_query(SerializeType.JSON))
    decoder = FrameDecoder()
    decoder.receive_data(data[:-1])
    assert decoder.next_command() is None
    decoder.receive_data(data[-1:])
    assert decoder.next_command() == route_query(SerializeType.JSON)
    assert decoder.buffered == 0


def test_a_read_that_comes_before_the_last_ones_commands_are_taken_waits_behind_them() -> None:
    """As on a connection paused with requests in flight: the second read's command comes
    after the first read's, none lost."""
    first, second, third = (
        RemotingCommand(RequestCode.HEART_BEAT, remark=str(i)) for i in range(3)
    )
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(first) + encode_frame(second))
    assert decoder.next_command() == first
    decoder.receive_data(memoryview(bytearray(encode_frame(third))))
    assert [decoder.next_command() for _ in range(3)] == [second, third, None]
    assert decoder.buffered == 0


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (struct.pack(">i", MAX_FRAME_LENGTH + 1), "exceeds the limit"),
        (struct.pack(">i", 2) + b"\0\0", "shorter than"),
        (struct.pack(">ii", 8, 100) + b"\0" * 4, "larger than the frame"),
        (frame(b"{not json"), "not valid JSON"),
        (frame(b"[1,2]"), "not an object"),
        (frame(b'{"opaque":1}'), "no code"),
        (frame(b'{"code":1e40}'), "32-bit"),
        # Non-finite numbers, which fastjson does not read either.
        (frame(b'{"code":Infinity}'), "Infinity is not a JSON number"),
        (frame(b'{"code":10,"opaque":-Infinity}'), "-Infinity is not a JSON number"),
        (frame(b'{"code":10,"flag":NaN}'), "NaN is not a JSON number"),
        (frame(b'{"code":10,"extFields":{"queueId":Infinity}}'), "Infinity is not"),
        (frame(b'{"code":10,"version":1e400}'), "version is not an integer"),
        (frame(msgpack.packb({"code": 10, "opaque": float("inf")}), kind=2), "not an integer"),
        (frame(b"\xc1", kind=2), "not valid msgpack"),
        (frame(b"\x00" * 5, kind=1), "too short"),
        (frame(b"{}", kind=9), "unknown serialize type"),
    ],
)
def test_bad_frames_raise_a_remote_protocol_error(data: bytes, why: str) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    with pytest.raises(RemoteProtocolError, match=why):
        decoder.next_command()
    with pytest.raises(RemoteProtocolError):  # the decoder stays broken
        decoder.next_command()


@pytest.mark.parametrize(
    ("opening", "says"),
    [
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "gRPC (RocketMQ 5 proxy protocol) is not served"),
        (b"GET /metrics HTTP/1.1\r\n", "not HTTP"),
        (b"OPTIONS * HTTP/1.1\r\n", "not HTTP"),
        (bytes.fromhex("160301"), "without TLS"),
    ],
)
def test_another_protocols_opening_is_named_even_a_byte_at_a_time(
    opening: bytes, says: str
) -> None:
    decoder = FrameDecoder()
    for i in range(3):
        decoder.receive_data(opening[i : i + 1])
        assert decoder.next_command() is None
    decoder.receive_data(opening[3:] or b"\x00")
    with pytest.raises(ForeignProtocolError, match=re.escape(says)):
        decoder.next_command()


def test_header_fields_go_out_as_java_writes_them() -> None:
    """Every set field as a string, booleans as Java's Boolean.toString, unset ones left
    out; V2 names for SEND_MESSAGE_V2."""
    header = SendMessageRequestHeader(
        "pg", "T", "TBW102", 4, 1, 0, 1700000000000, 0, unit_mode=True, batch=False
    )
    assert header.to_ext(v2=True) == {
        "a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0",
        "g": "1700000000000", "h": "0", "k": "true", "m": "false",
    }  # fmt: skip
    assert header.to_ext()["unitMode"] == "true" and "properties" not in header.to_ext()
