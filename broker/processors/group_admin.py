"""What `mqadmin` and RocketMQ Dashboard ask a broker about topics' queues and consumer groups
(RocketMQ `AdminBrokerProcessor`, `Broker2Client`), with Java 4.9's bodies:

- UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), DELETE_SUBSCRIPTIONGROUP (207);
- GET_TOPIC_STATS_INFO (202): `TopicStatsTable`, min/max offset and last store time per queue;
- GET_CONSUME_STATS (208): `ConsumeStats`, broker and consumer offset per queue, and the
  group's messages a second over the last minute;
- GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204): who is connected;
- QUERY_TOPIC_CONSUME_BY_WHO (300): `GroupList`;
- INVOKE_BROKER_TO_RESET_OFFSET (222): offsets moved to a time (or each queue's end);
- CONSUME_MESSAGE_DIRECTLY (309): one stored message handed to one consumer of a group, whose
  answer (`ConsumeMessageDirectlyResult`) is the answer.

Maps keyed by a queue are written as fastjson writes `Map<MessageQueue, V>` (object keys).
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from rmqpy.broker.clients import ClientIdentity, ClientManager, ConsumerClient, Subscription
from rmqpy.broker.context import BadRequest, RequestContext
from rmqpy.broker.groups import SubscriptionGroupConfig, SubscriptionGroupManager
from rmqpy.broker.metrics import OutRates
from rmqpy.broker.offsets import ConsumerOffsetManager
from rmqpy.broker.topics import TopicConfigManager
from rmqpy.config.java_json import ObjectKeyed, dumps, loads
from rmqpy.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import RemotingError, RemotingTimeoutError
from rmqpy.remoting.headers.admin import (
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerGroupRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    ProducerGroupRequestHeader,
    ResetOffsetRequestHeader,
    TopicRequestHeader,
)
from rmqpy.store.consume_queue import BoundaryType
from rmqpy.store.message_id import decode_offset_msg_id
from rmqpy.store.message_store import MessageStore

log = structlog.get_logger(__name__)

CALL_CLIENT_TIMEOUT_S = 10.0  # Java's Broker2Client.callClient


def message_queue(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    """RocketMQ `MessageQueue` as fastjson writes it."""
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def java_body(value: Any) -> bytes:
    return dumps(value).encode("utf-8")


class GroupAdminProcessor:
    def __init__(
        self,
        store: MessageStore,
        broker_name: str,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        clients: ClientManager,
        rates: OutRates,
    ) -> None:
        self.store = store
        self.broker_name = broker_name
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.rates = rates

    # --- subscription groups ------------------------------------------------------------------
    def update_group(self, ctx: RequestContext) -> RemotingCommand:
        try:
            value = loads(ctx.request.body.decode("utf-8"))
            if not isinstance(value, dict) or not str(value.get("groupName") or ""):
                raise ValueError("the body names no groupName")
            config = SubscriptionGroupConfig.from_json(value)
        except (ValueError, UnicodeDecodeError, TypeError) as exc:
            raise BadRequest(f"bad subscription group body: {exc}") from exc
        self.groups.update(config)
        return ctx.request.response()

    def delete_group(self, ctx: RequestContext) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_ext(ctx.request.ext_fields)
        self.groups.delete(h.group_name)
        if h.remove_offset:
            self.offsets.remove_group(h.group_name)
        return ctx.request.response()

    # --- queues and progress ------------------------------------------------------------------
    def topic_stats(self, ctx: RequestContext) -> RemotingCommand:
        topic = TopicRequestHeader.from_ext(ctx.request.ext_fields).topic
        config = self.topics.get(topic)
        if config is None:
            return ctx.request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table = []
        for queue_id in range(config.writeQueueNums):
            low = max(0, self.store.get_min_offset_in_queue(topic, queue_id))
            high = max(0, self.store.get_max_offset_in_queue(topic, queue_id))
            last = self.store.get_message_store_timestamp(topic, queue_id, high - 1) if high else 0
            offsets = {"lastUpdateTimestamp": last, "maxOffset": high, "minOffset": low}
            table.append((message_queue(topic, self.broker_name, queue_id), offsets))
        return ctx.request.response(body=java_body({"offsetTable": ObjectKeyed.of(table)}))

    def consume_stats(self, ctx: RequestContext) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_ext(ctx.request.ext_fields)
        group = h.consumer_group
        topics = {h.topic} if h.topic else self.offsets.topics_of(group)
        subscribed = self.clients.subscribed_topics(group)
        table = []
        tps = 0.0
        for topic in sorted(topics):
            config = self.topics.get(topic)
            if config is None or (subscribed and topic not in subscribed):
                continue  # as Java: an online group's stats cover what it subscribes to
            for queue_id in range(config.readQueueNums):
                high = max(0, self.store.get_max_offset_in_queue(topic, queue_id))
                consumed = max(0, self.offsets.query(group, topic, queue_id))
                offsets = {"brokerOffset": high, "consumerOffset": consumed, "lastTimestamp": 0}
                if consumed > 0:
                    stamp = self.store.get_message_store_timestamp(topic, queue_id, consumed - 1)
                    offsets["lastTimestamp"] = max(0, stamp)
                table.append((message_queue(topic, self.broker_name, queue_id), offsets))
            tps += self.rates.per_second(topic, group)
        body = {"consumeTps": tps, "offsetTable": ObjectKeyed.of(table)}
        return ctx.request.response(body=java_body(body))

    def consume_by_who(self, ctx: RequestContext) -> RemotingCommand:
        topic = TopicRequestHeader.from_ext(ctx.request.ext_fields).topic
        groups = self.clients.groups_consuming(topic) | self.offsets.groups_of(topic)
        return ctx.request.response(body=java_body({"groupList": sorted(groups)}))

    # --- connections --------------------------------------------------------------------------
    def consumer_connections(self, ctx: RequestContext) -> RemotingCommand:
        group = ConsumerGroupRequestHeader.from_ext(ctx.request.ext_fields).consumer_group
        members = self.clients.consumer_members(group)
        if not members:
            return ctx.request.response(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        first = members[0]
        subscriptions: dict[str, Any] = {}
        for member in members:
            for topic, sub in member.subscriptions.items():
                subscriptions.setdefault(topic, subscription_data(topic, sub))
        body = {
            "connectionSet": [connection(m.client_id, m.conn.peer, m.identity) for m in members],
            "consumeFromWhere": first.consume_from_where,
            "consumeType": first.consume_type,
            "messageModel": first.message_model,
            "subscriptionTable": subscriptions,
        }
        return ctx.request.response(body=java_body(body))

    def producer_connections(self, ctx: RequestContext) -> RemotingCommand:
        group = ProducerGroupRequestHeader.from_ext(ctx.request.ext_fields).producer_group
        members = self.clients.producer_members(group)
        if members is None:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
            )
        body = {
            "connectionSet": [
                connection(client_id, p.conn.peer, p.identity) for client_id, p in members.items()
            ]
        }
        return ctx.request.response(body=java_body(body))

    # --- one message to one consumer ----------------------------------------------------------
    def consume_directly(self, ctx: RequestContext) -> RemotingCommand:
        """As Java's `consumeMessageDirectly` + `callConsumer`: the record named by the
        offsetMsgId goes to the client, which has 10 s to answer (CONSUME_MSG_TIMEOUT)."""
        h = ConsumeMessageDirectlyResultRequestHeader.from_ext(ctx.request.ext_fields)
        group, client_id = h.consumer_group, h.client_id or ""
        member = next(
            (m for m in self.clients.consumer_members(group) if m.client_id == client_id), None
        )
        if member is None:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        try:
            _host, phy = decode_offset_msg_id(h.msg_id or "")
        except ValueError:
            raise BadRequest(f"msgId {h.msg_id!r} is not an offsetMsgId") from None
        record = self.store.look_message_by_offset(phy)
        if record is None:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR, f"no message at commitlog offset {phy}"
            )
        call = RemotingCommand(
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            ext_fields={**ctx.request.ext_fields, "brokerName": self.broker_name},
            body=record,
            serialize_type=member.serialize_type,
        )
        future = asyncio.run_coroutine_threadsafe(
            member.conn.invoke(call, CALL_CLIENT_TIMEOUT_S), self.clients.loop
        )
        try:
            answer = future.result(CALL_CLIENT_TIMEOUT_S + 1)
        except (TimeoutError, RemotingTimeoutError) as exc:
            return ctx.request.response(
                ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {exc}"
            )
        except (RemotingError, OSError) as exc:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR,
                f"invoke consumer <{group}> <{client_id}> Exception: {exc}",
            )
        return ctx.request.response(answer.code, answer.remark, body=answer.body)

    # --- reset ------------------------------------------------------------------------------
    def reset_offset(self, ctx: RequestContext) -> RemotingCommand:
        """Offsets of `group` on `topic` moved to the first message stored at or after
        `timestamp` (each queue's end for -1), only backwards unless `isForce`.

        Unlike Java 4.9, which leaves the move to the group's online clients (and answers
        CONSUMER_NOT_ONLINE without them, where mqadmin then commits the offsets itself), the
        broker commits the new offsets here, then tells each online client to drop what it
        pulled and carry on from them (RESET_CONSUMER_CLIENT_OFFSET, 220)."""
        h = ResetOffsetRequestHeader.from_ext(ctx.request.ext_fields)
        config = self.topics.get(h.topic)
        if config is None:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}",
            )
        committed = [self.offsets.query(h.group, h.topic, q) for q in range(config.readQueueNums)]
        online = self.clients.consumer_members(h.group)
        known = any(c >= 0 for c in committed) or online or h.group in self.groups.table
        if not known:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR, f"THe consumer group <{h.group}> not exist"
            )
        table = []
        for queue_id, consumed in enumerate(committed):
            if h.timestamp == -1:
                target = self.store.get_max_offset_in_queue(h.topic, queue_id)
            else:
                target = self.store.get_offset_in_queue_by_time(
                    h.topic, queue_id, h.timestamp, BoundaryType.LOWER
                )
            target = max(0, target)
            offset = target if h.is_force or consumed < 0 or target < consumed else consumed
            self.offsets.commit(h.group, h.topic, queue_id, offset)
            table.append((message_queue(h.topic, self.broker_name, queue_id), offset))
        log.info(
            "consumer offsets reset",
            group=h.group,
            topic=h.topic,
            to_time=h.timestamp,
            force=h.is_force,
            by=ctx.client_addr,
        )
        self._tell_clients(online, h, table)
        return ctx.request.response(body=java_body({"offsetTable": ObjectKeyed.of(table)}))

    def _tell_clients(
        self,
        online: list[ConsumerClient],
        h: ResetOffsetRequestHeader,
        table: list[tuple[dict[str, Any], int]],
    ) -> None:
        ext = ResetOffsetRequestHeader(h.topic, h.group, h.timestamp).to_ext()
        for_java = java_body({"offsetTable": ObjectKeyed.of(table)})
        # rocketmq-client-cpp reads `ResetOffsetBodyForC`: a list of queues with offsets
        for_cpp = java_body({"offsetTable": [{**mq, "offset": o} for mq, o in table]})
        for member in online:
            cpp = member.identity.language == LanguageCode.CPP.name
            cmd = RemotingCommand(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                ext_fields=dict(ext),
                body=for_cpp if cpp else for_java,
                serialize_type=member.serialize_type,
            )
            self.clients.send_to(member, cmd)


def connection(client_id: str, addr: str, identity: ClientIdentity) -> dict[str, Any]:
    """RocketMQ `Connection`."""
    return {
        "clientAddr": addr,
        "clientId": client_id,
        "language": identity.language,
        "version": identity.version,
    }


def subscription_data(topic: str, sub: Subscription) -> dict[str, Any]:
    """RocketMQ `SubscriptionData` as a consumer's heartbeat gave it."""
    return {
        "classFilterMode": False,
        "codeSet": sorted(sub.codes or ()),
        "expressionType": "TAG",
        "subString": sub.sub_string,
        "subVersion": sub.sub_version,
        "tagsSet": sorted(sub.tags or ()),
        "topic": topic,
    }
