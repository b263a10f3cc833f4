"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) (RocketMQ `PullMessageProcessor`).

The body of a found pull is the stored records back to back. Every answer carries
`nextBeginOffset`, `minOffset`, `maxOffset` and `suggestWhichBrokerId` (clients crash without
them). A pull that would answer PULL_NOT_FOUND and carries SUSPEND is parked in the hold
service; its second run (`ctx` flagged `resumed`) never parks and never commits an offset.
"""

from __future__ import annotations

import time

from broker.clients import ClientManager, Subscription
from broker.context import RequestContext
from broker.groups import SubscriptionGroupManager
from broker.long_polling import ParkedPull, PullRequestHoldService
from broker.metrics import BrokerMetrics
from broker.offsets import ConsumerOffsetManager
from broker.topics import TopicConfigManager
from remoting.codes import PERM_READ, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers.pull import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from store.layout import GetMessageStatus
from store.message_store import GetMessageResult, MessageStore

STATUS_CODES = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
}
EMPTY_QUEUE = (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)


class PullProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        clients: ClientManager,
        offsets: ConsumerOffsetManager,
        hold: PullRequestHoldService,
        broker_permission: int,
        long_polling_enable: bool,
        short_polling_ms: int,
        is_master: bool,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.clients = clients
        self.offsets = offsets
        self.hold = hold
        self.broker_permission = broker_permission
        self.long_polling_enable = long_polling_enable
        self.short_polling_ms = short_polling_ms
        self.is_master = is_master
        self.metrics = metrics

    def reads_memory(self, ctx: RequestContext) -> bool:
        """Whether this pull reads only what the page cache holds, and so may run on the
        event loop (see `MessageStore.pull_reads_memory`); taken from the raw fields, before
        the header is parsed - a malformed one raises, and goes to a pull thread."""
        ext = ctx.request.ext_fields
        return self.store.pull_reads_memory(
            ext["topic"], int(ext["queueId"]), int(ext["queueOffset"])
        )

    def __call__(self, ctx: RequestContext) -> RemotingCommand | None:
        if ctx.resumed and ctx.conn.closed.done():
            return None  # its consumer hung up while it was held: read nothing for nobody
        h = PullMessageRequestHeader.from_ext(ctx.request.ext_fields)
        refusal = self._refusal(ctx, h)
        if refusal is not None:
            return refusal
        if h.expression_type not in (None, "", "TAG"):
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR,
                "The broker does not support consumer to filter message by SQL92",
            )
        if h.sys_flag & FLAG_SUBSCRIPTION:
            sub = Subscription.parse(h.topic, h.subscription, h.sub_version)
        else:
            sub = self.clients.subscription(h.consumer_group, h.topic) or Subscription.parse(
                h.topic, "*"
            )
        result = self.store.get_message(
            h.topic,
            h.queue_id,
            h.queue_offset,
            h.max_msg_nums,
            sub.codes,
            h.max_msg_bytes,
        )
        code, next_begin = _code_and_next(result, h.queue_offset)
        first_pass = not ctx.resumed
        if (
            first_pass
            and h.sys_flag & FLAG_COMMIT_OFFSET
            and self.is_master
            and h.commit_offset >= 0
        ):
            self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        if code == ResponseCode.PULL_NOT_FOUND and first_pass and h.sys_flag & FLAG_SUSPEND:
            hold_ms = (
                h.suspend_timeout_millis if self.long_polling_enable else self.short_polling_ms
            )
            ctx.resumed = True
            self.hold.park(
                ParkedPull(
                    ctx, h.topic, h.queue_id, h.queue_offset, sub, time.monotonic() + hold_ms / 1000
                )
            )
            return None
        ext = PullMessageResponseHeader(
            0, next_begin, result.min_offset, result.max_offset
        ).to_ext()
        body = result.body if code == ResponseCode.SUCCESS else b""
        if self.metrics is not None:
            self.metrics.record_pull(
                h.consumer_group,
                h.topic,
                h.queue_id,
                next_begin,
                result.count if body else 0,
                len(body),
            )
        return ctx.request.response(code, result.status.name, ext, body)

    def _refusal(self, ctx: RequestContext, h: PullMessageRequestHeader) -> RemotingCommand | None:
        if not self.broker_permission & PERM_READ:
            return ctx.request.response(
                ResponseCode.NO_PERMISSION, "the broker pulling message is forbidden"
            )
        group = self.groups.find(h.consumer_group)
        if group is None:
            return ctx.request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{h.consumer_group}] does not exist",
            )
        if not group.consumeEnable:
            return ctx.request.response(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}"
            )
        config = self.topics.get(h.topic)
        if config is None:
            return ctx.request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!"
            )
        if not config.readable:
            return ctx.request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden"
            )
        if not 0 <= h.queue_id < config.readQueueNums:
            return ctx.request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{config.readQueueNums}] consumer:[{ctx.client_addr}]",
            )
        return None


def _code_and_next(result: GetMessageResult, offset: int) -> tuple[int, int]:
    if result.status in EMPTY_QUEUE:
        code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
        return code, result.next_begin_offset
    return STATUS_CODES.get(result.status, ResponseCode.SYSTEM_ERROR), result.next_begin_offset
