"""The JSON files under `config/` (topics.json, consumerOffset.json, subscriptionGroup.json,
delayOffset.json), as RocketMQ's `ConfigManager` keeps them.

Written like fastjson's pretty printer (tab indent) through tmp -> fsync -> rename, after
copying the previous version to `<name>.bak`; read leniently, because fastjson writes integer
map keys without quotes (`{0:12}`). A file that is missing or unreadable falls back to its
`.bak`, and the reason is logged.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from json.encoder import encode_basestring
from typing import Any, Generic, TypeVar

import structlog

from rmqpy.config.java_json import loads
from rmqpy.store.fileio import atomic_write

log = structlog.get_logger(__name__)

T = TypeVar("T")


class ConfigFileError(ValueError):
    """Neither a config file nor its .bak could be read."""


def load_config_file(path: str) -> dict[str, Any] | None:
    """The file's JSON object, else its .bak's, else None when neither exists."""
    errors = []
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            continue
        except UnicodeDecodeError as exc:
            errors.append(f"{candidate}: not UTF-8: {exc}")
            log.warning("config file unreadable, trying the backup", path=candidate, error=str(exc))
            continue
        if not text.strip():
            errors.append(f"{candidate} is empty")
            continue
        try:
            value = loads(text)
        except ValueError as exc:
            errors.append(f"{candidate}: {exc}")
            log.warning("config file unreadable, trying the backup", path=candidate, error=str(exc))
            continue
        if not isinstance(value, dict):
            errors.append(f"{candidate} does not hold a JSON object")
            continue
        return value
    if errors:
        raise ConfigFileError("; ".join(errors))
    return None


@contextlib.contextmanager
def reading(path: str) -> Iterator[None]:
    """Around turning a loaded file's JSON into tables: content of the wrong shape or type
    (a hand edit: `"offsetTable": {"T@g": {"0": "abc"}}`) becomes a ConfigFileError that
    names the file, which stops the start with one line, not a traceback."""
    try:
        yield
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigFileError(f"{path}: unexpected content: {exc!r}") from exc


def dump_fastjson(value: Any) -> str:
    return json.dumps(value, indent="\t", separators=(",", ":"), ensure_ascii=False)


def persist_config_file(path: str, snapshot: Callable[[], Any]) -> None:
    """Keep the current version as .bak, then replace the file atomically with what
    `snapshot()` returns (None: nothing to write). One writer per file at a time, and the
    snapshot is taken in turn: threads that change a table and persist it (a send creating
    a topic, an admin deleting one) neither trip over each other's temporary files nor
    leave an older snapshot written last."""

    def render() -> str | None:
        value = snapshot()
        return None if value is None else dump_fastjson(value)

    persist_config_text(path, render)


def persist_config_text(path: str, render: Callable[[], str | None]) -> None:
    """`persist_config_file` for a snapshot already rendered as the file's text."""
    path = os.path.abspath(path)
    with _PATH_LOCKS_LOCK:
        lock = _PATH_LOCKS.setdefault(path, threading.Lock())
    with lock:
        text = render()
        if text is None:
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            with open(path, "rb") as fh:
                atomic_write(path + ".bak", fh.read())
        atomic_write(path, text.encode("utf-8"))


class TableText(Generic[T]):
    """The text `dump_fastjson` gives `{**head, key: {name: to_json(entry), ...}}` (names
    sorted), for a file that is one table of small entries (topics.json,
    subscriptionGroup.json), re-encoding only the entries not seen at the last render:
    the table is written whole on every change, and encoding thousands of unchanged
    entries each time made creating a topic cost more the more topics there were. Entries
    must be immutable: an entry is known again by identity."""

    def __init__(self, key: str, to_json: Callable[[T], dict[str, Any]]) -> None:
        self.key = key
        self.to_json = to_json
        self._texts: dict[str, tuple[T, str]] = {}

    def render(self, head: dict[str, Any], table: dict[str, T]) -> str:
        texts: dict[str, tuple[T, str]] = {}
        lines = []
        for name in sorted(table):
            entry = table[name]
            known = self._texts.get(name)
            if known is None or known[0] is not entry:
                body = dump_fastjson(self.to_json(entry)).replace("\n", "\n\t\t")
                known = (entry, f"\n\t\t{encode_basestring(name)}:{body}")
            texts[name] = known
            lines.append(known[1])
        self._texts = texts
        items = [
            f"\n\t{encode_basestring(k)}:" + dump_fastjson(v).replace("\n", "\n\t")
            for k, v in head.items()
        ]
        table_text = "{" + ",".join(lines) + "\n\t}" if lines else "{}"  # lines: 2 tabs in
        items.append(f"\n\t{encode_basestring(self.key)}:{table_text}")
        return "{" + ",".join(items) + "\n}"


_PATH_LOCKS: dict[str, threading.Lock] = {}
_PATH_LOCKS_LOCK = threading.Lock()
