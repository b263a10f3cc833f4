"""Administration (RocketMQ `DefaultMQAdminExt`): clusters, broker runtime info and settings,
topics and their queues, subscription groups, their members, progress and lag per queue,
offsets reset by time, producers, message lookup by key or id, offset search by time.

    async with Admin(namesrv="127.0.0.1:9876") as admin:
        await admin.create_topic("T", queues=8)
        for row in await admin.consumer_offsets("my-group", "T"):
            print(row.queue, row.lag)
"""

from __future__ import annotations

import json
import ssl
import time
from dataclasses import dataclass
from typing import Any

from rmqpy.client.consumer import ConsumerBase
from rmqpy.client.errors import ClientError
from rmqpy.client.instance import ClientInstance
from rmqpy.client.message import (
    Message,
    MessageQueue,
    ReceivedMessage,
    decode_messages,
    queue_keyed,
)
from rmqpy.client.offset_store import RemoteOffsetStore
from rmqpy.client.producer import Producer
from rmqpy.client.route import TopicRoute
from rmqpy.client.transport import check
from rmqpy.config import java_json
from rmqpy.config.properties import parse_properties
from rmqpy.remoting.codes import (
    DEFAULT_TOPIC,
    MASTER_ID,
    PERM_READ,
    PERM_WRITE,
    TOOLS_CONSUMER_GROUP,
    RequestCode,
    ResponseCode,
)
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.headers.admin import (
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerGroupRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    ProducerGroupRequestHeader,
    ResetOffsetRequestHeader,
    TopicRequestHeader,
)
from rmqpy.remoting.headers.query import QueryMessageRequestHeader, ViewMessageRequestHeader
from rmqpy.remoting.signature import Credentials
from rmqpy.store.layout import MessageConst
from rmqpy.store.message_id import decode_offset_msg_id

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
RESEND_PRODUCER_GROUP = "rmqpy-resend"
# What a resent copy does not carry over: the broker's bookkeeping of the original's trip
RESEND_DROPPED = frozenset(
    (MessageConst.DELAY, MessageConst.REAL_TOPIC, MessageConst.REAL_QID, "MIN_OFFSET",
     "MAX_OFFSET", MessageConst.CLUSTER, MessageConst.WAIT)
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    """One queue's bounds and a group's progress in it."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    committed: int | None

    @property
    def lag(self) -> int:
        start = self.committed if self.committed is not None else self.min_offset
        return max(self.max_offset - max(start, self.min_offset), 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.queue.topic,
            "brokerName": self.queue.broker_name,
            "queueId": self.queue.queue_id,
            "minOffset": self.min_offset,
            "maxOffset": self.max_offset,
            "committed": self.committed,
            "lag": self.lag,
        }


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue's bounds and the store time of its last message (GET_TOPIC_STATS_INFO)."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            **self.queue.to_json(),
            "minOffset": self.min_offset,
            "maxOffset": self.max_offset,
            "lastUpdateTimestamp": self.last_update_ms,
        }


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """A group's progress in one queue (GET_CONSUME_STATS' OffsetWrapper)."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp_ms: int  # store time of the last message consumed, 0 when none

    @property
    def lag(self) -> int:
        return max(self.broker_offset - self.consumer_offset, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.queue.to_json(),
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "lag": self.lag,
            "lastTimestamp": self.last_timestamp_ms,
        }


@dataclass(frozen=True, slots=True)
class GroupProgress:
    """A consumer group's progress over every broker: per queue, and messages a second."""

    group: str
    queues: list[QueueProgress]
    consume_tps: float

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "consumeTps": self.consume_tps,
            "lag": self.lag,
            "queues": [q.to_json() for q in self.queues],
        }


@dataclass(frozen=True, slots=True)
class GroupMembers:
    """Who consumes as a group (GET_CONSUMER_CONNECTION_LIST), merged over the brokers."""

    group: str
    connections: list[dict[str, Any]]  # clientId, clientAddr, language, version
    subscriptions: dict[str, str]  # topic -> tag expression
    consume_type: str
    message_model: str
    consume_from_where: str

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.message_model,
            "consumeFromWhere": self.consume_from_where,
            "subscriptions": self.subscriptions,
            "connections": self.connections,
        }


