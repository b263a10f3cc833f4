"""Administration (RocketMQ `DefaultMQAdminExt`): topics, broker runtime info, consumer
progress and lag per queue, message lookup by key or id, offset search by time.

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

from client.consumer import ConsumerBase
from client.errors import ClientError
from client.instance import ClientInstance
from client.message import MessageQueue, ReceivedMessage, decode_messages
from client.offset_store import RemoteOffsetStore
from client.route import TopicRoute
from client.transport import check
from config import java_json
from remoting.codes import (
    DEFAULT_TOPIC,
    MASTER_ID,
    PERM_READ,
    PERM_WRITE,
    RequestCode,
    ResponseCode,
)
from remoting.headers.admin import CreateTopicRequestHeader, TopicRequestHeader
from remoting.headers.query import QueryMessageRequestHeader, ViewMessageRequestHeader
from remoting.signature import Credentials
from store.message_id import decode_offset_msg_id

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


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
        table = java_json.loads(response.body.decode("utf-8")).get("brokerAddrTable", {})
        return {
            str(name): {int(k): str(v) for k, v in data.get("brokerAddrs", {}).items()}
            for name, data in table.items()
        }

    async def runtime_info(self, broker_addr: str | None = None) -> dict[str, dict[str, str]]:
        """GET_BROKER_RUNTIME_INFO of one broker, or of every broker, by address."""
        addrs = [broker_addr] if broker_addr else sorted((await self.brokers()).values())
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
        addrs = sorted((await self.brokers()).values())
        for addr in addrs:
            await self._call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        self.instance.routes.pop(topic, None)
        return addrs

    async def delete_topic(self, topic: str) -> list[str]:
        addrs = sorted((await self.brokers()).values())
        for addr in addrs:
            await self._call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, TopicRequestHeader(topic))
        self.instance.routes.pop(topic, None)
        return addrs

    async def topics(self) -> dict[str, dict[str, Any]]:
        """Every topic's config (GET_ALL_TOPIC_CONFIG), merged over the brokers."""
        return await self._merged(RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable")

    async def _merged(self, code: int, table_name: str) -> dict[str, dict[str, Any]]:
        """The `table_name` table of every broker's answer to `code`, by name (the first
        broker's entry where two have one)."""
        out: dict[str, dict[str, Any]] = {}
        for addr in sorted((await self.brokers()).values()):
            response = await self._call(addr, code)
            table = java_json.loads(response.body.decode("utf-8")).get(table_name) or {}
            for name, config in table.items():
                out.setdefault(str(name), dict(config))
        return dict(sorted(out.items()))

    async def groups(self) -> dict[str, dict[str, Any]]:
        """Every subscription group's config (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), merged over
        the brokers."""
        return await self._merged(
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscriptionGroupTable"
        )

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


def _now_ms() -> int:
    return int(time.time() * 1000)
