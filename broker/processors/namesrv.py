"""Name-server requests (RocketMQ `DefaultRequestProcessor`): GET_ROUTEINFO_BY_TOPIC
(105), GET_BROKER_CLUSTER_INFO (106), REGISTER_BROKER (103), UNREGISTER_BROKER (104).

A route query for a topic no broker has is answered TOPIC_NOT_EXIST, as Java's name server
answers it, and creates nothing: RocketMQ producers then send through TBW102's route and the
broker creates the topic on the first send. With `route_unknown_through_default` the name
server builds that route itself (for ali-ons, which gives up on TOPIC_NOT_EXIST).
"""

from __future__ import annotations

import zlib
from typing import Any

import structlog

from rmqpy.broker.clients import parse_json_body
from rmqpy.broker.context import BadRequest, RequestContext, json_body
from rmqpy.broker.executors import FamilyExecutor, Table, per_request
from rmqpy.broker.route import RouteInfoManager
from rmqpy.remoting.codes import RequestCode, ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.headers import JAVA_INT
from rmqpy.remoting.headers.admin import TopicRequestHeader
from rmqpy.remoting.headers.namesrv import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)

log = structlog.get_logger(__name__)

# A RocketMQ client's defaultTopicQueueNums (Java, C++, Go and ali-ons alike): the queues its
# first send asks the broker to create a topic with.
CLIENT_DEFAULT_TOPIC_QUEUE_NUMS = 4


class NamesrvProcessor:
    def __init__(self, routes: RouteInfoManager, route_unknown_through_default: bool) -> None:
        self.routes = routes
        self.route_unknown_through_default = route_unknown_through_default

    def get_route(self, ctx: RequestContext) -> RemotingCommand:
        topic = TopicRequestHeader.from_ext(ctx.request.ext_fields).topic
        route = self.routes.route_for(topic)
        if route is None and self.route_unknown_through_default:
            route = self.routes.route_through_default(topic, CLIENT_DEFAULT_TOPIC_QUEUE_NUMS)
        if route is None:
            return ctx.request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        return ctx.request.response(body=json_body(route))

    def get_cluster_info(self, ctx: RequestContext) -> RemotingCommand:
        return ctx.request.response(body=json_body(self.routes.cluster_info()))

    def register_broker(self, ctx: RequestContext) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_ext(ctx.request.ext_fields)
        body = ctx.request.body
        if h.body_crc32 and zlib.crc32(body) & 0x7FFFFFFF != h.body_crc32:  # UtilAll.crc32
            return ctx.request.response(ResponseCode.SYSTEM_ERROR, "the body CRC32 does not match")
        if h.compressed:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR, "compressed broker registration is not supported"
            )
        topics = registered_topics(body)
        master = self.routes.register_broker(
            h.cluster_name, h.broker_name, h.broker_id, h.broker_addr, topics
        )
        ext = RegisterBrokerResponseHeader(h.ha_server_addr, master).to_ext()
        return ctx.request.response(ext_fields=ext)

    def table(self, executor: FamilyExecutor) -> Table:
        """The name server's request codes, served on `executor`."""
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: (per_request(self.get_route), executor),
            RequestCode.GET_BROKER_CLUSTER_INFO: (per_request(self.get_cluster_info), executor),
            RequestCode.REGISTER_BROKER: (per_request(self.register_broker), executor),
            RequestCode.UNREGISTER_BROKER: (per_request(self.unregister_broker), executor),
        }

    def unregister_broker(self, ctx: RequestContext) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.from_ext(ctx.request.ext_fields)
        self.routes.unregister_broker(h.broker_addr)
        return ctx.request.response()


ROUTE_NUMBERS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")


def registered_topics(body: bytes) -> dict[str, dict[str, Any]]:
    """The topicConfigTable of a REGISTER_BROKER body, each topic's numbers read as fastjson
    binds them to TopicConfig's ints. A body that does not bind is a BadRequest: kept, it
    would fail every later route query for its topics."""
    if not body:
        return {}
    try:
        wrapper = parse_json_body(body).get("topicConfigSerializeWrapper") or {}
        table = wrapper.get("topicConfigTable") or {}
        if not isinstance(table, dict):
            raise TypeError("topicConfigTable is not a JSON object")
        topics: dict[str, dict[str, Any]] = {}
        for name, config in table.items():
            if not isinstance(config, dict):
                raise TypeError(f"the config of topic {name} is not a JSON object")
            numbers = {k: int(config[k]) for k in ROUTE_NUMBERS if k in config}
            if any(n not in JAVA_INT.values for n in numbers.values()):
                raise ValueError(f"a number of topic {name} does not fit a Java int")
            topics[str(name)] = {**config, **numbers}
    except (ValueError, TypeError, AttributeError) as exc:  # (UnicodeDecodeError too)
        raise BadRequest(f"bad broker registration body: {exc}") from None
    return topics
