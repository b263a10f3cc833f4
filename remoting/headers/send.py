"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) headers."""

from __future__ import annotations

from dataclasses import dataclass

from rmqpy.remoting.headers import ExtHeader, JavaInt, JavaLong, wire


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeader(ExtHeader):
    """RocketMQ `SendMessageRequestHeader`; V2 requests carry the one-letter names."""

    producer_group: str = wire(v2="a")
    topic: str = wire(v2="b")
    default_topic: str = wire(v2="c")
    default_topic_queue_nums: JavaInt = wire(v2="d")
    queue_id: JavaInt = wire(v2="e")
    sys_flag: JavaInt = wire(v2="f")
    born_timestamp: JavaLong = wire(v2="g")
    flag: JavaInt = wire(v2="h")
    properties: str | None = wire(v2="i", default=None)
    reconsume_times: JavaInt | None = wire(v2="j", default=None)
    unit_mode: bool | None = wire(v2="k", default=None)
    max_reconsume_times: JavaInt | None = wire(v2="l", default=None)
    batch: bool | None = wire(v2="m", default=None)
    broker_name: str | None = wire(v2="n", default=None)


@dataclass(frozen=True, slots=True)
class SendMessageResponseHeader(ExtHeader):
    msg_id: str
    queue_id: JavaInt
    queue_offset: JavaLong
    transaction_id: str | None = None
    batch_uniq_id: str | None = None
