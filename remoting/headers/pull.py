"""PULL_MESSAGE (11) headers (RocketMQ `PullMessageRequestHeader`)."""

from __future__ import annotations

from dataclasses import dataclass

from rmqpy.remoting.headers import ExtHeader, JavaInt, JavaLong

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
    queue_id: JavaInt
    queue_offset: JavaLong
    max_msg_nums: JavaInt
    sys_flag: JavaInt
    commit_offset: JavaLong
    suspend_timeout_millis: JavaLong
    sub_version: JavaLong
    subscription: str | None = None
    expression_type: str | None = None
    max_msg_bytes: JavaInt | None = None


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader(ExtHeader):
    suggest_which_broker_id: JavaLong
    next_begin_offset: JavaLong
    min_offset: JavaLong
    max_offset: JavaLong
