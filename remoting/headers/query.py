"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33) headers (spec §2.4)."""

from __future__ import annotations

from dataclasses import dataclass

from remoting.headers import ExtHeader, wire


@dataclass(frozen=True, slots=True)
class QueryMessageRequestHeader(ExtHeader):
    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int


@dataclass(frozen=True, slots=True)
class QueryMessageResponseHeader(ExtHeader):
    index_last_update_timestamp: int
    index_last_update_phyoffset: int = wire("indexLastUpdatePhyoffset")


@dataclass(frozen=True, slots=True)
class ViewMessageRequestHeader(ExtHeader):
    offset: int
    topic: str | None = None
