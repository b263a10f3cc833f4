"""Offset requests: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
GET_EARLIEST_MSG_STORETIME (32), GET_ALL_CONSUMER_OFFSET (43)
(RocketMQ `ConsumerManageProcessor`, `AdminBrokerProcessor`)."""

from __future__ import annotations

from rmqpy.broker.context import RequestContext, json_body
from rmqpy.broker.offsets import ConsumerOffsetManager
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.headers.offsets import (
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmqpy.store.consume_queue import BoundaryType
from rmqpy.store.message_store import MessageStore


class OffsetProcessor:
    def __init__(self, store: MessageStore, offsets: ConsumerOffsetManager) -> None:
        self.store = store
        self.offsets = offsets

    def query_consumer_offset(self, ctx: RequestContext) -> RemotingCommand:
        """Java 4.9.7: with nothing committed, 0 while the queue still starts at 0 and its
        first message is not only on disk; otherwise QUERY_NOT_FOUND (the client then
        applies its consumeFromWhere)."""
        h = QueryConsumerOffsetRequestHeader.from_ext(ctx.request.ext_fields)
        offset = self.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return _offset(ctx, offset)
        min_offset = self.store.get_min_offset_in_queue(h.topic, h.queue_id)
        if (
            h.set_zero_if_not_found is not False
            and min_offset <= 0
            and not self.store.check_in_disk_by_consume_offset(h.topic, h.queue_id, 0)
        ):
            return _offset(ctx, 0)
        return ctx.request.response(
            ResponseCode.QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        )

    def update_consumer_offset(self, ctx: RequestContext) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext(ctx.request.ext_fields)
        if h.commit_offset >= 0:
            self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return ctx.request.response()

    def get_max_offset(self, ctx: RequestContext) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext(ctx.request.ext_fields)
        return _offset(ctx, self.store.get_max_offset_in_queue(h.topic, h.queue_id))

    def get_min_offset(self, ctx: RequestContext) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_ext(ctx.request.ext_fields)
        return _offset(ctx, self.store.get_min_offset_in_queue(h.topic, h.queue_id))

    def search_offset(self, ctx: RequestContext) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext(ctx.request.ext_fields)
        boundary = (
            BoundaryType.UPPER if (h.boundary_type or "").lower() == "upper" else BoundaryType.LOWER
        )
        offset = self.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp, boundary)
        return _offset(ctx, offset)

    def get_earliest_store_time(self, ctx: RequestContext) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.from_ext(ctx.request.ext_fields)
        stamp = self.store.get_earliest_message_time(h.topic, h.queue_id)
        ext = GetEarliestMsgStoretimeResponseHeader(stamp).to_ext()
        return ctx.request.response(ext_fields=ext)

    def get_all_consumer_offset(self, ctx: RequestContext) -> RemotingCommand:
        return ctx.request.response(body=json_body(self.offsets.all_json()))


def _offset(ctx: RequestContext, offset: int) -> RemotingCommand:
    return ctx.request.response(ext_fields=OffsetResponseHeader(offset).to_ext())
