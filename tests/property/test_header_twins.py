"""The compiled header parser (`rmqpy.remoting.headers._parse`) against the parsers the reference
generates: every header class, both namings, random ext fields (numbers as Java and not
quite as Java writes them), the same header or the same error."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmqpy.remoting.headers
from rmqpy.config.compiled import PURE_PYTHON
from rmqpy.remoting.headers import ExtHeader
from rmqpy.remoting.headers.send import SendMessageRequestHeader

pytest.importorskip("rmqpy.remoting.headers._parse", reason="the compiled core is not built")

for _module in pkgutil.iter_modules(rmqpy.remoting.headers.__path__):
    importlib.import_module(f"rmqpy.remoting.headers.{_module.name}")


def header_classes() -> list[type[ExtHeader]]:
    found: list[type[ExtHeader]] = []
    todo = list(ExtHeader.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return sorted(found, key=lambda c: c.__qualname__)


CLASSES = header_classes()
VALUES = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.integers(-(2**31) - 2, 2**31 + 1).map(str),
    st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63)])
    .map(str),  # each Java width's edges
    st.sampled_from(
        ["", "-", "--1", "+7", " 12 ", "1_000", "٣", "0x10", "1e3", "007", "-0",
         "true", "TRUE", " True ", "false", "yes", "9" * 18, "9" * 19, "-" + "9" * 19]
    ),
    st.text(max_size=6),
)  # fmt: skip


def outcome(parse: Any, ext: dict[str, str]) -> object:
    try:
        return parse(ext)
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(CLASSES), st.booleans(), st.data())
def test_both_parsers_read_every_header_alike(
    cls: type[ExtHeader], v2: bool, data: st.DataObject
) -> None:
    keys = [spec.key(v2) for spec in cls._specs()]
    ext = data.draw(
        st.dictionaries(st.sampled_from(keys) | st.text(max_size=3), VALUES, max_size=len(keys) + 2)
    )
    if data.draw(st.booleans()):  # most fields present, as clients send them
        ext = {**{k: data.draw(VALUES) for k in keys}, **ext}
    compiled = cls._parser(v2)
    assert outcome(compiled, ext) == outcome(cls._reference_parser(v2), ext)


def test_headers_are_parsed_by_the_compiled_twin_unless_told_not_to() -> None:
    parser = SendMessageRequestHeader._parser(True)
    if PURE_PYTHON:
        assert parser is SendMessageRequestHeader._reference_parser(True)
    else:
        assert type(parser).__module__ == "rmqpy.remoting.headers._parse"