class Admin:
    def __init__(
        self,
        namesrv: str = "127.0.0.1:9876",
        *,
        serialize: str = "auto",
        timeout_s: float = 3.0,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | bool | None = None,
        instance: ClientInstance | None = None,
    ) -> None:
        self.instance = instance or ClientInstance(
            namesrv, serialize=serialize, timeout_s=timeout_s, credentials=credentials, tls=tls
        )
        self._owns_instance = instance is None

    async def close(self) -> None:
        if self._owns_instance:
            await self.instance.close()

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, addr: str, code: int, header: Any = None, body: bytes = b"") -> Any:
        response = await self.instance.remoting.invoke(
            addr, code, header, body, timeout_s=self.instance.timeout_s
        )
        return check(response, addr)

    async def _masters(self, broker_addr: str | None = None) -> list[str]:
        """`broker_addr` alone, or every broker's master address."""
        return [broker_addr] if broker_addr else sorted((await self.brokers()).values())

    async def _topic_masters(self, topic: str) -> list[str]:
        """The master address of every broker of the topic's route (asked afresh)."""
        return sorted((await self.instance.route(topic, refresh=True)).masters().values())

    async def _on_each(
        self, addrs: list[str], code: int, header: Any = None, body: bytes = b""
    ) -> list[str]:
        """The same request to each broker in turn (the first failure raises); `addrs`."""
        for addr in addrs:
            await self._call(addr, code, header, body)
        return addrs

    # --- brokers --------------------------------------------------------------------------------
    async def brokers(self) -> dict[str, str]:
        """Master address of every broker the name server knows, by broker name."""
        out = {
            name: addrs[MASTER_ID]
            for name, addrs in (await self._broker_addr_table()).items()
            if MASTER_ID in addrs
        }
        if not out:
            raise ClientError("the name server knows no broker")
        return out

    async def _broker_addr_table(self) -> dict[str, dict[int, str]]:
        """Every broker address the name server knows, by broker name and broker id."""
        response = await self.instance.namesrv_invoke(RequestCode.GET_BROKER_CLUSTER_INFO)
        check(response, self.instance.namesrv_addrs[0])
        table = body_json(response).get("brokerAddrTable", {})
        return {
            str(name): {int(k): str(v) for k, v in data.get("brokerAddrs", {}).items()}
            for name, data in table.items()
        }

    async def runtime_info(self, broker_addr: str | None = None) -> dict[str, dict[str, str]]:
        """GET_BROKER_RUNTIME_INFO of one broker, or of every broker, by address."""
        addrs = await self._masters(broker_addr)
        out = {}
        for addr in addrs:
            response = await self._call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
            out[addr] = {str(k): str(v) for k, v in json.loads(response.body)["table"].items()}
        return out

    # --- topics -----------------------------------------------------------------------------------
    async def create_topic(
        self, topic: str, queues: int = 8, perm: int = PERM_READ | PERM_WRITE, order: bool = False
    ) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on every broker; the addresses that created it."""
        header = CreateTopicRequestHeader(
            topic=topic,
            default_topic=DEFAULT_TOPIC,
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=perm,
            topic_filter_type="SINGLE_TAG",
            topic_sys_flag=0,
            order=order,
        )
        addrs = await self._on_each(
            await self._masters(), RequestCode.UPDATE_AND_CREATE_TOPIC, header
        )
        self.instance.routes.pop(topic, None)
        return addrs

    async def delete_topic(self, topic: str) -> list[str]:
        header = TopicRequestHeader(topic)
        addrs = await self._on_each(
            await self._masters(), RequestCode.DELETE_TOPIC_IN_BROKER, header
        )
        self.instance.routes.pop(topic, None)
        return addrs

    async def topics(self) -> dict[str, dict[str, Any]]:
        """Every topic's config (GET_ALL_TOPIC_CONFIG), merged over the brokers."""
        return await self._merged(RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable")

    async def _merged(self, code: int, table_name: str) -> dict[str, dict[str, Any]]:
        """The `table_name` table of every broker's answer to `code`, by name (the first
        broker's entry where two have one)."""
        out: dict[str, dict[str, Any]] = {}
        for addr in await self._masters():
            response = await self._call(addr, code)
            table = body_json(response).get(table_name) or {}
            for name, config in table.items():
                out.setdefault(str(name), dict(config))
        return dict(sorted(out.items()))

    async def groups(self) -> dict[str, dict[str, Any]]:
        """Every subscription group's config (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), merged over
        the brokers."""
        return await self._merged(
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscriptionGroupTable"
        )

    async def clusters(self) -> dict[str, dict[str, dict[int, str]]]:
        """Every cluster's brokers, with their addresses by broker id (0: the master)."""
        response = await self.instance.namesrv_invoke(RequestCode.GET_BROKER_CLUSTER_INFO)
        check(response, self.instance.namesrv_addrs[0])
        info = body_json(response)
        brokers = info.get("brokerAddrTable") or {}
        return {
            str(cluster): {
                str(name): {
                    int(k): str(v)
                    for k, v in (brokers.get(name) or {}).get("brokerAddrs", {}).items()
                }
                for name in sorted(names)
            }
            for cluster, names in sorted((info.get("clusterAddrTable") or {}).items())
        }

    async def broker_config(self, broker_addr: str | None = None) -> dict[str, dict[str, str]]:
        """GET_BROKER_CONFIG of one broker, or of every broker, by address: every setting in
        effect (secrets masked)."""
        addrs = await self._masters(broker_addr)
        out = {}
        for addr in addrs:
            response = await self._call(addr, RequestCode.GET_BROKER_CONFIG)
            out[addr] = parse_properties(response.body.decode("utf-8"))
        return out

    async def update_broker_config(
        self, changes: dict[str, str], broker_addr: str | None = None
    ) -> list[str]:
        """UPDATE_BROKER_CONFIG on one broker, or on every broker: settings it applies while
        running (rmqpy: brokerPermission). The addresses changed."""
        body = "".join(f"{k}={v}\n" for k, v in changes.items()).encode()
        addrs = await self._masters(broker_addr)
        return await self._on_each(addrs, RequestCode.UPDATE_BROKER_CONFIG, body=body)

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Per queue of `topic` on every broker of its route: bounds and last store time."""
        rows = []
        for addr in await self._topic_masters(topic):
            response = await self._call(
                addr, RequestCode.GET_TOPIC_STATS_INFO, TopicRequestHeader(topic)
            )
            table = body_json(response).get("offsetTable") or {}
            for mq, o in queue_keyed(table).items():
                rows.append(
                    QueueStatus(
                        mq, int(o["minOffset"]), int(o["maxOffset"]), int(o["lastUpdateTimestamp"])
                    )
                )
        return sorted(rows, key=lambda r: (r.queue.broker_name, r.queue.queue_id))

    async def create_group(self, group: str, **config: Any) -> list[str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP on every broker, with RocketMQ's
        SubscriptionGroupConfig fields (retryMaxTimes=3, consumeEnable=False, ...)."""
        body = json.dumps({"groupName": group, **config}).encode()
        code = RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
        return await self._on_each(await self._masters(), code, body=body)

    async def delete_group(self, group: str, remove_offsets: bool = True) -> list[str]:
        header = DeleteSubscriptionGroupRequestHeader(group, remove_offsets)
        code = RequestCode.DELETE_SUBSCRIPTIONGROUP
        return await self._on_each(await self._masters(), code, header)

    async def progress(self, group: str, topic: str | None = None) -> GroupProgress:
        """GET_CONSUME_STATS over every broker: the group's offsets per queue of `topic` (of
        every topic it has offsets for when None), and its messages a second."""
        header = GetConsumeStatsRequestHeader(group, topic)
        rows, tps = [], 0.0
        for addr in await self._masters():
            response = await self._call(addr, RequestCode.GET_CONSUME_STATS, header)
            stats = body_json(response)
            tps += float(stats.get("consumeTps") or 0)
            for mq, o in queue_keyed(stats.get("offsetTable") or {}).items():
                rows.append(
                    QueueProgress(
                        mq,
                        int(o["brokerOffset"]),
                        int(o["consumerOffset"]),
                        int(o["lastTimestamp"]),
                    )
                )
        rows.sort(key=lambda r: (r.queue.topic, r.queue.broker_name, r.queue.queue_id))
        return GroupProgress(group, rows, tps)

    async def members(self, group: str) -> GroupMembers:
        """The group's consumers online, over every broker (ClientError when none is)."""
        connections: dict[str, dict[str, Any]] = {}
        subscriptions: dict[str, str] = {}
        first: dict[str, Any] | None = None
        for addr in await self._masters():
            response = await self.instance.remoting.invoke(
                addr,
                RequestCode.GET_CONSUMER_CONNECTION_LIST,
                ConsumerGroupRequestHeader(group),
                timeout_s=self.instance.timeout_s,
            )
            if response.code == ResponseCode.CONSUMER_NOT_ONLINE:
                continue
            data = body_json(check(response, addr))
            first = first or data
            for c in data.get("connectionSet") or []:
                connections.setdefault(str(c.get("clientId")), dict(c))
            for t, sub in (data.get("subscriptionTable") or {}).items():
                subscriptions.setdefault(str(t), str(sub.get("subString") or "*"))
        if first is None:
            raise ClientError(
                f"no consumer of group {group} is online", ResponseCode.CONSUMER_NOT_ONLINE
            )
        return GroupMembers(
            group,
            [connections[k] for k in sorted(connections)],
            dict(sorted(subscriptions.items())),
            str(first.get("consumeType") or ""),
            str(first.get("messageModel") or ""),
            str(first.get("consumeFromWhere") or ""),
        )

    async def producers(self, group: str) -> list[dict[str, Any]]:
        """The producers of `group` connected to any broker (clientId, clientAddr, language,
        version)."""
        found: dict[str, dict[str, Any]] = {}
        for addr in await self._masters():
            response = await self.instance.remoting.invoke(
                addr,
                RequestCode.GET_PRODUCER_CONNECTION_LIST,
                ProducerGroupRequestHeader(group),
                timeout_s=self.instance.timeout_s,
            )
            if response.code != ResponseCode.SUCCESS:
                continue  # that broker never heard of the group
            for c in body_json(response).get("connectionSet") or []:
                found.setdefault(str(c.get("clientId")), dict(c))
        return [found[k] for k in sorted(found)]

    async def consumed_by(self, topic: str) -> list[str]:
        """The groups consuming `topic`: online, or with offsets for it
        (QUERY_TOPIC_CONSUME_BY_WHO)."""
        groups: set[str] = set()
        for addr in await self._topic_masters(topic):
            response = await self._call(
                addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, TopicRequestHeader(topic)
            )
            groups.update(body_json(response).get("groupList") or [])
        return sorted(groups)

    async def reset_offsets(
        self, group: str, topic: str, timestamp_ms: int, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Move `group`'s offsets on `topic` to the first message stored at or after
        `timestamp_ms` (-1: each queue's end) on every broker of the topic; without `force`
        only backwards. Online consumers of the group drop what they pulled and go on from
        there. The new offsets, per queue."""
        header = ResetOffsetRequestHeader(topic, group, timestamp_ms, force)
        out: dict[MessageQueue, int] = {}
        for addr in await self._topic_masters(topic):
            response = await self._call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
            table = body_json(response).get("offsetTable") or {}
            out.update({mq: int(o) for mq, o in queue_keyed(table).items()})
        return dict(sorted(out.items(), key=lambda kv: (kv[0].broker_name, kv[0].queue_id)))

    async def route(self, topic: str) -> TopicRoute:
        return await self.instance.route(topic, refresh=True)

    # --- offsets --------------------------------------------------------------------------------
    def _reader(self, group: str) -> ConsumerBase:
        return ConsumerBase(group, self.instance.namesrv_addrs[0], instance=self.instance)

    async def consumer_offsets(self, group: str, topic: str) -> list[QueueOffsets]:
        """Per queue of `topic`: min and max offsets, `group`'s committed offset, its lag."""
        reader = self._reader(group)
        store = RemoteOffsetStore(self.instance, group)
        rows = []
        for mq in await reader.queues_of(topic):
            rows.append(
                QueueOffsets(
                    mq,
                    await reader.min_offset(mq),
                    await reader.max_offset(mq),
                    await store.read(mq),
                )
            )
        return rows

    async def search_offset(self, topic: str, timestamp_ms: int) -> dict[MessageQueue, int]:
        reader = self._reader("")
        return {
            mq: await reader.search_offset(mq, timestamp_ms) for mq in await reader.queues_of(topic)
        }

    # --- messages -------------------------------------------------------------------------------
    async def browse(self, mq: MessageQueue, offset: int, count: int = 32) -> list[ReceivedMessage]:
        """Up to `count` messages of one queue from `offset` on, read as RocketMQ's tools
        group (nothing committed, no group left behind)."""
        reader = self._reader(TOOLS_CONSUMER_GROUP)
        out: list[ReceivedMessage] = []
        while len(out) < count:
            result = await reader.pull(mq, offset, max_nums=min(32, count - len(out)))
            if not result.messages:
                break
            out += result.messages
            offset = result.next_offset
        return out[:count]

    async def message_at(self, mq: MessageQueue, offset: int) -> ReceivedMessage:
        """The message at `offset` of a queue."""
        found = await self.browse(mq, offset, 1)
        if not found or found[0].queue_offset != offset:
            raise ClientError(f"no message at offset {offset} of {mq}")
        return found[0]

    async def messages_at_time(self, topic: str, timestamp_ms: int) -> list[ReceivedMessage]:
        """In each queue of `topic`, the first message stored at or after `timestamp_ms`."""
        found = []
        for mq, offset in sorted((await self.search_offset(topic, timestamp_ms)).items()):
            found += await self.browse(mq, offset, 1)
        return found

    async def consume_directly(
        self, group: str, offset_msg_id: str, client_id: str | None = None
    ) -> dict[str, Any]:
        """Hand one stored message (by its offsetMsgId) to one consumer of `group` (the
        first online when `client_id` is None), which runs its listener on it; its
        `ConsumeMessageDirectlyResult` (consumeResult CR_SUCCESS, CR_LATER, ...). Nothing
        is committed or sent back: a tool to try a consumer on a message."""
        named = await self._named_broker(offset_msg_id)
        if named is None:
            raise ClientError(f"{offset_msg_id} is not the offsetMsgId of a known broker")
        if client_id is None:
            client_id = str((await self.members(group)).connections[0]["clientId"])
        header = ConsumeMessageDirectlyResultRequestHeader(group, client_id, offset_msg_id)
        response = await self.instance.remoting.invoke(
            named[0], RequestCode.CONSUME_MESSAGE_DIRECTLY, header, timeout_s=15.0
        )
        result: dict[str, Any] = json.loads(check(response, named[0]).body)
        return result

    async def resend_to_group(self, group: str, msg: ReceivedMessage) -> str:
        """Give `group` a message again (one from its DLQ, say): a copy goes to the group's
        retry topic, so only that group consumes it, under its original topic, with its
        redelivery count starting over. The copy keeps the message's msgId, as a RocketMQ
        retry does (a consumer that dedupes by msgId sees the same message); returned."""
        props = {k: v for k, v in msg.properties.items() if k not in RESEND_DROPPED}
        origin = msg.properties.get(MessageConst.RETRY_TOPIC) or msg.topic
        if origin.startswith(("%DLQ%", "%RETRY%")):
            raise ClientError(f"message {msg.msg_id} does not name its original topic")
        props[MessageConst.RETRY_TOPIC] = origin
        props.setdefault(MessageConst.ORIGIN_MESSAGE_ID, msg.msg_id)
        copy = Message(f"%RETRY%{group}", msg.body, properties=props, flag=msg.flag)
        async with Producer(RESEND_PRODUCER_GROUP, instance=self.instance) as producer:
            return (await producer.send(copy)).msg_id

    async def query_by_key(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
        *,
        unique: bool = False,
    ) -> list[ReceivedMessage]:
        """QUERY_MESSAGE on every broker of the topic: messages whose KEYS hold `key` (or
        whose UNIQ_KEY is `key` with `unique`), newest index first."""
        route = await self.instance.route(topic, refresh=True)
        header: dict[str, Any] = QueryMessageRequestHeader(
            topic, key, max_num, begin_ms, end_ms if end_ms is not None else _now_ms()
        ).to_ext()
        if unique:
            header[UNIQUE_KEY_QUERY] = "true"
        found: list[ReceivedMessage] = []
        for name, addr in sorted(route.masters().items()):
            response = await self.instance.remoting.invoke(
                addr, RequestCode.QUERY_MESSAGE, header, timeout_s=self.instance.timeout_s
            )
            if response.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            check(response, addr)
            found += [
                m
                for m in decode_messages(response.body, name)
                if m.topic == topic
                and ((unique and m.msg_id == key) or (not unique and key in m.keys))
            ]
        return found[:max_num]

    async def view_by_offset_id(self, offset_msg_id: str) -> ReceivedMessage:
        """VIEW_MESSAGE_BY_ID to the broker the id names (its store host), when the name
        server knows that broker: an id is never taken as an address to dial."""
        named = await self._named_broker(offset_msg_id)
        if named is None:
            raise ClientError(f"{offset_msg_id} is not the offsetMsgId of a known broker")
        return await self._view(*named)

    async def _view(self, addr: str, offset: int) -> ReceivedMessage:
        response = await self._call(
            addr, RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset)
        )
        messages = decode_messages(response.body)
        if not messages:
            raise ClientError(f"{addr} has no message at offset {offset}")
        return messages[0]

    async def _named_broker(self, msg_id: str) -> tuple[str, int] | None:
        """(address, commitlog offset) when `msg_id` decodes as an offsetMsgId whose store
        host is a broker the name server knows."""
        try:
            host, offset = decode_offset_msg_id(msg_id)
        except ValueError:
            return None
        table = await self._broker_addr_table()
        known = {addr for addrs in table.values() for addr in addrs.values()}
        return (str(host), offset) if str(host) in known else None

    async def query_by_id(self, msg_id: str, topic: str | None = None) -> ReceivedMessage:
        """By the id a producer got back: its UNIQ_KEY, looked up within `topic` first, then
        as an offsetMsgId when the id names a broker the name server knows."""
        where = ""
        if topic:
            where = f" in topic {topic}"
            try:
                found = await self.query_by_key(topic, msg_id, unique=True)
            except ClientError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
                found, where = [], f" (topic {topic} does not exist)"
            if found:
                return found[0]
        named = await self._named_broker(msg_id)
        if named is None:
            hint = "" if topic else " (a producer's msgId is found within its topic: give --topic)"
            raise ClientError(f"no message with id {msg_id}{where}{hint}")
        try:
            return await self._view(*named)
        except ClientError as exc:
            raise ClientError(f"no message with id {msg_id}{where}: {exc}") from exc


def body_json(response: RemotingCommand) -> Any:
    """A response body in fastjson's JSON (`config.java_json`)."""
    return java_json.loads(response.body.decode("utf-8"))


def _now_ms() -> int:
    return int(time.time() * 1000)
