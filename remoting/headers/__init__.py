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
import types
import typing
from collections.abc import Callable, Mapping
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
        parsed: Self = cls._parser(v2)(ext)
        return parsed

    @classmethod
    @functools.cache
    def _parser(cls, v2: bool) -> Callable[[Mapping[str, str]], Any]:
        """`from_ext` for this class and naming as straight-line code that fills the slots
        itself: a loop over the fields, and a frozen dataclass's `__init__` (one
        `object.__setattr__` per field), cost about 7 us per SEND_MESSAGE_V2 header."""
        env: dict[str, Any] = {"cls": cls, "new": object.__new__, "HeaderError": HeaderError}
        code = ["def parse(ext):", "    get = ext.get", "    self = new(cls)"]
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for i, (attr, key, kind, required, wire_name) in enumerate(cls._plan(v2)):
            env[f"set{i}"] = _slot_setter(cls, attr)
            env[f"default{i}"] = defaults[attr]
            code += _field_code(f"set{i}", f"default{i}", key, kind, required, wire_name)
        code.append("    return self")
        exec("\n".join(code), env)  # our own fields' code, as dataclasses does
        parse: Callable[[Mapping[str, str]], Any] = env["parse"]
        return parse

    def to_ext(self, *, v2: bool = False) -> dict[str, str]:
        ext: dict[str, str] = self._writer(v2)(self)
        return ext

    @classmethod
    @functools.cache
    def _writer(cls, v2: bool) -> Callable[[Any], dict[str, str]]:
        """`to_ext` for this class and naming as straight-line code, as `_parser` is: every
        field that is set, as a string (booleans as Java writes them)."""
        code = ["def write(self):", "    out = {}"]
        for attr, key, kind, _required, _wire in cls._plan(v2):
            text = "'true' if v else 'false'" if kind is bool else "str(v)"
            code += [f"    v = self.{attr}", "    if v is not None:"]
            code.append(f"        out[{key!r}] = {text}")
        code.append("    return out")
        env: dict[str, Any] = {}
        exec("\n".join(code), env)  # our own fields' code, as dataclasses does
        write: Callable[[Any], dict[str, str]] = env["write"]
        return write


def _slot_setter(cls: type, attr: str) -> Callable[[object, Any], None]:
    """Sets `attr` on a (frozen) instance of `cls` without its `__setattr__`: the slot's own
    descriptor, or `object.__setattr__` for a class without slots."""
    slot = next((k.__dict__[attr] for k in cls.__mro__ if attr in k.__dict__), None)
    if isinstance(slot, types.MemberDescriptorType):
        setter: Callable[[object, Any], None] = slot.__set__
        return setter
    return lambda obj, value: object.__setattr__(obj, attr, value)


def _field_code(
    setter: str, default: str, key: str, kind: type, required: bool, wire_name: str
) -> list[str]:
    """Lines of a generated parser that read `key` and set one field (see `_parser`)."""
    head = f"the custom header field {wire_name}"
    if kind is str:
        value = "raw"
    elif kind is int:  # int() ignores surrounding whitespace
        value = "int(raw)"
    elif kind is bool:  # Java's Boolean.parseBoolean
        value = "raw.strip().lower() == 'true'"
    else:
        raise TypeError(f"unsupported header field type {kind!r}")
    missing = (
        f"raise HeaderError({head + ' is null'!r})" if required else f"{setter}(self, {default})"
    )
    lines = [f"    raw = get({key!r})", "    if raw is None:", f"        {missing}", "    else:"]
    if kind is not int:
        return [*lines, f"        {setter}(self, {value})"]
    return [
        *lines,
        "        try:",
        f"            {setter}(self, {value})",
        "        except ValueError:",
        f"            raise HeaderError({head + ' is not a number: '!r} + repr(raw)) from None",
    ]
