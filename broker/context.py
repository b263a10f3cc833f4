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

from rmqpy.config.compiled import twin
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.header_codec import compact_json
from rmqpy.remoting.protocol import Connection


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
    for conn, pairs in by_connection(items).items():
        conn.respond_all(pairs)


def by_connection(
    items: Sequence[tuple[RequestContext, RemotingCommand]],
) -> dict[Connection, list[tuple[RemotingCommand, RemotingCommand]]]:
    """Each connection's (request, response) pairs, in order."""
    by_conn: dict[Connection, list[tuple[RemotingCommand, RemotingCommand]]] = {}
    for ctx, response in items:
        by_conn.setdefault(ctx.conn, []).append((ctx.request, response))
    return by_conn


def runs_of(
    table: dict[int, Any],
    conn: Connection,
    requests: Sequence[RemotingCommand],
    loop: asyncio.AbstractEventLoop,
    received_s: float,
) -> list[tuple[Any, list[Any]]]:
    """The requests of one read in runs of one code's `table` entry, in order: (entry, a
    context for each request, all received at `received_s`), or (None, the requests) for
    a run of codes the table does not have."""
    runs: list[tuple[Any, list[Any]]] = []
    entry: Any = False  # no run yet
    run: list[Any] = []
    for request in requests:
        found = table.get(request.code)
        if found is not entry:
            if run:
                runs.append((entry, run))
            entry, run = found, []
        run.append(request if found is None else RequestContext(conn, request, loop, received_s))
    if run:
        runs.append((entry, run))
    return runs


# The pure-Python functions, kept as the reference the compiled twin is tested against.
reference_by_connection, reference_runs_of = by_connection, runs_of
_compiled = twin("rmqpy.broker._context")
if _compiled is not None:
    by_connection = _compiled.by_connection
    runs_of = _compiled.runs_of


def not_supported(request: RemotingCommand) -> RemotingCommand:
    return request.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
    )


def json_body(value: Any) -> bytes:
    """A response body as JSON (standard JSON, which fastjson reads)."""
    return compact_json(value)
