"""Tag subscriptions (`*`, `TagA || TagB`), as consumers send them in heartbeats
and filter with on receipt (the broker filters by tag hash; the client again by the string)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rmqpy.store.java_hash import java_string_hash
from rmqpy.store.message import SUB_ALL, parse_tag_expression


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    expression: str = SUB_ALL
    version: int = field(default_factory=lambda: int(time.time() * 1000))
    tags: frozenset[str] = field(init=False, repr=False, compare=False)  # empty: every message

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", parse_tag_expression(self.expression))

    def matches(self, tags: str | None) -> bool:
        wanted = self.tags
        return not wanted or (tags is not None and tags in wanted)

    def to_json(self) -> dict[str, Any]:
        tags = sorted(self.tags)
        return {
            "topic": self.topic,
            "subString": self.expression.strip() or SUB_ALL,
            "tagsSet": tags,
            "codeSet": [java_string_hash(t) for t in tags],
            "subVersion": self.version,
            "expressionType": "TAG",
            "classFilterMode": False,
        }
