"""What a processor gets for one request (`RequestContext`), and what it answers with.

A processor never sees a transport: it reads `ctx.request` and returns a response, or None
when it parks the request (long polling); a parked request is run again later through its
executor, which answers it then. Responses are written on the event loop; the executor hands
them back in one hop per batch (`broker.executors`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.header_codec import compact_json
from remoting.protocol import Connection


@dataclass(slots=True)
class RequestContext:
    conn: Connection
    request: RemotingCommand
    loop: asyncio.AbstractEventLoop
    received_s: float = field(default_factory=time.monotonic)
    resumed: bool = False  # a parked pull run again: it never parks nor commits twice
    held_s: float = 0.0  # how long it was parked before `received_s` was reset

    @property
    def client_addr(self) -> str:
        return self.conn.peer


class BadRequest(ValueError):
    """A request whose body or fields cannot be used: answered SYSTEM_ERROR with the reason."""


class ResourceRefusal(Exception):
    """A request turned away for want of a resource the broker keeps in reserve (open files):
    answered SYSTEM_ERROR with the reason, logged at most every 10 s."""


# Answers the batch in order; None for a request that was parked (it is answered later).
Processor = Callable[[Sequence[RequestContext]], list[RemotingCommand | None]]
SingleProcessor = Callable[[RequestContext], RemotingCommand | None]


def deliver(items: Sequence[tuple[RequestContext, RemotingCommand]]) -> None:
    """On the loop: write responses, one `writelines` per connection."""
    by_conn: dict[Connection, list[tuple[RemotingCommand, RemotingCommand]]] = {}
    for ctx, response in items:
        by_conn.setdefault(ctx.conn, []).append((ctx.request, response))
    for conn, pairs in by_conn.items():
        conn.respond_all(pairs)


def not_supported(request: RemotingCommand) -> RemotingCommand:
    return request.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
    )


def json_body(value: Any) -> bytes:
    """A response body as JSON (standard JSON, which fastjson reads)."""
    return compact_json(value)
