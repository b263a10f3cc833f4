"""PULL_MESSAGE (11) headers (spec §2.2, RocketMQ `PullMessageRequestHeader`)."""

from __future__ import annotations

from dataclasses import dataclass

from remoting.headers import ExtHeader

# Pull sysFlag bits (RocketMQ `PullSysFlag`).
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8
FLAG_LITE_PULL = 0x10


@dataclass(frozen=True, slots=True)
class PullMessageRequestHeader(ExtHeader):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None
    max_msg_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader(ExtHeader):
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
