"""What producers, consumers and the admin share (RocketMQ `MQClientInstance`): the client
id, the connections, topic routes refreshed from the name server every 30 s, and heartbeats to
every broker every 30 s naming our producer and consumer groups."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import structlog

from rmqpy.client.errors import ClientError
from rmqpy.client.message import (
    MessageQueue,
    ReceivedMessage,
    decode_messages,
    local_ip,
    queue_keyed,
)
from rmqpy.client.route import TopicRoute
from rmqpy.client.transport import RemotingClient, check
from rmqpy.config import java_json
from rmqpy.remoting.codes import DEFAULT_TOPIC, RequestCode, ResponseCode
from rmqpy.remoting.headers.admin import TopicRequestHeader, UnregisterClientRequestHeader
from rmqpy.remoting.signature import Credentials
from rmqpy.remoting.tls import client_context

log = structlog.get_logger(__name__)

ROUTE_REFRESH_S = 30.0
HEARTBEAT_S = 30.0


class GroupMember(Protocol):
    """A consumer of this client, as its group's requests from brokers reach it."""

    def consumer_data(self) -> dict[str, Any]:
        """Its part of the heartbeat body."""
        ...

    def group_changed(self) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED: rebalance now."""

    def offsets_reset(self, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: an operator moved the group's offsets."""

    async def consume_directly(self, msg: ReceivedMessage) -> dict[str, Any] | None:
        """CONSUME_MESSAGE_DIRECTLY: its ConsumeMessageDirectlyResult (None: not taken)."""
        ...


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel background tasks, wait until they are gone, and forget them. A task still
    running a second later is cancelled again (on Python 3.11 a cancel can be swallowed by
    `asyncio.wait_for` inside a library call)."""
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)
    tasks.clear()


async def every(interval_s: float, work: Callable[[], Awaitable[None]]) -> None:
    """Run `work` every `interval_s` until cancelled; a failure is logged, not fatal."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await work()
        except ClientError as exc:
            log.warning("background client work failed", work=work.__name__, error=str(exc))


def tls_context(
    tls: ssl.SSLContext | bool | None, environ: Mapping[str, str] | None = None
) -> ssl.SSLContext | None:
    """The context a client connects with: the one given; for True (or, when None,
    RMQPY_TLS set to 1 or true) one checking certificates against RMQPY_TLS_CA_FILE, or
    the system's authorities; else None, plain TCP."""
    env = os.environ if environ is None else environ
    if tls is None:
        tls = env.get("RMQPY_TLS", "").strip().lower() in ("1", "true", "yes")
    if isinstance(tls, ssl.SSLContext):
        return tls
    return client_context(env.get("RMQPY_TLS_CA_FILE") or None) if tls else None


def parse_namesrv(namesrv: str) -> list[str]:
    addrs = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise ClientError("no name server address given (host:port[;host:port])")
    return addrs


