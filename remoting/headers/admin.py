"""Client and admin requests: unregister (35), consumer list (38), ids changed (40), send
back (36), topic create/delete (17, 215) and the name server's route query (105)."""

from __future__ import annotations

from dataclasses import dataclass

from rmqpy.remoting.headers import ExtHeader, JavaInt, JavaLong, wire


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
    offset: JavaLong
    group: str
    delay_level: JavaInt
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool | None = None
    max_reconsume_times: JavaInt | None = None


@dataclass(frozen=True, slots=True)
class CreateTopicRequestHeader(ExtHeader):
    topic: str
    default_topic: str
    read_queue_nums: JavaInt
    write_queue_nums: JavaInt
    perm: JavaInt
    topic_filter_type: str
    topic_sys_flag: JavaInt | None = None
    order: bool | None = None


@dataclass(frozen=True, slots=True)
class TopicRequestHeader(ExtHeader):
    """DELETE_TOPIC_IN_BROKER (215) and GET_ROUTEINFO_BY_TOPIC (105)."""

    topic: str


@dataclass(frozen=True, slots=True)
class ProducerGroupRequestHeader(ExtHeader):
    """GET_PRODUCER_CONNECTION_LIST (204)."""

    producer_group: str


@dataclass(frozen=True, slots=True)
class GetConsumeStatsRequestHeader(ExtHeader):
    """GET_CONSUME_STATS (208): every topic of the group when `topic` is empty."""

    consumer_group: str
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteSubscriptionGroupRequestHeader(ExtHeader):
    """DELETE_SUBSCRIPTIONGROUP (207)."""

    group_name: str
    remove_offset: bool | None = None


@dataclass(frozen=True, slots=True)
class ResetOffsetRequestHeader(ExtHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and the broker's RESET_CONSUMER_CLIENT_OFFSET (220)
    to the group's clients. A timestamp of -1 means each queue's end."""

    topic: str
    group: str
    timestamp: JavaLong
    is_force: bool = wire("isForce", default=False)


@dataclass(frozen=True, slots=True)
class GetBrokerConfigResponseHeader(ExtHeader):
    """GET_BROKER_CONFIG (26): the configuration's data version, as JSON."""

    version: str


@dataclass(frozen=True, slots=True)
class ConsumeMessageDirectlyResultRequestHeader(ExtHeader):
    """CONSUME_MESSAGE_DIRECTLY (309): give one stored message (by its offsetMsgId) to one
    consumer of a group, which runs its listener on it and says how that went."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None
