"""Load typed config dataclasses from a RocketMQ-style `broker.conf`, the environment and overrides.

A broker.conf is a Java properties file: `key=value` lines, `#` or `!` comments. Keys are
RocketMQ's camelCase names (`flushDiskType=SYNC_FLUSH`); our snake_case field names are
accepted too. Environment variables `RMQPY_<FIELD_NAME_UPPER>` override the file, and explicit
overrides (CLI flags) override both. Unknown keys are kept in `unknown` so the caller can warn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields
from enum import Enum
from typing import Any, TypeVar

from rmqpy.config.store_config import java_key

T = TypeVar("T")


class ConfigError(ValueError):
    """A setting that is missing its type's form (`maxMessageSize=big`)."""


def parse_properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            out[line] = ""
            continue
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out


def _coerce(name: str, default: Any, raw: str) -> Any:
    try:
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.lower() == "true"
        if isinstance(default, Enum):
            return type(default)[raw.strip().upper()]
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        return raw
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"setting {name}: {raw!r} is not {_allowed(default)}") from exc


def _allowed(default: Any) -> str:
    """What a setting accepts, for the error that stops startup."""
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, Enum):
        return "one of " + ", ".join(m.name for m in type(default))
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    return "a string"


def load_config(
    cls: type[T],
    conf_text: str = "",
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> tuple[T, dict[str, str]]:
    """`cls` from broker.conf text, then env vars, then overrides; returns (config, unknown)."""
    env = os.environ if environ is None else environ
    by_key: dict[str, str] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        by_key[java_key(f)] = f.name
        by_key[f.name] = f.name
    raw: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for key, value in parse_properties(conf_text).items():
        if key in by_key:
            raw[by_key[key]] = value
        else:
            unknown[key] = value
    for f in fields(cls):  # type: ignore[arg-type]
        env_value = env.get("RMQPY_" + f.name.upper())
        if env_value is not None:
            raw[f.name] = env_value
    for key, value in (overrides or {}).items():
        if key not in by_key:
            raise ConfigError(f"unknown setting {key}")
        raw[by_key[key]] = value
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in raw:
            values[f.name] = _coerce(java_key(f), f.default, raw[f.name])
    return cls(**values), unknown
