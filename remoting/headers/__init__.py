"""Typed views of `extFields`, one module per request family (RocketMQ `CommandCustomHeader`).

Each header is a frozen dataclass mixing in `ExtHeader`. Wire names are the field names in
camelCase unless a field says otherwise (`wire(...)`); SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE
use one-letter aliases (`v2=`). Values travel as strings (ints in decimal, booleans as
`true`/`false`); `from_ext` converts by annotation, ignores unknown keys, and raises
`HeaderError` naming the field when a required one is missing or malformed - the processor
answers that with a clear remark instead of dropping the connection.

Number fields are `JavaInt` or `JavaLong`, as the Java header declares them (`Integer`,
`Long`): a value outside that width is malformed, as `Integer.parseInt` finds it in a Java
broker, so a queue id of 10^30 or a commit offset past 2^63 never reaches a processor, a
store file or a config file.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Self

from rmqpy.config.compiled import twin
from rmqpy.remoting.errors import RemotingError
from rmqpy.remoting.wire import INT_VALUES, LONG_VALUES


class HeaderError(RemotingError):
    """A request's custom header lacks a required field or carries a malformed value."""


@dataclasses.dataclass(frozen=True, slots=True)
class JavaWidth:
    """The Java type of a header's number field, and the values it holds."""

    name: str
    values: range


JAVA_INT = JavaWidth("int", INT_VALUES)
JAVA_LONG = JavaWidth("long", LONG_VALUES)
JavaInt = Annotated[int, JAVA_INT]
JavaLong = Annotated[int, JAVA_LONG]


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
    default: Any  # dataclasses.MISSING: required
    width: JavaWidth | None  # number fields only

    def key(self, v2: bool) -> str:
        return self.v2 if v2 and self.v2 else self.wire


class ExtHeader:
    """Mixin: `from_ext` / `to_ext` for a frozen dataclass of str, int and bool fields."""

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    @functools.cache
    def _specs(cls) -> tuple[_FieldSpec, ...]:
        hints = typing.get_type_hints(cls, include_extras=True)
        specs = []
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            if typing.get_origin(hint) is not Annotated and typing.get_args(hint):
                hint = next(a for a in typing.get_args(hint) if a is not type(None))  # X | None
            extras = getattr(hint, "__metadata__", ())
            width = next((m for m in extras if isinstance(m, JavaWidth)), None)
            kind = typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint
            if kind is int and width is None:
                raise TypeError(f"{cls.__name__}.{f.name}: declare JavaInt or JavaLong, not int")
            name = f.metadata.get("wire") or _camel(f.name)
            specs.append(_FieldSpec(f.name, name, f.metadata.get("v2"), kind, f.default, width))
        return tuple(specs)

    @classmethod
    def wire_fields(cls) -> dict[str, tuple[type, JavaWidth | None]]:
        """Each field's wire name (not the V2 one), its type (str, int or bool), and for a
        number the Java type `from_ext` holds it to."""
        return {spec.wire: (spec.kind, spec.width) for spec in cls._specs()}

    @classmethod
    def ext_keys(cls, *, v2: bool = False) -> dict[str, str]:
        """Each field's key in the ext fields (the V2 one when `v2`), by attribute name."""
        return {spec.attr: spec.key(v2) for spec in cls._specs()}

    @classmethod
    def from_ext(cls, ext: Mapping[str, str], *, v2: bool = False) -> Self:
        parsed: Self = cls._parser(v2)(ext)
        return parsed

    def to_ext(self, *, v2: bool = False) -> dict[str, str]:
        ext: dict[str, str] = self._writer(v2)(self)
        return ext

    @classmethod
    @functools.cache
    def _parser(cls, v2: bool) -> Callable[[Mapping[str, str]], Any]:
        """`from_ext` for this class and naming: the compiled twin (`_parse.Parser`) where it
        is built, else the reference."""
        compiled = twin("rmqpy.remoting.headers._parse")
        if compiled is None:
            return cls._reference_parser(v2)
        fields = []
        for spec in cls._specs():
            kind = {str: 0, int: 1, bool: 2}[spec.kind]
            values = spec.width.values if spec.width is not None else range(0, 1)
            fields.append(
                compiled.Field(
                    spec.key(v2),
                    _slot_setter(cls, spec.attr),
                    None if spec.default is dataclasses.MISSING else spec.default,
                    spec.default is dataclasses.MISSING,
                    kind,
                    values.start,
                    values.stop - 1,
                    f"the custom header field {spec.wire}",
                    spec.width.name if spec.width is not None else "",
                )
            )
        parser: Callable[[Mapping[str, str]], Any] = compiled.Parser(cls, fields)
        return parser

    @classmethod
    @functools.cache
    def _reference_parser(cls, v2: bool) -> Callable[[Mapping[str, str]], Any]:
        """`from_ext` for this class and naming as straight-line code that fills the slots
        itself: a loop over the fields, and a frozen dataclass's `__init__` (one
        `object.__setattr__` per field), cost about 7 us per SEND_MESSAGE_V2 header."""
        env: dict[str, Any] = {"cls": cls, "new": object.__new__, "HeaderError": HeaderError}
        code = ["def parse(ext):", "    get = ext.get", "    self = new(cls)"]
        for i, spec in enumerate(cls._specs()):
            env[f"set{i}"] = _slot_setter(cls, spec.attr)
            env[f"default{i}"] = spec.default
            code += _field_code(i, spec, v2)
        code.append("    return self")
        return _compiled(code, env)

    @classmethod
    @functools.cache
    def _writer(cls, v2: bool) -> Callable[[Any], dict[str, str]]:
        """`to_ext` the same way: every field that is set, as a string (booleans as Java
        writes them)."""
        code = ["def write(self):", "    out = {}"]
        for spec in cls._specs():
            text = "'true' if v else 'false'" if spec.kind is bool else "str(v)"
            code += [f"    v = self.{spec.attr}", "    if v is not None:"]
            code.append(f"        out[{spec.key(v2)!r}] = {text}")
        code.append("    return out")
        return _compiled(code, {})


