"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33) headers."""

from __future__ import annotations

from dataclasses import dataclass

from rmqpy.remoting.headers import ExtHeader, JavaInt, JavaLong, wire


@dataclass(frozen=True, slots=True)
class QueryMessageRequestHeader(ExtHeader):
    topic: str
    key: str
    max_num: JavaInt
    begin_timestamp: JavaLong
    end_timestamp: JavaLong


@dataclass(frozen=True, slots=True)
class QueryMessageResponseHeader(ExtHeader):
    index_last_update_timestamp: JavaLong
    index_last_update_phyoffset: JavaLong = wire("indexLastUpdatePhyoffset")


@dataclass(frozen=True, slots=True)
class ViewMessageRequestHeader(ExtHeader):
    offset: JavaLong
    topic: str | None = None
