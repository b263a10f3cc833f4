"""The console's HTTP side (aiohttp): the page and its JSON API.

Everything goes through the name server and the brokers' remoting ports with the SDK's
`Admin`, signed with the console's own account when one is given, so a broker with ACL on
decides what the console may change. POSTs must carry JSON, which a cross-site form cannot
send: no page elsewhere can make a visitor's browser act on the console.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from rmqpy.client.admin import Admin
from rmqpy.client.errors import ClientError
from rmqpy.client.message import Message, MessageQueue, ReceivedMessage
from rmqpy.client.producer import Producer
from rmqpy.console.history import (
    History,
    cluster_and_broker_names,
    is_system_group,
    is_system_topic,
)
from rmqpy.remoting.codes import ResponseCode

log = structlog.get_logger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
CONSOLE_PRODUCER_GROUP = "rmqpy-console"
NOT_FOUND_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.QUERY_NOT_FOUND,
                   ResponseCode.CONSUMER_NOT_ONLINE}  # fmt: skip
DLQ_PAGE = 100
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadInput(ValueError):
    """A request the API cannot use: answered 400 with the reason."""


def message_json(msg: ReceivedMessage) -> dict[str, Any]:
    return {**msg.to_json(), "bodySize": len(msg.body)}


def number(value: Any, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadInput(f"{name} must be a whole number, not {value!r}") from None


def text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{name} is required")
    return value.strip()


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """API errors as JSON `{"error": ...}`: 400 for bad input, else `http_status`."""
    try:
        return await handler(request)
    except BadInput as exc:
        return web.json_response({"error": str(exc)}, status=400)
    except ClientError as exc:
        return web.json_response({"error": str(exc)}, status=http_status(exc))


def http_status(exc: ClientError) -> int:
    """404 for what does not exist, 403 for what the broker's ACL refuses, 502 for a cluster
    that did not answer, 400 for what a broker refused otherwise."""
    if exc.code in NOT_FOUND_CODES or "does not exist" in str(exc) or "no message" in str(exc):
        return 404
    if exc.code == ResponseCode.NO_PERMISSION:
        return 403
    return 502 if exc.code is None else 400


class Console:
    def __init__(self, admin: Admin, history: History) -> None:
        self.admin = admin
        self.history = history
        self.producer = Producer(CONSOLE_PRODUCER_GROUP, instance=admin.instance)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[errors], client_max_size=8 * 1024 * 1024)
        r = app.router
        r.add_get("/", self.index)
        r.add_static("/static/", STATIC)
        r.add_get("/api/cluster", self.cluster)
        r.add_get("/api/topics", self.topics)
        r.add_post("/api/topics", self.create_topic)
        r.add_get("/api/topics/{topic}", self.topic)
        r.add_post("/api/topics/{topic}/messages", self.send)
        r.add_get("/api/groups", self.groups)
        r.add_get("/api/groups/{group}", self.group)
        r.add_post("/api/groups/{group}/reset", self.reset)
        r.add_get("/api/groups/{group}/dlq", self.dlq)
        r.add_post("/api/groups/{group}/dlq/resend", self.resend)
        r.add_get("/api/messages", self.messages)
        r.add_get("/api/messages/body", self.body)
        r.add_get("/api/history", self.series)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _app: web.Application) -> None:
        await self.producer.close()

    @staticmethod
    async def json_of(request: web.Request) -> dict[str, Any]:
        if request.content_type != "application/json":
            raise BadInput("send JSON (Content-Type: application/json)")
        try:
            value = await request.json()
        except ValueError:
            raise BadInput("the body is not JSON") from None
        if not isinstance(value, dict):
            raise BadInput("the body must be a JSON object")
        return value

    # --- pages ---------------------------------------------------------------------------------
    async def index(self, _request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    async def series(self, _request: web.Request) -> web.StreamResponse:
        return web.json_response(self.history.series())

    # --- cluster -------------------------------------------------------------------------------
    async def cluster(self, _request: web.Request) -> web.StreamResponse:
        brokers = []
        for cluster, names in (await self.admin.clusters()).items():
            for name, addrs in names.items():
                for broker_id, addr in sorted(addrs.items()):
                    try:
                        info = (await self.admin.runtime_info(addr))[addr]
                    except ClientError as exc:
                        info = {"error": str(exc)}
                    brokers.append(
                        {
                            "cluster": cluster,
                            "broker": name,
                            "id": broker_id,
                            "address": addr,
                            "info": info,
                        }
                    )
        return web.json_response({"brokers": brokers})

    # --- topics --------------------------------------------------------------------------------
    async def topics(self, request: web.Request) -> web.StreamResponse:
        show_system = request.query.get("system") == "1"
        clusters = await cluster_and_broker_names(self.admin)
        rows = []
        for name, config in (await self.admin.topics()).items():
            system = is_system_topic(name, clusters)
            if system and not show_system:
                continue
            rows.append(
                {
                    "topic": name,
                    "queues": config.get("writeQueueNums"),
                    "perm": config.get("perm"),
                    "system": system,
                    "messages": await self._messages_in(name),
                    "inRate": round(self.history.rate_in(name), 2),
                    "outRate": round(self.history.topic_rate_out(name), 2),
                }
            )
        return web.json_response(rows)

    async def _messages_in(self, topic: str) -> int | None:
        try:
            return sum(q.max_offset - q.min_offset for q in await self.admin.topic_status(topic))
        except ClientError:
            return None

    async def create_topic(self, request: web.Request) -> web.StreamResponse:
        body = await self.json_of(request)
        name = text(body.get("topic"), "topic")
        queues = number(body.get("queues", 8), "queues")
        if not re.fullmatch(r"[%|a-zA-Z0-9_-]{1,127}", name):
            raise BadInput("a topic name is 1-127 of a-z A-Z 0-9 _ - % |")
        if not 1 <= queues <= 1024:
            raise BadInput("queues must be 1-1024")
        brokers = await self.admin.create_topic(name, queues)
        log.info("topic created from the console", topic=name, queues=queues)
        return web.json_response({"topic": name, "queues": queues, "brokers": brokers})

    async def topic(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["topic"]
        status = await self.admin.topic_status(name)
        return web.json_response(
            {
                "topic": name,
                "queues": [s.to_json() for s in status],
                "messages": sum(s.max_offset - s.min_offset for s in status),
                "consumers": await self.admin.consumed_by(name),
                "inRate": round(self.history.rate_in(name), 2),
                "outRate": round(self.history.topic_rate_out(name), 2),
            }
        )

    async def send(self, request: web.Request) -> web.StreamResponse:
        body = await self.json_of(request)
        payload = body.get("body")
        if not isinstance(payload, str):
            raise BadInput("body is required")
        tags = str(body.get("tags") or "").strip() or None
        keys = str(body.get("keys") or "").strip() or None
        msg = Message(request.match_info["topic"], payload.encode("utf-8"), tags=tags, keys=keys)
        result = await self.producer.send(msg)
        return web.json_response(result.to_json())

    # --- groups --------------------------------------------------------------------------------
    async def groups(self, request: web.Request) -> web.StreamResponse:
        show_system = request.query.get("system") == "1"
        rows = []
        for group, config in (await self.admin.groups()).items():
            if is_system_group(group) and not show_system:
                continue
            progress = await self.admin.progress(group)
            members = await self._members(group)
            rows.append(
                {
                    "group": group,
                    "online": len(members["connections"]) if members else 0,
                    "model": members["messageModel"] if members else None,
                    "topics": sorted({q.queue.topic for q in progress.queues}),
                    "lag": progress.lag,
                    "consumeTps": round(progress.consume_tps, 2),
                    "outRate": round(self.history.rate_out(group), 2),
                    "retryMaxTimes": config.get("retryMaxTimes"),
                }
            )
        return web.json_response(rows)

    async def _members(self, group: str) -> dict[str, Any] | None:
        try:
            return (await self.admin.members(group)).to_json()
        except ClientError as exc:
            if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                raise
            return None

    async def group(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["group"]
        if name not in await self.admin.groups():
            raise ClientError(f"group {name} does not exist")
        progress = await self.admin.progress(name)
        return web.json_response(
            {
                **progress.to_json(),
                "members": await self._members(name),
                "outRate": round(self.history.rate_out(name), 2),
            }
        )

    async def reset(self, request: web.Request) -> web.StreamResponse:
        group = request.match_info["group"]
        body = await self.json_of(request)
        topic = text(body.get("topic"), "topic")
        to = number(body.get("to"), "to")  # ms since the epoch; -1 each queue's end
        offsets = await self.admin.reset_offsets(group, topic, to, force=True)
        log.info("offsets reset from the console", group=group, topic=topic, to=to)
        return web.json_response(
            [{**mq.to_json(), "offset": offset} for mq, offset in offsets.items()]
        )

    async def dlq(self, request: web.Request) -> web.StreamResponse:
        """The first messages of the group's dead-letter queue."""
        topic = f"%DLQ%{request.match_info['group']}"
        try:
            status = await self.admin.topic_status(topic)
        except ClientError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                return web.json_response({"total": 0, "messages": []})
            raise
        found: list[ReceivedMessage] = []
        for q in status:
            found += await self.admin.browse(q.queue, q.min_offset, DLQ_PAGE - len(found))
        total = sum(q.max_offset - q.min_offset for q in status)
        return web.json_response({"total": total, "messages": [message_json(m) for m in found]})

    async def resend(self, request: web.Request) -> web.StreamResponse:
        """Give the group DLQ messages again, by their msgIds (`{"msgIds": [...]}`)."""
        group = request.match_info["group"]
        body = await self.json_of(request)
        wanted = body.get("msgIds")
        if not isinstance(wanted, list) or not wanted:
            raise BadInput("msgIds: the DLQ messages to resend")
        topic = f"%DLQ%{group}"
        sent = []
        for msg_id in wanted:
            msg = await self.admin.query_by_id(text(msg_id, "msgId"), topic)
            sent.append({"msgId": msg_id, "copy": await self.admin.resend_to_group(group, msg)})
        log.info("DLQ messages resent from the console", group=group, count=len(sent))
        return web.json_response(sent)

    # --- messages ------------------------------------------------------------------------------
    async def messages(self, request: web.Request) -> web.StreamResponse:
        """By key (`topic`, `key`), id (`id`, `topic` optional), queue offset (`topic`,
        `broker`, `queue`, `offset`) or time (`topic`, `time` in ms)."""
        q = request.query
        if "key" in q:
            found = await self.admin.query_by_key(text(q.get("topic"), "topic"), q["key"], 64)
        elif "id" in q:
            found = [await self.admin.query_by_id(text(q["id"], "id"), q.get("topic") or None)]
        elif "offset" in q:
            found = [await self.admin.message_at(self._queue(q), number(q["offset"], "offset"))]
        elif "time" in q:
            topic = text(q.get("topic"), "topic")
            found = await self.admin.messages_at_time(topic, number(q["time"], "time"))
        else:
            raise BadInput("look a message up by key, id, offset or time")
        return web.json_response([message_json(m) for m in found])

    @staticmethod
    def _queue(q: Any) -> MessageQueue:
        return MessageQueue(
            text(q.get("topic"), "topic"), text(q.get("broker"), "broker"),
            number(q.get("queue"), "queue"),
        )  # fmt: skip

    async def body(self, request: web.Request) -> web.StreamResponse:
        """One message's body as a file."""
        q = request.query
        mq = self._queue(q)
        msg = await self.admin.message_at(mq, number(q.get("offset"), "offset"))
        name = f"{mq.topic}-{mq.queue_id}-{msg.queue_offset}.bin"
        return web.Response(
            body=msg.body,
            content_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )


async def serve(
    admin: Admin, host: str, port: int, interval_s: float = 5.0
) -> tuple[web.AppRunner, asyncio.Task[None]]:
    """Start the console on host:port; its runner and its sampling task."""
    history = History(admin, interval_s=interval_s)
    runner = web.AppRunner(Console(admin, history).app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner, asyncio.ensure_future(history.run())