def _compiled(code: list[str], env: dict[str, Any]) -> Callable[..., Any]:
    """The one function `code` defines, with `env` as its globals (our own fields' code,
    generated as `dataclasses` generates `__init__`)."""
    exec("\n".join(code), env)
    name = code[0].removeprefix("def ").partition("(")[0]
    function: Callable[..., Any] = env[name]
    return function


def _slot_setter(cls: type, attr: str) -> Callable[[object, Any], None]:
    """Sets `attr` on a (frozen) instance of `cls` without its `__setattr__`: the slot's own
    descriptor, or `object.__setattr__` for a class without slots."""
    slot = next((k.__dict__[attr] for k in cls.__mro__ if attr in k.__dict__), None)
    if isinstance(slot, types.MemberDescriptorType):
        setter: Callable[[object, Any], None] = slot.__set__
        return setter
    return lambda obj, value: object.__setattr__(obj, attr, value)


def _field_code(i: int, spec: _FieldSpec, v2: bool) -> list[str]:
    """Lines of a generated parser that read field `i`'s key and set it (see `_parser`)."""
    head = f"the custom header field {spec.wire}"
    setter = f"set{i}"
    if spec.kind is str:
        value = "raw"
    elif spec.kind is int:  # int() ignores surrounding whitespace
        value = "int(raw)"
    elif spec.kind is bool:  # Java's Boolean.parseBoolean
        value = "raw.strip().lower() == 'true'"
    else:
        raise TypeError(f"unsupported header field type {spec.kind!r}")
    missing = (
        f"raise HeaderError({head + ' is null'!r})"
        if spec.default is dataclasses.MISSING
        else f"{setter}(self, default{i})"
    )
    lines = [f"    raw = get({spec.key(v2)!r})", "    if raw is None:", f"        {missing}"]
    lines.append("    else:")
    if spec.width is None:
        return [*lines, f"        {setter}(self, {value})"]
    too_wide = f"{head} does not fit a Java {spec.width.name}: "
    return [
        *lines,
        "        try:",
        f"            number = {value}",
        "        except ValueError:",
        f"            raise HeaderError({head + ' is not a number: '!r} + repr(raw)) from None",
        f"        if not {spec.width.values.start} <= number < {spec.width.values.stop}:",
        f"            raise HeaderError({too_wide!r} + repr(raw))",
        f"        {setter}(self, number)",
    ]
