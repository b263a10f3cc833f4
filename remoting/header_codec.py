"""Header encodings: JSON (type 0), RocketMQ binary (type 1), msgpack (type 2).

JSON is what Java and JavaScript clients send: `{"code":..,"extFields":{..},"flag":..,
"language":"JAVA","opaque":..,"version":..}`. Values may arrive as numbers or
strings; they are coerced, unknown keys are ignored, and `extFields` always goes out, as
strings (a Java producer reads it without a null check). The binary layout is in
`remoting.wire`. The msgpack header is rmqpy's own: a map with the JSON keys, the language as
its number, used by our client because it is the cheapest to encode and decode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from rmqpy.remoting.codes import LanguageCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import LocalProtocolError, RemoteProtocolError
from rmqpy.remoting.wire import BINARY_FIXED, I32, INT_VALUES, U16

_LANGUAGE_BY_NAME = {lang.name: lang for lang in LanguageCode}
# One encoder: `json.dumps` with any option builds a new JSONEncoder per call.
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_LANGUAGE_BY_CODE = {int(lang): lang for lang in LanguageCode}
_JUST_STR = {str}


def encode_header(cmd: RemotingCommand) -> bytes:
    kind = cmd.serialize_type
    if kind is SerializeType.JSON:
        return _encode_json(cmd)
    if kind is SerializeType.MSGPACK:
        return _encode_msgpack(cmd)
    return _encode_binary(cmd)


def decode_header(kind: int, header: bytes, body: bytes) -> RemotingCommand:
    """A command from its header bytes; `RemoteProtocolError` for anything malformed."""
    if kind == SerializeType.JSON:
        return _from_mapping(_load(_json_loads, header, "JSON"), body, SerializeType.JSON)
    if kind == SerializeType.MSGPACK:
        return _from_mapping(_load(_msgpack_loads, header, "msgpack"), body, SerializeType.MSGPACK)
    if kind == SerializeType.ROCKETMQ:
        return _decode_binary(header, body)
    raise RemoteProtocolError(f"unknown serialize type {kind}")


# --- JSON and msgpack ------------------------------------------------------------------------
def _encode_json(cmd: RemotingCommand) -> bytes:
    fields: dict[str, Any] = {
        "code": cmd.code,
        "extFields": cmd.ext_fields,
        "flag": cmd.flag,
        "language": cmd.language.name,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.remark is not None:
        fields["remark"] = cmd.remark
    return compact_json(fields)


def compact_json(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON (what fastjson writes and reads)."""
    return _COMPACT_JSON.encode(value).encode("utf-8")


def _encode_msgpack(cmd: RemotingCommand) -> bytes:
    fields: dict[str, Any] = {
        "code": cmd.code,
        "extFields": cmd.ext_fields,
        "flag": cmd.flag,
        "language": int(cmd.language),
        "opaque": cmd.opaque,
        "version": cmd.version,
    }
    if cmd.remark is not None:
        fields["remark"] = cmd.remark
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


def _json_loads(data: bytes) -> Any:
    """JSON as fastjson reads it: `Infinity`, `-Infinity` and `NaN` are not numbers."""
    return json.loads(data, parse_constant=_not_a_number)


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _msgpack_loads(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _load(loads: Callable[[bytes], Any], header: bytes, what: str) -> Mapping[str, Any]:
    try:
        fields = loads(header)
    except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
        raise RemoteProtocolError(f"header is not valid {what}: {exc}") from exc
    if not isinstance(fields, dict):
        raise RemoteProtocolError(f"{what} header is a {type(fields).__name__}, not an object")
    return fields


def _from_mapping(fields: Mapping[str, Any], body: bytes, kind: SerializeType) -> RemotingCommand:
    ext = fields.get("extFields")
    if ext is None:
        ext = {}
    if not isinstance(ext, dict):
        raise RemoteProtocolError("extFields is not an object")
    if not ({*map(type, ext.values())} <= _JUST_STR and {*map(type, ext)} <= _JUST_STR):
        ext = {str(k): _text(v) for k, v in ext.items() if v is not None}
    remark = fields.get("remark")
    return RemotingCommand(
        code=_int(fields, "code", required=True),
        opaque=_int(fields, "opaque"),
        flag=_int(fields, "flag"),
        remark=None if remark is None else str(remark),
        ext_fields=ext,
        body=body,
        language=_language(fields.get("language")),
        version=_int(fields, "version"),
        serialize_type=kind,
    )


def _int(fields: Mapping[str, Any], key: str, required: bool = False) -> int:
    value = fields.get(key)
    if type(value) is int and value in INT_VALUES:
        return value
    if value is None:
        if required:
            raise RemoteProtocolError(f"header has no {key}")
        return 0
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError) as exc:  # (1e400 parses as infinity)
        raise RemoteProtocolError(f"header {key} is not an integer: {value!r}") from exc
    if isinstance(value, bool) or number not in INT_VALUES:
        raise RemoteProtocolError(f"header {key} is not a 32-bit integer: {value!r}")
    return number


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return json.dumps(value, separators=(",", ":"))


