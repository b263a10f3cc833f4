"""Offset requests: consumer offsets (14, 15), queue bounds (30, 31), search by time (29) and
earliest store time (32)."""

from __future__ import annotations

from dataclasses import dataclass

from rmqpy.remoting.headers import ExtHeader, JavaInt, JavaLong


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader(ExtHeader):
    consumer_group: str
    topic: str
    queue_id: JavaInt
    set_zero_if_not_found: bool | None = None


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader(ExtHeader):
    consumer_group: str
    topic: str
    queue_id: JavaInt
    commit_offset: JavaLong


@dataclass(frozen=True, slots=True)
class GetMaxOffsetRequestHeader(ExtHeader):
    topic: str
    queue_id: JavaInt
    committed: bool | None = None


@dataclass(frozen=True, slots=True)
class GetMinOffsetRequestHeader(ExtHeader):
    topic: str
    queue_id: JavaInt


@dataclass(frozen=True, slots=True)
class SearchOffsetRequestHeader(ExtHeader):
    topic: str
    queue_id: JavaInt
    timestamp: JavaLong
    boundary_type: str | None = None  # "lower" (default) or "upper"


@dataclass(frozen=True, slots=True)
class GetEarliestMsgStoretimeRequestHeader(ExtHeader):
    topic: str
    queue_id: JavaInt


@dataclass(frozen=True, slots=True)
class OffsetResponseHeader(ExtHeader):
    """The answer of 14, 29, 30 and 31."""

    offset: JavaLong


@dataclass(frozen=True, slots=True)
class GetEarliestMsgStoretimeResponseHeader(ExtHeader):
    timestamp: JavaLong
