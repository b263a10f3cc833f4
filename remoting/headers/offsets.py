"""Offset requests: consumer offsets (14, 15), queue bounds (30, 31), search by time (29) and
earliest store time (32) (spec §2.4)."""

from __future__ import annotations

from dataclasses import dataclass

from remoting.headers import ExtHeader


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader(ExtHeader):
    consumer_group: str
    topic: str
    queue_id: int
    set_zero_if_not_found: bool | None = None


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader(ExtHeader):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass(frozen=True, slots=True)
class GetMaxOffsetRequestHeader(ExtHeader):
    topic: str
    queue_id: int
    committed: bool | None = None


@dataclass(frozen=True, slots=True)
class GetMinOffsetRequestHeader(ExtHeader):
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class SearchOffsetRequestHeader(ExtHeader):
    topic: str
    queue_id: int
    timestamp: int
    boundary_type: str | None = None  # "lower" (default) or "upper"


@dataclass(frozen=True, slots=True)
class GetEarliestMsgStoretimeRequestHeader(ExtHeader):
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class OffsetResponseHeader(ExtHeader):
    """The answer of 14, 29, 30 and 31."""

    offset: int


@dataclass(frozen=True, slots=True)
class GetEarliestMsgStoretimeResponseHeader(ExtHeader):
    timestamp: int
