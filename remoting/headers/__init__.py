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
    @functools.cache
    def _plan(cls, v2: bool) -> tuple[tuple[str, str, type, bool, str], ...]:
        """(attr, key read, kind, required, wire name) per field, for one naming."""
        return tuple(
            (s.attr, s.v2 if v2 and s.v2 else s.wire, s.kind, s.required, s.wire)
            for s in cls._specs()
        )

    @classmethod
    def from_ext(cls, ext: Mapping[str, str], *, v2: bool = False) -> Self:
        values: dict[str, Any] = {}
        get = ext.get
        for attr, key, kind, required, wire_name in cls._plan(v2):
            raw = get(key)
            if raw is None:
                if required:
                    raise HeaderError(f"the custom header field {wire_name} is null")
                continue
            if kind is str:
                values[attr] = raw
            elif kind is int:
                try:
                    values[attr] = int(raw)  # int() ignores surrounding whitespace
                except ValueError:
                    raise HeaderError(
                        f"the custom header field {wire_name} is not a number: {raw!r}"
                    ) from None
            elif kind is bool:
                values[attr] = raw.strip().lower() == "true"  # Java's Boolean.parseBoolean
            else:
                raise TypeError(f"unsupported header field type {kind!r}")
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
