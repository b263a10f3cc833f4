"""Registration with standalone name servers (RocketMQ `BrokerOuterAPI`): REGISTER_BROKER to
every address of `namesrvAddr` every `registerNameServerPeriod`, UNREGISTER_BROKER at
shutdown. A name server that is down is logged and tried again next period."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

import structlog

from rmqpy.broker.context import json_body
from rmqpy.config.broker_config import BrokerConfig
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import RequestCode, ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import RemotingError
from rmqpy.remoting.headers.namesrv import (
    RegisterBrokerRequestHeader,
    UnRegisterBrokerRequestHeader,
)
from rmqpy.remoting.protocol import Connection
from rmqpy.remoting.signature import Credentials

log = structlog.get_logger(__name__)

REGISTER_TIMEOUT_S = 24.0


def parse_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


class NamesrvRegistrar:
    def __init__(
        self,
        cfg: BrokerConfig,
        broker_addr: str,
        topics_json: Callable[[], dict[str, Any]],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.cfg = cfg
        self.broker_addr = broker_addr
        self.topics_json = topics_json
        self.addrs = [a.strip() for a in cfg.namesrv_addr.split(";") if a.strip()]
        self.tls = tls
        self.credentials = (
            Credentials(cfg.namesrv_access_key, cfg.namesrv_secret_key)
            if cfg.namesrv_access_key and cfg.namesrv_secret_key
            else None
        )
        self._conns: dict[str, Connection] = {}

    async def _connection(self, addr: str) -> Connection:
        conn = self._conns.get(addr)
        if conn is None or not conn.is_open:
            host, port = parse_addr(addr)
            conn = await connect(host, port, tls=self.tls)
            self._conns[addr] = conn
        return conn

    async def register_all(self) -> None:
        h = RegisterBrokerRequestHeader(
            self.cfg.broker_name,
            self.broker_addr,
            self.cfg.broker_cluster_name,
            self.broker_addr.rpartition(":")[0] + ":10912",
            self.cfg.broker_id,
            compressed=False,
            body_crc32=0,
        )
        body = json_body(
            {"topicConfigSerializeWrapper": self.topics_json(), "filterServerList": []}
        )
        await asyncio.gather(
            *(self._send(a, RequestCode.REGISTER_BROKER, h.to_ext(), body) for a in self.addrs)
        )

    async def unregister_all(self) -> None:
        h = UnRegisterBrokerRequestHeader(
            self.cfg.broker_name, self.broker_addr, self.cfg.broker_cluster_name, self.cfg.broker_id
        )
        await asyncio.gather(
            *(self._send(a, RequestCode.UNREGISTER_BROKER, h.to_ext(), b"") for a in self.addrs)
        )
        for conn in self._conns.values():
            conn.close()

    async def _send(self, addr: str, code: int, ext: dict[str, str], body: bytes) -> None:
        try:
            conn = await self._connection(addr)
            request = RemotingCommand(code, ext_fields=dict(ext), body=body)
            if self.credentials is not None:
                self.credentials.sign(request)
            response = await conn.invoke(request, REGISTER_TIMEOUT_S)
        except (RemotingError, OSError, ValueError) as exc:
            log.warning("name server unreachable", namesrv=addr, request=code, error=str(exc))
            return
        if response.code != ResponseCode.SUCCESS:
            log.warning(
                "name server refused", namesrv=addr, code=response.code, remark=response.remark
            )
