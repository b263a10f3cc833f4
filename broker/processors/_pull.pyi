import asyncio
from typing import Any, Literal

from rmqpy.broker.context import RequestContext
from rmqpy.broker.long_polling import ParkedPull
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.headers.pull import PullMessageRequestHeader
from rmqpy.remoting.protocol import Connection

class _Declined: ...

DECLINED: _Declined

class PullFrames:
    def __init__(self) -> None: ...
    def head(
        self,
        kind: Any,
        code: int,
        opaque: int,
        remark: bytes,
        next_offset: int,
        min_offset: int,
        max_offset: int,
        body_len: int,
    ) -> bytes | None: ...

class PullLane:
    def __init__(self, owner: Any, parked: Any) -> None: ...
    def answer(
        self, ctx: RequestContext, h: PullMessageRequestHeader
    ) -> tuple[bytes, bytes] | Literal[False] | _Declined | None: ...
    def answer_read(
        self,
        conn: Connection,
        requests: list[RemotingCommand],
        received_s: float,
        loop: asyncio.AbstractEventLoop,
    ) -> tuple[list[RequestContext], list[RequestContext]]: ...
    def answer_frames(
        self,
        conn: Connection,
        buf: bytes | memoryview,
        max_frame_length: int,
        received_s: float,
        loop: asyncio.AbstractEventLoop | None,
        room: int,
    ) -> tuple[int, list[RequestContext]]: ...
    def answer_parked(
        self, pulls: list[ParkedPull], now: float
    ) -> tuple[list[ParkedPull], list[tuple[RequestContext, PullMessageRequestHeader]]]: ...