def _language(value: Any) -> LanguageCode:
    if isinstance(value, str):
        return _LANGUAGE_BY_NAME.get(value, LanguageCode.OTHER)
    if isinstance(value, int) and not isinstance(value, bool):
        return _LANGUAGE_BY_CODE.get(value, LanguageCode.OTHER)
    return LanguageCode.OTHER


# --- ROCKETMQ binary -------------------------------------------------------------------------
def _encode_binary(cmd: RemotingCommand) -> bytes:
    if not -(2**15) <= cmd.code < 2**15:
        raise LocalProtocolError(f"code {cmd.code} does not fit the binary header's i16")
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    keys = _BINARY_KEYS
    entries: list[bytes] = []
    for key, value in cmd.ext_fields.items():
        v = value.encode("utf-8")
        entries += (keys.get(key) or _binary_key(key), I32.pack(len(v)), v)
    ext = b"".join(entries)
    return b"".join(
        (
            BINARY_FIXED.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag),
            I32.pack(len(remark)),
            remark,
            I32.pack(len(ext)),
            ext,
        )
    )


_BINARY_KEYS: dict[str, bytes] = {}


def _binary_key(key: str) -> bytes:
    """A key's length prefix and bytes, kept for the next header (keys repeat endlessly)."""
    k = key.encode("utf-8")
    encoded = U16.pack(len(k)) + k
    if len(_BINARY_KEYS) < 4096:
        _BINARY_KEYS[key] = encoded
    return encoded


def _decode_binary(header: bytes, body: bytes) -> RemotingCommand:
    end = len(header)
    if end < BINARY_FIXED.size + 8:
        raise RemoteProtocolError(f"binary header of {end} bytes is too short")
    code, language, version, opaque, flag = BINARY_FIXED.unpack_from(header, 0)
    pos = BINARY_FIXED.size
    remark_len = I32.unpack_from(header, pos)[0]
    pos += 4
    if remark_len < 0 or pos + remark_len + 4 > end:
        raise RemoteProtocolError(f"binary header remark length {remark_len} is out of bounds")
    try:
        remark = header[pos : pos + remark_len].decode("utf-8") if remark_len else None
        pos += remark_len
        ext_len = I32.unpack_from(header, pos)[0]
        pos += 4
        if ext_len < 0 or pos + ext_len != end:
            raise RemoteProtocolError(
                f"binary header ext length {ext_len} does not fill the header"
            )
        ext = _decode_binary_ext(header, pos, end)
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"binary header text is not UTF-8: {exc}") from exc
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        body=body,
        language=_language(language),
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _decode_binary_ext(header: bytes, pos: int, end: int) -> dict[str, str]:
    """The ext entries from `pos` to `end`. An all-ASCII region (the usual case) is decoded
    once and sliced at the same offsets, instead of two decodes per entry."""
    region = header[pos:end]
    text = region.decode("ascii") if region.isascii() else None
    base = pos  # where `text` starts in `header`
    ext: dict[str, str] = {}
    i32 = I32.unpack_from
    u16 = U16.unpack_from
    while pos < end:
        if pos + 2 > end:
            raise RemoteProtocolError("binary header ext entry is cut short")
        key_end = pos + 2 + u16(header, pos)[0]
        if key_end + 4 > end:
            raise RemoteProtocolError("binary header ext key is cut short")
        value_len = i32(header, key_end)[0]
        value_end = key_end + 4 + value_len
        if value_len < 0 or value_end > end:
            raise RemoteProtocolError("binary header ext value is cut short")
        if text is not None:
            ext[text[pos + 2 - base : key_end - base]] = text[key_end + 4 - base : value_end - base]
        else:
            ext[header[pos + 2 : key_end].decode("utf-8")] = header[key_end + 4 : value_end].decode(
                "utf-8"
            )
        pos = value_end
    return ext
