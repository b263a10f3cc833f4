"""Client requests (RocketMQ `ClientManageProcessor`, `ConsumerManageProcessor`): HEART_BEAT (34),
UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from rmqpy.broker.clients import ClientIdentity, ClientManager, parse_json_body
from rmqpy.broker.context import BadRequest, RequestContext, ResourceRefusal, json_body
from rmqpy.broker.groups import SubscriptionGroupManager
from rmqpy.broker.topics import TopicConfigManager, retry_topic
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.headers.admin import ConsumerGroupRequestHeader, UnregisterClientRequestHeader

MQ = tuple[str, str, int]  # topic, brokerName, queueId


class ClientProcessor:
    def __init__(
        self,
        clients: ClientManager,
        groups: SubscriptionGroupManager,
        topics: TopicConfigManager,
    ) -> None:
        self.clients = clients
        self.groups = groups
        self.topics = topics

    def heartbeat(self, ctx: RequestContext) -> RemotingCommand:
        try:
            data = parse_json_body(ctx.request.body)
            for consumer in data.get("consumerDataSet") or []:
                group = str(consumer.get("groupName") or "")
                config = self.groups.find(group) if group else None
                if config is not None and config.retryQueueNums > 0:
                    with contextlib.suppress(ResourceRefusal):  # made at a later heartbeat
                        self.topics.create_if_absent(retry_topic(group), config.retryQueueNums)
            request = ctx.request
            identity = ClientIdentity(request.language.name, request.version)
            self.clients.heartbeat(ctx.conn, request.serialize_type, data, identity)
        except (ValueError, UnicodeDecodeError, AttributeError, TypeError) as exc:
            return ctx.request.response(ResponseCode.SYSTEM_ERROR, f"bad heartbeat body: {exc}")
        return ctx.request.response()

    def unregister_client(self, ctx: RequestContext) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext(ctx.request.ext_fields)
        self.clients.unregister(h.client_id, h.producer_group, h.consumer_group)
        return ctx.request.response()

    def consumer_list(self, ctx: RequestContext) -> RemotingCommand:
        group = ConsumerGroupRequestHeader.from_ext(ctx.request.ext_fields).consumer_group
        ids = self.clients.consumer_ids(group)
        if not ids:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}"
            )
        return ctx.request.response(body=json_body({"consumerIdList": ids}))

    def lock_batch(self, ctx: RequestContext) -> RemotingCommand:
        group, client_id, mqs, raw = _lock_body(ctx)
        locked = self.clients.lock_batch(group, client_id, mqs)
        return ctx.request.response(body=json_body({"lockOKMQSet": [raw[i] for i in locked]}))

    def unlock_batch(self, ctx: RequestContext) -> RemotingCommand:
        group, client_id, mqs, _ = _lock_body(ctx)
        self.clients.unlock_batch(group, client_id, mqs)
        return ctx.request.response()


def _lock_body(ctx: RequestContext) -> tuple[str, str, list[MQ], list[dict[str, Any]]]:
    try:
        data = parse_json_body(ctx.request.body)
        raw = list(data.get("mqSet") or [])
        mqs = [(str(m["topic"]), str(m.get("brokerName", "")), int(m["queueId"])) for m in raw]
        return str(data["consumerGroup"]), str(data["clientId"]), mqs, raw
    except (KeyError, ValueError, TypeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"bad lock body: {exc}") from exc
