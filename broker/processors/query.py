"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33) (RocketMQ `QueryMessageProcessor`)."""

from __future__ import annotations

from rmqpy.broker.context import RequestContext
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.headers.query import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ViewMessageRequestHeader,
)
from rmqpy.store.message_store import MessageStore

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


class QueryProcessor:
    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def query_message(self, ctx: RequestContext) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext(ctx.request.ext_fields)
        max_num = h.max_num
        if ctx.request.ext_fields.get(UNIQUE_KEY_QUERY, "").lower() == "true":
            max_num = self.store.config.default_query_max_num
        result = self.store.query_message(
            h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp
        )
        ext = QueryMessageResponseHeader(
            result.index_last_update_timestamp, result.index_last_update_phy_offset
        ).to_ext()
        if not result.messages:
            return ctx.request.response(
                ResponseCode.QUERY_NOT_FOUND,
                "can not find message, maybe time range not correct",
                ext,
            )
        return ctx.request.response(ext_fields=ext, body=b"".join(result.messages))

    def view_message_by_id(self, ctx: RequestContext) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext(ctx.request.ext_fields)
        data = self.store.look_message_by_offset(h.offset)
        if data is None:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}"
            )
        return ctx.request.response(body=data)
