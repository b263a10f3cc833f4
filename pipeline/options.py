"""Reading a data source's options: Spark hands them over with their case folded away."""

from __future__ import annotations

from collections.abc import Mapping


def lowered(given: Mapping[str, str]) -> dict[str, str]:
    """The options with lower-case keys (`maxOffsetsPerTrigger` arrives as either)."""
    return {k.lower(): v for k, v in given.items()}


def flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name, str(default)).lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {value!r}")
    return value == "true"


def namesrv(options: Mapping[str, str]) -> str:
    """`rmqpy.namesrv`, or its alias `rmqpy.servers` (as Kafka's `kafka.bootstrap.servers`)."""
    value = options.get("rmqpy.namesrv") or options.get("rmqpy.servers")
    if not value:
        raise ValueError("rmqpy needs option rmqpy.namesrv (host:port[;host:port])")
    return value
