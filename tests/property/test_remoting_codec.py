"""The frame codec against arbitrary input (STYLE: h11's whole / byte-by-byte / garbage tests):
every command round-trips in every serialize type, any chunking of a byte stream decodes to
the same commands, and garbage only ever raises `RemoteProtocolError`."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

from hypothesis import given
from hypothesis import strategies as st

import rmqpy.remoting.headers
from rmqpy.remoting.codes import LanguageCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import RemoteProtocolError
from rmqpy.remoting.frame import FrameDecoder, encode_frame
from rmqpy.remoting.headers import ExtHeader, HeaderError, JavaWidth

I32 = st.integers(-(2**31), 2**31 - 1)
I16 = st.integers(-(2**15), 2**15 - 1)


@st.composite
def commands(draw: st.DrawFn, kind: SerializeType | None = None) -> RemotingCommand:
    kind = kind if kind is not None else draw(st.sampled_from(SerializeType))
    binary = kind is SerializeType.ROCKETMQ
    return RemotingCommand(
        code=draw(I16 if binary else I32),
        opaque=draw(I32),
        flag=draw(I32),
        remark=draw(st.none() | st.text(min_size=1)),
        ext_fields=draw(st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=6)),
        body=draw(st.binary(max_size=300)),
        language=draw(st.sampled_from(LanguageCode)),
        version=draw(I16 if binary else I32),
        serialize_type=kind,
    )


def decode_chunks(chunks: list[bytes]) -> list[RemotingCommand]:
    decoder = FrameDecoder()
    out = []
    for chunk in chunks:
        decoder.receive_data(chunk)
        while (cmd := decoder.next_command()) is not None:
            out.append(cmd)
    assert decoder.buffered == 0
    return out


@given(commands())
def test_every_command_round_trips(cmd: RemotingCommand) -> None:
    assert decode_chunks([encode_frame(cmd)]) == [cmd]


@given(st.lists(commands(), max_size=5), st.data())
def test_any_chunking_yields_the_same_commands(
    cmds: list[RemotingCommand], data: st.DataObject
) -> None:
    stream = b"".join(encode_frame(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert decode_chunks(chunks) == cmds


@given(st.lists(commands(), max_size=6), st.data())
def test_reads_taken_in_part_before_the_next_arrives_yield_the_same_commands(
    cmds: list[RemotingCommand], data: st.DataObject
) -> None:
    """A connection paused between reads takes only some of a read's commands before the
    next read comes (which then waits behind them); reads come as views of a reused
    buffer, as the connection hands them over."""
    frames = [encode_frame(c) for c in cmds]
    stream = b"".join(frames)
    ends = [sum(map(len, frames[: i + 1])) for i in range(len(frames))]  # whole-frame reads
    cut = st.integers(0, len(stream)) | st.sampled_from(ends) if ends else st.just(0)
    cuts = sorted(data.draw(st.lists(cut, max_size=8)))
    decoder, out, buffer = FrameDecoder(), [], bytearray(len(stream))
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        buffer[: b - a] = stream[a:b]
        decoder.receive_data(memoryview(buffer)[: b - a])
        buffer[:] = bytes(len(buffer))  # the connection reads the next bytes into it
        for _ in range(data.draw(st.integers(0, 3))):
            if (cmd := decoder.next_command()) is not None:
                out.append(cmd)
    while (cmd := decoder.next_command()) is not None:
        out.append(cmd)
    assert out == cmds
    assert decoder.buffered == 0


@given(st.lists(commands(), min_size=1, max_size=3))
def test_byte_at_a_time(cmds: list[RemotingCommand]) -> None:
    stream = b"".join(encode_frame(c) for c in cmds)
    assert decode_chunks([stream[i : i + 1] for i in range(len(stream))]) == cmds


@given(st.binary(max_size=200), st.sampled_from([b"", b"\x00\x00\x00\x10"]))
def test_garbage_raises_only_a_protocol_error(garbage: bytes, prefix: bytes) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(prefix + garbage)
    try:
        while decoder.next_command() is not None:
            pass
    except RemoteProtocolError:
        pass


def _header_classes() -> list[type[ExtHeader]]:
    for info in pkgutil.iter_modules(rmqpy.remoting.headers.__path__):
        importlib.import_module(f"rmqpy.remoting.headers.{info.name}")
    return sorted(ExtHeader.__subclasses__(), key=lambda c: c.__name__)


HEADER_CLASSES = _header_classes()


def test_every_request_family_has_header_types() -> None:
    assert len(HEADER_CLASSES) >= 20


def number_fields(cls: type[ExtHeader]) -> dict[str, tuple[str, JavaWidth]]:
    """Attribute -> (wire name, Java type) of each number field of `cls`."""
    return {
        f.name: (wire, width)
        for f, (wire, (_, width)) in zip(
            dataclasses.fields(cls), cls.wire_fields().items(), strict=True
        )
        if width is not None
    }


def headers(cls: type[ExtHeader]) -> st.SearchStrategy[ExtHeader]:
    """Headers of `cls` whose numbers fit their Java types."""
    optional = {f.name for f in dataclasses.fields(cls) if f.default is None}
    numbers = {
        name: st.integers(width.values.start, width.values.stop - 1)
        for name, (_, width) in number_fields(cls).items()
    }
    return st.builds(cls, **{k: st.none() | v if k in optional else v for k, v in numbers.items()})


@given(st.sampled_from(HEADER_CLASSES).flatmap(headers), st.booleans())
def test_every_header_type_round_trips(header: ExtHeader, v2: bool) -> None:
    ext = header.to_ext(v2=v2)
    assert all(isinstance(v, str) for v in ext.values())
    assert type(header).from_ext(ext, v2=v2) == header


@given(st.sampled_from(HEADER_CLASSES).flatmap(headers), st.data())
def test_a_number_wider_than_its_java_type_is_refused_naming_the_field(
    header: ExtHeader, data: st.DataObject
) -> None:
    cls = type(header)
    fields = number_fields(cls)
    if not fields:
        return
    wire, width = fields[data.draw(st.sampled_from(sorted(fields)))]
    values = width.values
    wide = data.draw(st.integers(max_value=values.start - 1) | st.integers(min_value=values.stop))
    ext = {**header.to_ext(), wire: str(wide)}
    try:
        cls.from_ext(ext)
    except HeaderError as exc:
        assert f"field {wire} does not fit a Java {width.name}" in str(exc)
    else:
        raise AssertionError(f"{cls.__name__}.{wire} = {wide} was taken")
