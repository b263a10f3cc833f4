"""Who is connected (RocketMQ `ConsumerManager`, `ProducerManager`, `RebalanceLockManager`).

Heartbeats register a client id under its groups with the connection it came on; a client
leaves on UNREGISTER_CLIENT, when its connection closes, or after `channel_expired_timeout_ms`
without a heartbeat. When a consumer group's membership changes every remaining member gets
NOTIFY_CONSUMER_IDS_CHANGED (oneway), so they rebalance at once instead of at their next 20 s
tick. Calls come from executor threads; writes to connections are posted to the loop.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from rmqpy.config import java_json
from rmqpy.remoting.codes import RequestCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.headers.admin import ConsumerGroupRequestHeader
from rmqpy.remoting.protocol import Connection
from rmqpy.store.message import SUB_ALL, parse_tag_expression, tags_code

log = structlog.get_logger(__name__)

REBALANCE_LOCK_MAX_LIVE_MS = 60_000

# Some clients send enum ordinals instead of names.
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")


def enum_name(value: object, names: tuple[str, ...], default: str) -> str:
    if isinstance(value, int) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str) and value:
        return names[int(value)] if value.isdigit() and int(value) < len(names) else value
    return default


@dataclass(frozen=True, slots=True)
class Subscription:
    """RocketMQ `SubscriptionData`: a topic and its tag filter (None = every tag)."""

    topic: str
    sub_string: str
    tags: frozenset[str] | None
    codes: frozenset[int] | None
    sub_version: int = 0

    @classmethod
    def parse(cls, topic: str, sub_string: str | None, sub_version: int = 0) -> Subscription:
        """Cached: push consumers send the same subscription with every pull."""
        return _parse_subscription(topic, sub_string, sub_version)


@functools.lru_cache(maxsize=4096)
def _parse_subscription(topic: str, sub_string: str | None, sub_version: int) -> Subscription:
    tags = parse_tag_expression(sub_string)
    if not tags:
        return Subscription(topic, SUB_ALL, None, None, sub_version)
    text = (sub_string or "").strip()
    return Subscription(topic, text, tags, frozenset(tags_code(t) for t in tags), sub_version)


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """What a client said of itself in its heartbeat's frame: RocketMQ `ClientChannelInfo`."""

    language: str = "JAVA"  # LanguageCode's name
    version: int = 0


@dataclass(slots=True)
class ProducerClient:
    conn: Connection
    identity: ClientIdentity
    last_update_ms: int


@dataclass(slots=True)
class ConsumerClient:
    client_id: str
    conn: Connection
    serialize_type: SerializeType
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: dict[str, Subscription]
    identity: ClientIdentity = ClientIdentity()
    last_update_ms: int = field(default_factory=lambda: int(time.time() * 1000))


