"""Reading a data source's options: Spark hands them over with their case folded away; and
the offsets both sources take, as Spark's Kafka source spells them."""

from __future__ import annotations

import json
from collections.abc import Mapping

EARLIEST, LATEST = -2, -1
Offsets = dict[str, dict[str, int]]  # {"topic": {"queueId": offset}}
OffsetSpec = int | Offsets  # EARLIEST or LATEST for every queue, or per queue


def lowered(given: Mapping[str, str]) -> dict[str, str]:
    """The options with lower-case keys (`maxOffsetsPerTrigger` arrives as either)."""
    return {k.lower(): v for k, v in given.items()}


def flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name, str(default)).lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {value!r}")
    return value == "true"


def positive(options: Mapping[str, str], name: str, default: int) -> int:
    """The whole number ≥ 1 given as option `name` (looked up lower-cased), else `default`."""
    text = options.get(name.lower(), str(default)).strip()
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"option {name} must be a whole number of at least 1, not {text!r}")
    return int(text)


def namesrv(options: Mapping[str, str]) -> str:
    """`rmqpy.namesrv`, or its alias `rmqpy.servers` (as Kafka's `kafka.bootstrap.servers`)."""
    value = options.get("rmqpy.namesrv") or options.get("rmqpy.servers")
    if not value:
        raise ValueError("rmqpy needs option rmqpy.namesrv (host:port[;host:port])")
    return value


def offset_spec(text: str) -> OffsetSpec:
    """`earliest`, `latest` or JSON `{"topic": {"queueId": offset}}` (−2 earliest, −1 latest)."""
    if text in ("earliest", "latest"):
        return EARLIEST if text == "earliest" else LATEST
    parsed: Offsets = json.loads(text)
    return parsed


def offset_of(spec: OffsetSpec, topic: str, key: str, missing: int, bounds: tuple[int, int]) -> int:
    """One queue's offset under `spec`: a queue the JSON leaves out takes `missing`; −2 and −1
    become the queue's (low, high) `bounds`."""
    value = spec if isinstance(spec, int) else spec.get(topic, {}).get(key, missing)
    low, high = bounds
    return low if value == EARLIEST else high if value == LATEST else value