class ClientInstance:
    def __init__(
        self,
        namesrv: str,
        *,
        serialize: str = "auto",
        client_ip: str | None = None,
        timeout_s: float = 3.0,
        route_refresh_s: float = ROUTE_REFRESH_S,
        heartbeat_s: float = HEARTBEAT_S,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | bool | None = None,
    ) -> None:
        """`credentials` sign every request (a broker with plain ACL on checks them);
        without them, RMQPY_ACCESS_KEY and RMQPY_SECRET_KEY when both are set. `tls`: True
        or an SSLContext connects to name servers and brokers over TLS (True checks their
        certificates against the system's authorities, or RMQPY_TLS_CA_FILE's); None: TLS
        when RMQPY_TLS is 1 or true."""
        self.namesrv_addrs = parse_namesrv(namesrv)
        self.client_ip = client_ip or local_ip()
        self.client_id = f"{self.client_ip}@{os.getpid()}#{time.monotonic_ns()}"
        self.timeout_s = timeout_s
        self.route_refresh_s = route_refresh_s
        self.heartbeat_s = heartbeat_s
        self.remoting = RemotingClient(
            serialize,
            on_notify=self._notified,
            on_reset=self._reset,
            on_consume_directly=self._consume_directly,
            credentials=credentials if credentials is not None else Credentials.from_env(),
            tls=tls_context(tls),
        )
        self.routes: dict[str, TopicRoute] = {}
        self.producer_groups: set[str] = set()
        self.consumers: dict[str, GroupMember] = {}  # by consumer group
        self._tasks: list[asyncio.Task[None]] = []
        self._namesrv_index = 0

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.ensure_future(every(self.route_refresh_s, self._refresh_routes)),
                asyncio.ensure_future(every(self.heartbeat_s, self.heartbeat_all)),
            ]

    async def close(self) -> None:
        await cancel_all(self._tasks)
        await self._unregister_all()
        await self.remoting.close()

    # --- name server --------------------------------------------------------------------------
    async def namesrv_invoke(self, code: int, header: Any = None, body: bytes = b"") -> Any:
        """Ask the name servers in turn, starting with the last one that answered."""
        last: ClientError | None = None
        for i in range(len(self.namesrv_addrs)):
            index = (self._namesrv_index + i) % len(self.namesrv_addrs)
            addr = self.namesrv_addrs[index]
            try:
                response = await self.remoting.invoke(addr, code, header, body, self.timeout_s)
            except ClientError as exc:
                last = exc
                continue
            self._namesrv_index = index
            return response
        assert last is not None
        raise last

    async def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        """The topic's route, from the cache unless `refresh`; ClientError with code 17 when
        no name server knows the topic."""
        if not refresh and topic in self.routes:
            return self.routes[topic]
        response = await self.namesrv_invoke(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, TopicRequestHeader(topic)
        )
        addr = self.namesrv_addrs[self._namesrv_index]
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise ClientError(f"topic {topic} does not exist", code=response.code, addr=addr)
        check(response, addr)
        route = TopicRoute.from_body(topic, response.body)
        known = self.broker_addrs()
        self.routes[topic] = route
        if self.consumers:
            # As Java's client: a broker just learned of hears our heartbeat before the route
            # is used (our first pull there), so its admin requests (members, consume stats)
            # and rebalances see our consumers as soon as they consume.
            await self.heartbeat_brokers(self.broker_addrs() - known)
        return route

    async def _refresh_routes(self) -> None:
        for topic in list(self.routes):
            try:
                await self.route(topic, refresh=True)
            except ClientError as exc:
                log.warning("route refresh failed", topic=topic, error=str(exc))

    def broker_addr(self, broker_name: str) -> str | None:
        for route in self.routes.values():
            addr = route.master(broker_name)
            if addr is not None:
                return addr
        return None

    def broker_addrs(self) -> set[str]:
        return {addr for route in self.routes.values() for addr in route.masters().values()}

    async def broker_addr_of(self, topic: str, broker_name: str) -> str:
        addr = self.broker_addr(broker_name)
        if addr is None:
            try:
                route = await self.route(topic, refresh=True)
            except ClientError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
                # A send to a queue of a topic its first send creates: its broker is TBW102's.
                route = await self.route(DEFAULT_TOPIC, refresh=True)
            addr = route.master(broker_name)
        if addr is None:
            raise ClientError(f"no master address for broker {broker_name}")
        return addr

    # --- heartbeats ---------------------------------------------------------------------------
    def heartbeat_body(self) -> bytes:
        return json.dumps(
            {
                "clientID": self.client_id,
                "producerDataSet": [{"groupName": g} for g in sorted(self.producer_groups)],
                "consumerDataSet": [member.consumer_data() for member in self.consumers.values()],
            }
        ).encode()

    async def heartbeat(self, addr: str) -> None:
        response = await self.remoting.invoke(
            addr, RequestCode.HEART_BEAT, body=self.heartbeat_body(), timeout_s=self.timeout_s
        )
        check(response, addr)

    async def heartbeat_all(self) -> None:
        await self.heartbeat_brokers(self.broker_addrs())

    async def heartbeat_brokers(self, addrs: set[str]) -> None:
        """Heartbeat each of `addrs` (a failure is logged: the next round tries again)."""
        if not self.producer_groups and not self.consumers:
            return
        for addr in sorted(addrs):
            try:
                await self.heartbeat(addr)
            except ClientError as exc:
                log.warning("heartbeat failed", broker=addr, error=str(exc))

    async def unregister(
        self, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """UNREGISTER_CLIENT on every known broker, so the group's other members rebalance
        at once instead of when our heartbeat expires."""
        if producer_group is not None:
            self.producer_groups.discard(producer_group)
        if consumer_group is not None:
            self.consumers.pop(consumer_group, None)
        header = UnregisterClientRequestHeader(self.client_id, producer_group, consumer_group)
        for addr in sorted(self.broker_addrs()):
            try:
                await self.remoting.invoke(
                    addr, RequestCode.UNREGISTER_CLIENT, header, timeout_s=self.timeout_s
                )
            except ClientError as exc:
                log.info("unregister failed", broker=addr, error=str(exc))

    async def _unregister_all(self) -> None:
        for group in list(self.producer_groups):
            await self.unregister(producer_group=group)
        for group in list(self.consumers):
            await self.unregister(consumer_group=group)

    async def _consume_directly(
        self, group: str, broker_name: str, record: bytes
    ) -> dict[str, Any] | None:
        member = self.consumers.get(group)
        if member is None:
            return None
        messages = decode_messages(record, broker_name)
        if not messages:
            return {"order": False, "autoCommit": True, "consumeResult": "CR_THROW_EXCEPTION",
                    "remark": "no message in the request", "spentTimeMills": 0}  # fmt: skip
        return await member.consume_directly(messages[0])

    def _reset(self, group: str, topic: str, body: bytes) -> None:
        member = self.consumers.get(group)
        if member is None:
            return
        try:
            table = java_json.loads(body.decode("utf-8")).get("offsetTable") or {}
            offsets = {mq: int(o) for mq, o in queue_keyed(table).items()}
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            log.warning("unreadable offset reset", group=group, topic=topic, error=str(exc))
            return
        log.info("offsets reset by the broker", group=group, topic=topic, queues=len(offsets))
        member.offsets_reset(offsets)

    def _notified(self, group: str) -> None:
        member = self.consumers.get(group)
        if member is not None:
            member.group_changed()
