"""fastjson's JSON, as Java RocketMQ writes its request bodies and config files.

Two quirks go beyond standard JSON, both in maps whose keys are not strings:
- integer keys are written bare: `{"offsetTable":{0:12}}`;
- object keys are written as the object itself: a `Map<MessageQueue, Long>` becomes
  `{{"brokerName":"b","queueId":0,"topic":"T"}:12}` (ConsumeStats, TopicStatsTable,
  ResetOffsetBody).

`loads` reads both: a bare integer key comes back as its digits, an object key as its JSON
text (`object_key` turns that back into a dict). `dumps` writes standard JSON, which fastjson
reads, except for an `ObjectKeyed` map, written with object keys as fastjson expects them.
Shared by the broker, the store's config files and the SDK.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


def quote_keys(text: str) -> str:
    """The text with fastjson's bare integer keys and object keys quoted as JSON strings,
    leaving strings and values alone."""
    out: list[str] = []
    i, n = 0, len(text)
    stack: list[str] = []  # the open containers, "{" or "["
    expect_key = False
    while i < n:
        c = text[i]
        if c == '"':
            j = _string_end(text, i)
            out.append(text[i:j])
            i = j
            expect_key = False
            continue
        if expect_key and c == "{":  # an object as a key: quote it whole
            j = _object_end(text, i)
            out.append(json.dumps(text[i:j]))
            i = j
            expect_key = False
            continue
        if c in "{[":
            stack.append(c)
            expect_key = c == "{"
            out.append(c)
            i += 1
            continue
        if c in "}]":
            if stack:
                stack.pop()
            expect_key = False
            out.append(c)
            i += 1
            continue
        if c == ",":
            expect_key = bool(stack) and stack[-1] == "{"
            out.append(c)
            i += 1
            continue
        if expect_key and (c.isdigit() or c == "-"):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":
                out.append(f'"{text[i:j]}"')
                i = j
                expect_key = False
                continue
        if not c.isspace():
            expect_key = False
        out.append(c)
        i += 1
    return "".join(out)


def _string_end(text: str, i: int) -> int:
    """The index just past the string starting at text[i] (a quote)."""
    j, n = i + 1, len(text)
    while j < n and text[j] != '"':
        j += 2 if text[j] == "\\" else 1
    return j + 1


def _object_end(text: str, i: int) -> int:
    """The index just past the object starting at text[i] (an opening brace)."""
    depth, j, n = 0, i, len(text)
    while j < n:
        c = text[j]
        if c == '"':
            j = _string_end(text, j)
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise ValueError("an object key is not closed")


def loads(text: str) -> Any:
    """fastjson's JSON. Raises ValueError for what does not parse, nesting too deep for the
    parser's recursion included (`[[[[...`: a damaged file, or a request body meant to hurt)."""
    try:
        return json.loads(quote_keys(text))
    except RecursionError:
        raise ValueError("JSON nested too deep to parse") from None


def object_key(key: str) -> dict[str, Any]:
    """An object key as `loads` returns it (its JSON text), as a dict."""
    value = json.loads(key)
    if not isinstance(value, dict):
        raise ValueError(f"not an object key: {key[:80]!r}")
    return value


@dataclass(frozen=True, slots=True)
class ObjectKeyed:
    """A map whose keys are objects (Java's `Map<MessageQueue, V>`), as (key, value) pairs."""

    pairs: tuple[tuple[Mapping[str, Any], Any], ...]

    @classmethod
    def of(cls, pairs: Iterable[tuple[Mapping[str, Any], Any]]) -> ObjectKeyed:
        return cls(tuple(pairs))


def dumps(value: Any) -> str:
    """Standard JSON, keys sorted as fastjson sorts fields, with `ObjectKeyed` maps written
    as fastjson writes a map with object keys."""
    return "".join(_dump(value))


def _dump(value: Any) -> Iterable[str]:
    if isinstance(value, ObjectKeyed):
        yield "{"
        for n, (key, item) in enumerate(value.pairs):
            if n:
                yield ","
            yield from _dump(dict(key))
            yield ":"
            yield from _dump(item)
        yield "}"
    elif isinstance(value, Mapping):
        yield "{"
        for n, key in enumerate(sorted(value, key=str)):
            if n:
                yield ","
            yield json.dumps(str(key), ensure_ascii=False)
            yield ":"
            yield from _dump(value[key])
        yield "}"
    elif isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        yield "["
        for n, item in enumerate(items):
            if n:
                yield ","
            yield from _dump(item)
        yield "]"
    else:
        yield json.dumps(value, ensure_ascii=False)
