import asyncio
from collections.abc import Sequence
from typing import Any

from rmqpy.broker.context import RequestContext
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.protocol import Connection

def runs_of(
    table: dict[int, Any],
    conn: Connection,
    requests: Sequence[RemotingCommand],
    loop: asyncio.AbstractEventLoop,
    received_s: float,
) -> list[tuple[Any, list[Any]]]: ...
def by_connection(
    items: Sequence[tuple[RequestContext, RemotingCommand]],
) -> dict[Connection, list[tuple[RemotingCommand, RemotingCommand]]]: ...
