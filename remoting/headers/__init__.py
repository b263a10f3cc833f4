"""Typed views of `extFields`, one module per request family (RocketMQ `CommandCustomHeader`).

Each header is a frozen dataclass mixing in `ExtHeader`. Wire names are the field names in
camelCase unless a field says otherwise (`wire(...)`); SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE
use one-letter aliases (`v2=`). Values travel as strings (ints in decimal, booleans as
`true`/`false`); `from_ext` converts by annotation, ignores unknown keys, and raises
`HeaderError` naming the field when a required one is missing or malformed - the processor
answers that with a clear remark instead of dropping the connection.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from remoting.errors import RemotingError


class HeaderError(RemotingError):
    """A request's custom header lacks a required field or carries a malformed value."""


def wire(
    name: str | None = None, *, v2: str | None = None, default: Any = dataclasses.MISSING
) -> Any:
    """A header field with an explicit wire name and/or a SEND_MESSAGE_V2 short name."""
    metadata = {"wire": name, "v2": v2}
    return dataclasses.field(default=default, metadata=metadata)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldSpec:
    attr: str
    wire: str
    v2: str | None
    kind: type
    optional: bool
    required: bool


class ExtHeader:
    """Mixin: `from_ext` / `to_ext` for a frozen dataclass of str, int and bool fields."""

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    @functools.cache
    def _specs(cls) -> tuple[_FieldSpec, ...]:
        hints = typing.get_type_hints(cls)
        specs = []
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            args = typing.get_args(hint)
            optional = type(None) in args
            kind = next((a for a in args if a is not type(None)), hint) if args else hint
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            name = f.metadata.get("wire") or _camel(f.name)
            specs.append(_FieldSpec(f.name, name, f.metadata.get("v2"), kind, optional, required))
        return tuple(specs)

    @classmethod
    def from_ext(cls, ext: Mapping[str, str], *, v2: bool = False) -> Self:
        values: dict[str, Any] = {}
        for spec in cls._specs():
            raw = ext.get(spec.v2) if v2 and spec.v2 else ext.get(spec.wire)
            if raw is None:
                if spec.required:
                    raise HeaderError(f"the custom header field {spec.wire} is null")
                continue
            values[spec.attr] = _convert(raw, spec)
        return cls(**values)

    def to_ext(self, *, v2: bool = False) -> dict[str, str]:
        out: dict[str, str] = {}
        for spec in self._specs():
            value = getattr(self, spec.attr)
            if value is None:
                continue
            key = spec.v2 if v2 and spec.v2 else spec.wire
            if isinstance(value, bool):
                out[key] = "true" if value else "false"
            else:
                out[key] = str(value)
        return out


def _convert(raw: str, spec: _FieldSpec) -> Any:
    if spec.kind is str:
        return raw
    if spec.kind is bool:
        return raw.strip().lower() == "true"  # Java's Boolean.parseBoolean
    if spec.kind is int:
        try:
            return int(raw.strip())
        except ValueError:
            raise HeaderError(
                f"the custom header field {spec.wire} is not a number: {raw!r}"
            ) from None
    raise TypeError(f"unsupported header field type {spec.kind!r}")
