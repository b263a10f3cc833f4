"""Connections to name servers and brokers, one per address, opened on first use.

`invoke(addr, code, header, body)` sends a request and returns the response; connecting is
retried a bounded number of times and then fails with one line naming the address. Headers go
in RocketMQ's binary form to rmqpy and as JSON to anything else: with `serialize="auto"` the
first request to an address is JSON, and a response in `language` PYTHON (rmqpy) switches that
address to binary headers. Requests the broker sends us go to `on_notify`
(NOTIFY_CONSUMER_IDS_CHANGED), `on_reset` (RESET_CONSUMER_CLIENT_OFFSET) and
`on_consume_directly` (CONSUME_MESSAGE_DIRECTLY).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from rmqpy.client.errors import BrokerUnreachableError, ClientError, RequestTimeoutError
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import RemotingConnectionError, RemotingTimeoutError
from rmqpy.remoting.headers import ExtHeader
from rmqpy.remoting.protocol import Connection
from rmqpy.remoting.signature import Credentials

log = structlog.get_logger(__name__)

# (group, broker name, stored record) -> ConsumeMessageDirectlyResult, None: no such group
DirectHandler = Callable[[str, str, bytes], Awaitable[dict[str, Any] | None]]

SERIALIZE_NAMES = {
    "auto": None,
    "json": SerializeType.JSON,
    "binary": SerializeType.ROCKETMQ,
    "msgpack": SerializeType.MSGPACK,
}


def split_address(addr: str) -> tuple[str, int]:
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ClientError(f"bad address {addr!r}: expected host:port")
    return host.strip("[]"), int(port)


class WireFields(dict[str, str]):
    """Ext fields already written as the wire's strings (`ext_of`'s own result, copied and
    changed): `ext_of` takes them as they are (a plain dict, as the frame encoders want),
    without rendering each value again."""


def ext_of(header: ExtHeader | Mapping[str, Any] | None, v2: bool = False) -> dict[str, str]:
    if header is None:
        return {}
    if isinstance(header, ExtHeader):
        return header.to_ext(v2=v2)
    if isinstance(header, WireFields):
        return dict(header)
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in header.items()}


class RemotingClient:
    def __init__(
        self,
        serialize: str = "auto",
        on_notify: Callable[[str], None] | None = None,
        on_reset: Callable[[str, str, bytes], None] | None = None,
        on_consume_directly: DirectHandler | None = None,
        connect_attempts: int = 3,
        connect_timeout_s: float = 3.0,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if serialize not in SERIALIZE_NAMES:
            raise ClientError(f"serialize must be one of {', '.join(SERIALIZE_NAMES)}")
        self._fixed_type = SERIALIZE_NAMES[serialize]
        self.on_notify = on_notify
        self.on_reset = on_reset  # (group, topic, body) of RESET_CONSUMER_CLIENT_OFFSET
        self.on_consume_directly = on_consume_directly  # (group, broker name, record)
        self.connect_attempts = connect_attempts
        self.connect_timeout_s = connect_timeout_s
        self.credentials = credentials  # every request is signed with it (plain ACL)
        self.tls = tls  # every connection is made over TLS with it
        self._conns: dict[str, Connection] = {}
        self._opening: dict[str, asyncio.Future[Connection]] = {}
        self._types: dict[str, SerializeType] = {}
        self._closed = False
        self._answering: set[asyncio.Task[None]] = set()  # requests from brokers being answered

    def serialize_type(self, addr: str) -> SerializeType:
        if self._fixed_type is not None:
            return self._fixed_type
        return self._types.get(addr, SerializeType.JSON)

    def _ready(self, addr: str) -> Connection | None:
        """The open connection to `addr`, if there is one."""
        conn = self._conns.get(addr)
        return conn if conn is not None and conn.is_open else None

    async def connection(self, addr: str) -> Connection:
        conn = self._ready(addr)
        if conn is not None:
            return conn
        if self._closed:
            raise ClientError("the client is closed")
        opening = self._opening.get(addr)
        if opening is None:
            opening = asyncio.ensure_future(self._open(addr))
            self._opening[addr] = opening
            opening.add_done_callback(lambda _f: self._opening.pop(addr, None))
        return await asyncio.shield(opening)

    async def _open(self, addr: str) -> Connection:
        host, port = split_address(addr)
        reason = ""
        for attempt in range(self.connect_attempts):
            if attempt:
                await asyncio.sleep(0.2 * 2 ** (attempt - 1))
            try:
                conn = await connect(host, port, self._on_request, self.connect_timeout_s, self.tls)
            except RemotingConnectionError as exc:
                reason = str(exc.__cause__ or exc)
                continue
            self._conns[addr] = conn
            return conn
        raise BrokerUnreachableError(
            f"cannot reach {addr}: {reason} (after {self.connect_attempts} attempts)", addr=addr
        )

    def _on_request(self, conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            group = cmd.ext_fields.get("consumerGroup", "")
            if self.on_notify is not None:
                self.on_notify(group)
            conn.respond(cmd, cmd.response())
            return
        if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY and self.on_consume_directly:
            task = asyncio.ensure_future(
                self._consume_directly(conn, cmd, self.on_consume_directly)
            )
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)
            return
        if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            if self.on_reset is not None:
                ext = cmd.ext_fields
                self.on_reset(ext.get("group", ""), ext.get("topic", ""), cmd.body)
            conn.respond(cmd, cmd.response())
            return
        conn.respond(
            cmd,
            cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {cmd.code} not supported",
            ),
        )

    @staticmethod
    async def _consume_directly(
        conn: Connection, cmd: RemotingCommand, handler: DirectHandler
    ) -> None:
        """A broker hands us one message for one of our groups (an operator's tool asked):
        the group's listener runs on it, and the answer says how that went."""
        ext = cmd.ext_fields
        group = ext.get("consumerGroup", "")
        result = await handler(group, ext.get("brokerName", ""), cmd.body)
        if result is None:
            answer = cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{group}> not exist in this consumer",
            )
        else:
            answer = cmd.response(body=json.dumps(result).encode())
        if conn.is_open:
            conn.respond(cmd, answer)

    def _command(
        self,
        addr: str,
        code: int,
        header: ExtHeader | Mapping[str, Any] | None,
        body: bytes,
        v2: bool,
    ) -> RemotingCommand:
        cmd = RemotingCommand(
            code,
            ext_fields=ext_of(header, v2),
            body=body,
            serialize_type=self.serialize_type(addr),
        )
        if self.credentials is not None:
            self.credentials.sign(cmd)
        return cmd

    async def invoke(
        self,
        addr: str,
        code: int,
        header: ExtHeader | Mapping[str, Any] | None = None,
        body: bytes = b"",
        timeout_s: float = 3.0,
        *,
        v2: bool = False,
    ) -> RemotingCommand:
        conn = self._ready(addr) or await self.connection(addr)  # (no coroutine if open)
        cmd = self._command(addr, code, header, body, v2)
        try:
            response = await conn.invoke(cmd, timeout_s)
        except RemotingTimeoutError:
            raise RequestTimeoutError(
                f"no answer from {addr} to request {_code_name(code)} in {timeout_s:g} s",
                addr=addr,
            ) from None
        except RemotingConnectionError as exc:
            raise BrokerUnreachableError(
                f"lost the connection to {addr}: {exc}", addr=addr
            ) from exc
        if self._fixed_type is None and response.language == LanguageCode.PYTHON:
            self._types[addr] = SerializeType.ROCKETMQ  # what rmqpy's compiled paths answer
        return response

    async def invoke_oneway(
        self,
        addr: str,
        code: int,
        header: ExtHeader | Mapping[str, Any] | None = None,
        body: bytes = b"",
        *,
        v2: bool = False,
    ) -> None:
        conn = await self.connection(addr)
        conn.invoke_oneway(self._command(addr, code, header, body, v2))

    async def close(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            try:
                await asyncio.wait_for(conn.closed, 2.0)
            except TimeoutError:
                conn.abort()


def _code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


def check(response: RemotingCommand, addr: str, *ok: int) -> RemotingCommand:
    """The response when its code is SUCCESS (or one of `ok`), else a ClientError with the
    broker's remark."""
    if response.code == ResponseCode.SUCCESS or response.code in ok:
        return response
    try:
        name = ResponseCode(response.code).name
    except ValueError:
        name = str(response.code)
    remark = (response.remark or "").strip()
    raise ClientError(f"{addr} answered {name}: {remark}", code=response.code, addr=addr)