class ClientManager:
    def __init__(self, loop: asyncio.AbstractEventLoop, expire_ms: int) -> None:
        self.loop = loop
        self.expire_ms = expire_ms
        self._lock = threading.Lock()
        self.consumers: dict[str, dict[str, ConsumerClient]] = {}  # group -> client id -> client
        self.producers: dict[str, dict[str, ProducerClient]] = {}  # group -> client id -> it
        self._locks: dict[str, dict[tuple[str, str, int], tuple[str, int]]] = {}
        self.on_group_seen: Callable[[str], None] = lambda _g: None

    # --- heartbeats -------------------------------------------------------------------------
    def heartbeat(
        self,
        conn: Connection,
        serialize_type: SerializeType,
        data: dict[str, Any],
        identity: ClientIdentity = ClientIdentity(),
    ) -> None:
        client_id = str(data.get("clientID") or "")
        if not client_id:
            raise ValueError("heartbeat without clientID")
        now = int(time.time() * 1000)
        changed: list[str] = []
        with self._lock:
            for producer in data.get("producerDataSet") or []:
                group = str(producer.get("groupName") or "")
                if group:
                    self.producers.setdefault(group, {})[client_id] = ProducerClient(
                        conn, identity, now
                    )
            for consumer in data.get("consumerDataSet") or []:
                group = str(consumer.get("groupName") or "")
                if not group:
                    continue
                subs = {}
                for sub in consumer.get("subscriptionDataSet") or []:
                    topic = str(sub.get("topic") or "")
                    if topic:
                        subs[topic] = Subscription.parse(
                            topic, sub.get("subString"), int(sub.get("subVersion") or 0)
                        )
                members = self.consumers.setdefault(group, {})
                known = members.get(client_id)
                members[client_id] = ConsumerClient(
                    client_id,
                    conn,
                    serialize_type,
                    enum_name(consumer.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
                    enum_name(consumer.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                    str(consumer.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"),
                    subs,
                    identity,
                    now,
                )
                if known is None or known.conn is not conn:
                    changed.append(group)
        for group in changed:
            log.info("consumer joined", group=group, client_id=client_id)
            self.on_group_seen(group)
            self._notify(group)

    def unregister(
        self, client_id: str, producer_group: str | None, consumer_group: str | None
    ) -> None:
        with self._lock:
            if producer_group:
                self.producers.get(producer_group, {}).pop(client_id, None)
            left = consumer_group and self.consumers.get(consumer_group, {}).pop(client_id, None)
        if left and consumer_group:
            log.info("consumer left", group=consumer_group, client_id=client_id)
            self._notify(consumer_group)

    def group_sizes(self) -> tuple[dict[str, int], dict[str, int]]:
        """Clients heard from, per producer group and per consumer group."""
        with self._lock:
            producers = {group: len(members) for group, members in self.producers.items()}
            consumers = {group: len(members) for group, members in self.consumers.items()}
        return producers, consumers

    def connection_closed(self, conn: Connection) -> None:
        self._drop(lambda c, _t: c is conn, "connection closed")

    def expire_idle(self) -> None:
        deadline = int(time.time() * 1000) - self.expire_ms
        self._drop(lambda _c, t: t < deadline, "no heartbeat")

    def _drop(self, gone: Callable[[Connection, int], bool], why: str) -> None:
        changed = []
        with self._lock:
            for group, members in self.consumers.items():
                for client_id in [i for i, c in members.items() if gone(c.conn, c.last_update_ms)]:
                    del members[client_id]
                    changed.append(group)
                    log.info("consumer left", group=group, client_id=client_id, reason=why)
            for producers in self.producers.values():
                for client_id in [
                    i for i, p in producers.items() if gone(p.conn, p.last_update_ms)
                ]:
                    del producers[client_id]
        for group in dict.fromkeys(changed):
            self._notify(group)

    # --- queries -------------------------------------------------------------------------------
    def consumer_ids(self, group: str) -> list[str]:
        with self._lock:
            return sorted(self.consumers.get(group, {}))

    def consumer_members(self, group: str) -> list[ConsumerClient]:
        """The group's consumers online, by client id."""
        with self._lock:
            return [c for _, c in sorted(self.consumers.get(group, {}).items())]

    def producer_members(self, group: str) -> dict[str, ProducerClient] | None:
        """The group's producers by client id; None when no producer of it was ever heard."""
        with self._lock:
            members = self.producers.get(group)
            return None if members is None else dict(sorted(members.items()))

    def groups_consuming(self, topic: str) -> set[str]:
        """The consumer groups online with a subscription to `topic`."""
        with self._lock:
            return {
                group
                for group, members in self.consumers.items()
                if any(topic in c.subscriptions for c in members.values())
            }

    def subscribed_topics(self, group: str) -> set[str]:
        with self._lock:
            return {t for c in self.consumers.get(group, {}).values() for t in c.subscriptions}

    def subscription(self, group: str, topic: str) -> Subscription | None:
        with self._lock:
            for client in self.consumers.get(group, {}).values():
                sub = client.subscriptions.get(topic)
                if sub is not None:
                    return sub
        return None

    # --- orderly consumption locks ------------------------------------------------------------
    def lock_batch(self, group: str, client_id: str, mqs: list[tuple[str, str, int]]) -> list[int]:
        """Indexes of `mqs` now locked by `client_id` (RocketMQ `tryLockBatch`)."""
        now = int(time.time() * 1000)
        locked = []
        with self._lock:
            table = self._locks.setdefault(group, {})
            for i, mq in enumerate(mqs):
                owner = table.get(mq)
                if (
                    owner is None
                    or owner[0] == client_id
                    or now - owner[1] > REBALANCE_LOCK_MAX_LIVE_MS
                ):
                    table[mq] = (client_id, now)
                    locked.append(i)
        return locked

    def unlock_batch(self, group: str, client_id: str, mqs: list[tuple[str, str, int]]) -> None:
        with self._lock:
            table = self._locks.get(group, {})
            for mq in mqs:
                owner = table.get(mq)
                if owner is not None and owner[0] == client_id:
                    del table[mq]

    # --- notifications ---------------------------------------------------------------------------
    def _notify(self, group: str) -> None:
        with self._lock:
            members = list(self.consumers.get(group, {}).values())
        ext = ConsumerGroupRequestHeader(group).to_ext()
        for client in members:
            cmd = RemotingCommand(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                ext_fields=dict(ext),
                serialize_type=client.serialize_type,
            )
            self.loop.call_soon_threadsafe(_send_oneway, client.conn, cmd)

    def send_to(self, client: ConsumerClient, cmd: RemotingCommand) -> None:
        """A oneway request to a consumer, from any thread."""
        self.loop.call_soon_threadsafe(_send_oneway, client.conn, cmd)


def _send_oneway(conn: Connection, cmd: RemotingCommand) -> None:
    if conn.is_open:
        conn.invoke_oneway(cmd)


def parse_json_body(body: bytes) -> dict[str, Any]:
    """A request body in fastjson's JSON (bare integer keys allowed)."""
    value = java_json.loads(body.decode("utf-8"))
    if not isinstance(value, dict):
        raise ValueError("the request body is not a JSON object")
    return value
