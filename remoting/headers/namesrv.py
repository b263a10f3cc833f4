"""Name-server requests: REGISTER_BROKER (103), UNREGISTER_BROKER (104).
GET_ROUTEINFO_BY_TOPIC (105) uses `admin.TopicRequestHeader`."""

from __future__ import annotations

from dataclasses import dataclass

from rmqpy.remoting.headers import ExtHeader, JavaInt, JavaLong


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequestHeader(ExtHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: JavaLong
    compressed: bool | None = None
    body_crc32: JavaInt | None = None
    heartbeat_timeout_millis: JavaLong | None = None


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponseHeader(ExtHeader):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(frozen=True, slots=True)
class UnRegisterBrokerRequestHeader(ExtHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: JavaLong
