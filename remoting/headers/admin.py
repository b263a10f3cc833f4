"""Client and admin requests: unregister (35), consumer list (38), ids changed (40), send
back (36), topic create/delete (17, 215) and the name server's route query (105)."""

from __future__ import annotations

from dataclasses import dataclass

from remoting.headers import ExtHeader, wire


@dataclass(frozen=True, slots=True)
class UnregisterClientRequestHeader(ExtHeader):
    client_id: str = wire("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupRequestHeader(ExtHeader):
    """GET_CONSUMER_LIST_BY_GROUP (38) and NOTIFY_CONSUMER_IDS_CHANGED (40)."""

    consumer_group: str


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequestHeader(ExtHeader):
    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool | None = None
    max_reconsume_times: int | None = None


@dataclass(frozen=True, slots=True)
class CreateTopicRequestHeader(ExtHeader):
    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    topic_sys_flag: int | None = None
    order: bool | None = None


@dataclass(frozen=True, slots=True)
class TopicRequestHeader(ExtHeader):
    """DELETE_TOPIC_IN_BROKER (215) and GET_ROUTEINFO_BY_TOPIC (105)."""

    topic: str
