"""The compiled frame codec (`remoting._frame`) against its pure-Python reference
(`remoting.frame`): the same random frames, good and malformed, in all three serialize types,
must give the same commands, positions, errors and bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqpy.config.compiled import PURE_PYTHON
from rmqpy.remoting import frame
from rmqpy.remoting.codes import LanguageCode, ResponseCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import RemotingError
from rmqpy.remoting.wire import FRAME_PREFIX, MAX_FRAME_LENGTH

compiled = pytest.importorskip("rmqpy.remoting._frame", reason="the compiled core is not built")

I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(max_size=12)
commands = st.builds(
    RemotingCommand,
    code=I16 | st.sampled_from(list(ResponseCode)),  # processors answer with the enum
    opaque=I32,
    flag=I32,
    remark=st.none() | TEXT,
    ext_fields=st.dictionaries(TEXT, TEXT, max_size=6),
    body=st.binary(max_size=64),
    language=st.sampled_from(list(LanguageCode)),
    version=I16,
    serialize_type=st.sampled_from(list(SerializeType)),
)


def outcome(fn: object, *args: object) -> object:
    """What a call gives, an exception included (compared by type and text)."""
    try:
        result = fn(*args)  # type: ignore[operator]
    except (RemotingError, ValueError, OverflowError) as exc:
        return ("raised", type(exc).__name__, str(exc))
    if isinstance(result, tuple):  # decode_frames: (commands, pos, error)
        cmds, pos, error = result
        err = None if error is None else (type(error).__name__, str(error))
        return cmds, pos, err
    return b"".join(result)


@settings(max_examples=300, deadline=None)
@given(st.lists(commands, max_size=6))
def test_both_encoders_write_the_same_bytes(cmds: list[RemotingCommand]) -> None:
    assert outcome(compiled.encode_frames, cmds) == outcome(frame.reference_encode_frames, cmds)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(commands, max_size=6),
    st.integers(0, 200),
    st.binary(max_size=40),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    st.booleans(),
)
def test_both_decoders_read_the_same_commands_and_errors(
    cmds: list[RemotingCommand],
    cut: int,
    tail: bytes,
    flips: list[tuple[int, int]],
    first: bool,
) -> None:
    """Frames as a peer sends them, then cut short, followed by junk, or with bytes flipped
    (lengths, header fields, UTF-8, JSON and msgpack structure)."""
    data = bytearray(b"".join(frame.reference_encode_frames(cmds)))
    for at, value in flips:
        if data:
            data[at % len(data)] = value
    data = data[: max(len(data) - cut, 0)] + bytearray(tail)
    for start in (0, min(3, len(data))):
        want = outcome(
            frame.reference_decode_frames, bytearray(data), start, MAX_FRAME_LENGTH, first
        )
        got = outcome(compiled.decode_frames, bytearray(data), start, MAX_FRAME_LENGTH, first)
        assert got == want
        view = memoryview(bytes(data))  # a read as the connection hands it over
        assert outcome(compiled.decode_frames, view, start, MAX_FRAME_LENGTH, first) == want
        assert outcome(frame.reference_decode_frames, view, start, MAX_FRAME_LENGTH, first) == want


@settings(max_examples=500, deadline=None)
@given(
    commands,
    st.lists(st.tuples(st.integers(0, 500), st.integers(0, 255)), min_size=1, max_size=3),
    st.integers(0, 8),
)
def test_both_decoders_refuse_a_damaged_binary_header_alike(
    cmd: RemotingCommand, flips: list[tuple[int, int]], cut: int
) -> None:
    """Damage inside a well-framed binary header: lengths, UTF-8, entries cut short."""
    cmd.serialize_type = SerializeType.ROCKETMQ
    header = bytearray(frame.reference_encode_frames([cmd])[0][8:])
    for at, value in flips:
        header[at % len(header)] = value
    header = header[: max(len(header) - cut, 0)]
    data = bytearray(FRAME_PREFIX.pack(4 + len(header), 1 << 24 | len(header))) + header
    want = outcome(frame.reference_decode_frames, bytearray(data), 0, MAX_FRAME_LENGTH, True)
    assert outcome(compiled.decode_frames, bytearray(data), 0, MAX_FRAME_LENGTH, True) == want


ANY_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()  # NaN and Infinity included: JSON that fastjson refuses
    | st.text(max_size=8)
    | st.sampled_from(["JAVA", "PYTHON", "GO", "7", "1e400", " 12 "]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
# A header as a client sends it, then each field perhaps replaced by anything at all.
JSON_FIELDS = st.builds(
    lambda base, odd: {**base, **odd},
    st.fixed_dictionaries(
        {"code": I16, "opaque": I32, "flag": I32, "version": I16},
        optional={
            "remark": st.none() | TEXT,
            "language": st.sampled_from(["JAVA", "CPP", "PYTHON"]),
            "extFields": st.dictionaries(TEXT, TEXT, max_size=4),
        },
    ),
    st.dictionaries(
        st.sampled_from(["code", "opaque", "flag", "version", "remark", "language"]),
        ANY_VALUE,
        max_size=1,
    )
    | st.fixed_dictionaries(
        {"extFields": st.dictionaries(TEXT, TEXT | ANY_VALUE, min_size=1, max_size=4)}
    ),
)


@settings(max_examples=500, deadline=None)
@given(JSON_FIELDS | ANY_VALUE, st.sampled_from(["plain", "ascii", "bom"]))
def test_both_decoders_read_any_json_header_alike(fields: object, form: str) -> None:
    """What Java, C++ and JS clients send, and what they might: numbers as strings, floats,
    huge integers, NaN, nested values, non-objects, a byte-order mark. orjson decides
    nothing the reference would decide differently."""
    text = json.dumps(fields, ensure_ascii=form == "ascii")
    try:
        header = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 header carries one
        return
    if form == "bom":
        header = b"\xef\xbb\xbf" + header
    data = bytearray(FRAME_PREFIX.pack(4 + len(header) + 2, len(header))) + header + b"ok"
    want = outcome(frame.reference_decode_frames, bytearray(data), 0, MAX_FRAME_LENGTH, True)
    assert outcome(compiled.decode_frames, bytearray(data), 0, MAX_FRAME_LENGTH, True) == want


# Text as clients escape it: JSON's short escapes, control characters, non-ASCII, pairs.
ESCAPED_TEXT = st.text(
    st.sampled_from(list('ab"\\/\b\f\n\r\t\x00\x01\x02\x1f\x7fé€😀')) | st.characters(),
    max_size=10,
)


def _json_value(value: object, ascii_only: bool, gap: str) -> str:
    if isinstance(value, dict):
        items = [f"{_json_value(k, ascii_only, gap)}{gap}:{gap}{_json_value(v, ascii_only, gap)}"
                 for k, v in value.items()]  # fmt: skip
        return "{" + gap + f"{gap},{gap}".join(items) + gap + "}"
    return json.dumps(value, ensure_ascii=ascii_only)


@settings(max_examples=500, deadline=None)
@given(
    st.fixed_dictionaries(
        {"code": I32, "opaque": I32 | st.integers(-(2**40), 2**40), "flag": I32, "version": I16},
        optional={
            "remark": st.none() | ESCAPED_TEXT,
            "language": st.sampled_from(["JAVA", "CPP", "PYTHON", "GO", "x"]),
            "serializeTypeCurrentRPC": st.sampled_from(["JSON", "ROCKETMQ"]),
            "extFields": st.none() | st.dictionaries(ESCAPED_TEXT, ESCAPED_TEXT, max_size=5),
        },
    ),
    st.randoms(use_true_random=False),
    st.booleans(),
    st.sampled_from(["", " ", "\n\t ", "\r"]),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=2),
)
def test_both_decoders_read_a_client_json_header_alike(
    fields: dict[str, object],
    rng: object,
    ascii_only: bool,
    gap: str,
    flips: list[tuple[int, int]],
) -> None:
    """Headers of the usual fields in any order, with JSON whitespace, escaped or raw text
    (surrogate pairs, control characters), an opaque past 32 bits, nulls, and now and
    then a byte changed: the compiled reader of such headers decides as the reference."""
    items = list(fields.items())
    rng.shuffle(items)  # type: ignore[attr-defined]
    text = _json_value(dict(items), ascii_only, gap)
    header = bytearray(text.encode("utf-8", "surrogatepass"))
    for at, value in flips:
        header[at % len(header)] = value
    data = bytearray(FRAME_PREFIX.pack(4 + len(header) + 2, len(header))) + header + b"ok"
    want = outcome(frame.reference_decode_frames, bytearray(data), 0, MAX_FRAME_LENGTH, True)
    assert outcome(compiled.decode_frames, bytearray(data), 0, MAX_FRAME_LENGTH, True) == want


def test_a_foreign_protocol_is_named_by_both() -> None:
    data = bytearray(b"GET /metrics HTTP/1.1\r\n\r\n")
    want = outcome(frame.reference_decode_frames, data, 0, MAX_FRAME_LENGTH, True)
    assert outcome(compiled.decode_frames, data, 0, MAX_FRAME_LENGTH, True) == want
    assert want[2][0] == "ForeignProtocolError"  # type: ignore[index]


def test_the_broker_uses_the_compiled_codec_unless_told_not_to() -> None:
    if PURE_PYTHON:
        assert frame.decode_frames is frame.reference_decode_frames
        assert frame.encode_frames is frame.reference_encode_frames
    else:
        assert frame.decode_frames is compiled.decode_frames
        assert frame.encode_frames is compiled.encode_frames


def test_the_compiled_codec_imports_first_or_second() -> None:
    """`remoting._frame` and `remoting.frame` import each other: either may come first (a
    fresh clone's build check imported the twin first and found it half made)."""
    check = (
        "import rmqpy.remoting._frame as c, rmqpy.remoting.frame as f; "
        "assert f.decode_frames is c.decode_frames and f.encode_frames is c.encode_frames"
    )
    env = {k: v for k, v in os.environ.items() if k != "RMQPY_PURE_PYTHON"}
    subprocess.run([sys.executable, "-c", check], check=True, env=env)
