"""Admin requests (RocketMQ `AdminBrokerProcessor`): UPDATE_AND_CREATE_TOPIC (17),
DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG (26) and UPDATE_BROKER_CONFIG (25)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping

from rmqpy.broker.context import BadRequest, RequestContext, json_body
from rmqpy.broker.groups import SubscriptionGroupManager
from rmqpy.broker.offsets import ConsumerOffsetManager
from rmqpy.broker.topics import DataVersion, TopicConfig, TopicConfigManager
from rmqpy.config.properties import parse_properties
from rmqpy.config.security import redacted
from rmqpy.remoting.codes import BROKER_VERSION, ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.headers.admin import (
    CreateTopicRequestHeader,
    GetBrokerConfigResponseHeader,
    TopicRequestHeader,
)
from rmqpy.store.message import validate_topic
from rmqpy.store.message_store import MessageStore


class AdminProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        extra_runtime_info: Callable[[], dict[str, str]],
        on_topic_deleted: Callable[[str], None] = lambda _topic: None,
        settings: Callable[[], Mapping[str, str]] = dict,
        apply_settings: Callable[[Mapping[str, str]], None] | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.extra_runtime_info = extra_runtime_info
        self.on_topic_deleted = on_topic_deleted
        self.started_ms = int(time.time() * 1000)
        self.settings = settings
        self.apply_settings = apply_settings

    def create_topic(self, ctx: RequestContext) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext(ctx.request.ext_fields)
        problem = validate_topic(h.topic)
        if problem is not None:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR, f"The specified topic is illegal: {problem}"
            )
        if self.topics.is_system(h.topic):
            return self._system_topic(ctx, h.topic)
        if not (0 < h.read_queue_nums <= 1024 and 0 < h.write_queue_nums <= 1024):
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR, "readQueueNums and writeQueueNums must be 1..1024"
            )
        self.topics.put(
            TopicConfig(
                h.topic,
                h.read_queue_nums,
                h.write_queue_nums,
                h.perm,
                h.topic_filter_type or "SINGLE_TAG",
                h.topic_sys_flag or 0,
                bool(h.order),
            )
        )
        return ctx.request.response()

    def delete_topic(self, ctx: RequestContext) -> RemotingCommand:
        topic = TopicRequestHeader.from_ext(ctx.request.ext_fields).topic
        if self.topics.is_system(topic):  # deleting the schedule topic lost delayed messages
            return self._system_topic(ctx, topic)
        self.topics.delete(topic)
        self.offsets.remove_topic(topic)
        self.store.delete_topic(topic)
        self.on_topic_deleted(topic)
        return ctx.request.response()

    @staticmethod
    def _system_topic(ctx: RequestContext, topic: str) -> RemotingCommand:
        """RocketMQ's answer to an admin request on a system topic."""
        return ctx.request.response(
            ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic."
        )

    def all_topic_config(self, ctx: RequestContext) -> RemotingCommand:
        return ctx.request.response(body=json_body(self.topics.wrapper_json()))

    def all_subscription_groups(self, ctx: RequestContext) -> RemotingCommand:
        return ctx.request.response(body=self.groups.wrapper_text().encode("utf-8"))

    def runtime_info(self, ctx: RequestContext) -> RemotingCommand:
        table = {k: str(v) for k, v in self.store.runtime_info().items()}
        table["brokerVersion"] = str(BROKER_VERSION)
        table["brokerVersionDesc"] = "V4_9_4"
        table["bootTimestamp"] = str(self.started_ms)
        table["runtime"] = f"{(int(time.time() * 1000) - self.started_ms) // 1000}s"
        table.update(self.extra_runtime_info())
        return ctx.request.response(body=json_body({"table": table}))

    def broker_config(self, ctx: RequestContext) -> RemotingCommand:
        """Every setting in effect as `key=value` lines (Java's `getAllConfigsFormatString`),
        secrets masked; the header's version is the settings' DataVersion."""
        settings = redacted(self.settings())
        text = "".join(f"{key}={value}\n" for key, value in settings.items())
        version = DataVersion()
        version.timestamp = self.started_ms
        header = GetBrokerConfigResponseHeader(json.dumps(version.to_json()))
        return ctx.request.response(ext_fields=header.to_ext(), body=text.encode("utf-8"))

    def update_broker_config(self, ctx: RequestContext) -> RemotingCommand:
        """The settings of the body (`key=value` lines) applied to the running broker, all
        or none: those it can change live (`BrokerController.apply_settings`); any other is
        refused by name. Unlike Java 4.9, broker.conf is not rewritten."""
        try:
            changes = parse_properties(ctx.request.body.decode("utf-8"))
        except UnicodeDecodeError:
            raise BadRequest("the settings are not UTF-8 text") from None
        if self.apply_settings is None:
            return ctx.request.response(ResponseCode.SYSTEM_ERROR, "settings are read at start")
        try:
            self.apply_settings(changes)
        except ValueError as exc:
            return ctx.request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        return ctx.request.response()
