"""Settings of the broker daemon, its remoting server and its name server (RocketMQ's
`BrokerConfig`, `NettyServerConfig`, `NamesrvConfig`), and `load_settings`, which reads all of
them, with the store's, from one broker.conf, the environment and CLI flags.

Each setting is declared once with its default and help text; keys are RocketMQ's camelCase
names (`listenPort`, `brokerIP1`, `autoCreateTopicEnable`).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum

from rmqpy.config.properties import ConfigError, load_config
from rmqpy.config.store_config import MessageStoreConfig, java_key, setting
from rmqpy.remoting.tls import (
    CLIENT_AUTH,
    TLS_MODES,
    ServerTls,
    TlsConfigError,
    client_context,
    server_tls,
)


class BrokerRole(Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """RocketMQ `BrokerConfig`: identity, topics and groups, long polling, executors."""

    broker_name: str = setting("broker-a", "Name of this broker in routes (brokerName).")
    broker_cluster_name: str = setting("DefaultCluster", "Cluster this broker belongs to.")
    broker_id: int = setting(0, "0 for a master; a slave's id is positive.")
    broker_role: BrokerRole = setting(BrokerRole.ASYNC_MASTER, "ASYNC_MASTER, SYNC_MASTER, SLAVE.")
    broker_ip1: str = setting(
        "",
        "Address advertised in routes and message ids; empty: first non-loopback IPv4.",
        key="brokerIP1",
    )
    listen_port: int = setting(10911, "Port of the broker's remoting server (0: any free port).")
    fast_listen_port: int = setting(
        -1, "RocketMQ's VIP channel port for old clients; -1: listenPort-2, 0: none."
    )
    namesrv_addr: str = setting("", "Name servers to register with every 30 s (host:port;...).")
    namesrv_listen_port: int = setting(
        9876, "Port of the name server embedded in the broker process; 0 turns it off."
    )
    namesrv_bind_address: str = setting(
        "", "Address the embedded name server listens on; empty: bindAddress."
    )
    metrics_port: int = setting(
        5557,
        "Port of the HTTP endpoint serving Prometheus /metrics and /healthz; 0 turns it off.",
        key="metricsPort",
    )
    metrics_bind_address: str = setting(
        "", "Address the HTTP endpoint listens on; empty: bindAddress.", key="metricsBindAddress"
    )
    metrics_bearer_token: str = setting(
        "",
        "When set, /metrics answers only requests with `Authorization: Bearer <token>` "
        "(Prometheus: authorization.credentials); /healthz stays open for health checks.",
        key="metricsBearerToken",
    )
    acl_enable: bool = setting(
        False,
        "RocketMQ's plain ACL: every request is checked against the accounts of plainAclFile "
        "(signature, admin codes, topic and group permissions, address whitelists); the "
        "broker does not start without a readable file.",
        key="aclEnable",
    )
    namesrv_access_key: str = setting(
        "",
        "The ACL account the broker signs its registrations with the name servers of "
        "namesrvAddr with (an admin account where their ACL is on).",
    )
    namesrv_secret_key: str = setting("", "That account's secret key.")
    plain_acl_file: str = setting(
        "",
        "The plain_acl.yml (RocketMQ's format) aclEnable reads, again whenever it changes; "
        "empty: $ROCKETMQ_HOME/conf/plain_acl.yml, where RocketMQ reads it.",
        key="plainAclFile",
    )
    health_dispatch_stall_seconds: int = setting(
        30,
        "/healthz answers 503 when dispatch has been behind without moving for this long.",
    )
    broker_permission: int = setting(6, "Broker perm bits: 4 read, 2 write.")
    auto_create_topic_enable: bool = setting(True, "Create a topic on its first send.")
    default_topic_queue_nums: int = setting(8, "Queues of an auto-created topic.")
    auto_create_subscription_group: bool = setting(True, "Create a group on first use.")
    long_polling_enable: bool = setting(True, "Hold pulls that find nothing until data arrives.")
    short_polling_time_mills: int = setting(
        1000, "Hold time when long polling is off, in ms.", key="shortPollingTimeMills"
    )
    max_reconsume_times: int = setting(16, "Send-backs before a message goes to %DLQ%group.")
    send_message_thread_pool_nums: int = setting(
        0,
        "Threads storing sends; 0 stores them on the event loop (faster: no thread hand-offs; "
        "under SYNC_FLUSH a send is answered once its group commit is done, and send-backs, "
        "which wait for it, get one thread).",
    )
    pull_message_thread_pool_nums: int = setting(4, "Threads serving pulls.")
    query_message_thread_pool_nums: int = setting(2, "Threads serving queries by key or id.")
    admin_broker_thread_pool_nums: int = setting(2, "Threads serving admin requests.")
    client_manage_thread_pool_nums: int = setting(2, "Threads serving heartbeats and clients.")
    send_thread_pool_queue_capacity: int = setting(10_000, "Queued sends before SYSTEM_BUSY.")
    pull_thread_pool_queue_capacity: int = setting(100_000, "Queued pulls before SYSTEM_BUSY.")
    query_thread_pool_queue_capacity: int = setting(20_000, "Queued queries before SYSTEM_BUSY.")
    admin_thread_pool_queue_capacity: int = setting(10_000, "Queued admin requests.")
    client_manager_thread_pool_queue_capacity: int = setting(
        1_000_000, "Queued heartbeats and client requests before SYSTEM_BUSY."
    )
    wait_time_mills_in_send_queue: int = setting(
        200, "A send queued longer is refused (busy).", key="waitTimeMillsInSendQueue"
    )
    wait_time_mills_in_pull_queue: int = setting(
        5000, "A pull queued longer is refused.", key="waitTimeMillsInPullQueue"
    )
    wait_time_mills_in_heartbeat_queue: int = setting(
        31_000, "A heartbeat queued longer.", key="waitTimeMillsInHeartbeatQueue"
    )
    flush_consumer_offset_interval_ms: int = setting(
        5000,
        "How often consumer offsets are written to config/consumerOffset.json.",
        key="flushConsumerOffsetInterval",
    )
    register_name_server_period_ms: int = setting(
        30_000, "How often to register with namesrvAddr.", key="registerNameServerPeriod"
    )
    channel_expired_timeout_ms: int = setting(
        120_000, "A client without a heartbeat for this long is dropped from its groups."
    )

    def __post_init__(self) -> None:
        if not 1 <= self.default_topic_queue_nums <= 1024:
            raise ValueError("defaultTopicQueueNums must be between 1 and 1024")


@dataclass(frozen=True, slots=True)
class RemotingConfig:
    """RocketMQ `NettyServerConfig`: the address to listen on, connection limits."""

    bind_address: str = setting(
        "0.0.0.0",
        "Address the broker's ports listen on (and the name server's and the HTTP "
        "endpoint's unless they name their own): 0.0.0.0 every IPv4 interface, as RocketMQ "
        "listens; 127.0.0.1 this machine only; :: every IPv6 and IPv4 interface.",
        key="bindAddress",
    )

    server_channel_max_idle_time_seconds: int = setting(
        120, "Connections silent for this long are closed.", key="serverChannelMaxIdleTimeSeconds"
    )
    max_requests_in_flight_per_connection: int = setting(
        1024, "Requests from one connection handled at once before its reading pauses."
    )
    tls_server_mode: str = setting(
        "disabled",
        "TLS on the broker's and the name server's ports: disabled; permissive (each "
        "connection chooses TLS or plain, told apart by its first byte); enforcing (TLS only).",
        key="tls.server.mode",
    )
    tls_server_cert_path: str = setting(
        "", "The server's certificate chain (PEM) when TLS is on.", key="tls.server.certPath"
    )
    tls_server_key_path: str = setting(
        "", "The server's private key (PEM) when TLS is on.", key="tls.server.keyPath"
    )
    tls_server_key_password: str = setting(
        "", "The password of an encrypted tls.server.keyPath.", key="tls.server.keyPassword"
    )
    tls_server_need_client_auth: str = setting(
        "none",
        "Mutual TLS: none; optional (a client certificate, when given, must verify); require.",
        key="tls.server.need.client.auth",
    )
    tls_server_trust_cert_path: str = setting(
        "",
        "The authorities (PEM) client certificates are checked against, for mutual TLS.",
        key="tls.server.trustCertPath",
    )
    tls_enable: bool = setting(
        False,
        "The broker's own connections (registering with namesrvAddr) over TLS, with the "
        "tls.client.* settings.",
        key="tls.enable",
    )
    tls_client_trust_cert_path: str = setting(
        "",
        "Authorities (PEM) the name servers' certificates are checked against; empty: the "
        "system's.",
        key="tls.client.trustCertPath",
    )
    tls_client_auth_server: bool = setting(
        False,
        "Check the name servers' certificates and addresses (RocketMQ's default, false, "
        "encrypts without checking who answers).",
        key="tls.client.authServer",
    )
    tls_client_cert_path: str = setting(
        "", "The broker's client certificate (PEM), for mutual TLS.", key="tls.client.certPath"
    )
    tls_client_key_path: str = setting("", "Its private key (PEM).", key="tls.client.keyPath")
    max_connections: int = setting(
        10_000,
        "Connections held at once over the broker's ports; a new one past it is closed as it "
        "opens, with a warning (an idle connection costs about 20 KiB and a descriptor).",
    )

    def __post_init__(self) -> None:
        if self.tls_server_mode not in TLS_MODES:
            raise ValueError(
                f"tls.server.mode must be one of {', '.join(TLS_MODES)}, "
                f"not {self.tls_server_mode!r}"
            )
        if self.tls_server_need_client_auth not in CLIENT_AUTH:
            raise ValueError(
                f"tls.server.need.client.auth must be one of {', '.join(CLIENT_AUTH)}, "
                f"not {self.tls_server_need_client_auth!r}"
            )

    def client_tls(self) -> ssl.SSLContext | None:
        """The context of the broker's own connections (ValueError: files that do not
        load), or None without tls.enable."""
        if not self.tls_enable:
            return None
        try:
            context = client_context(
                self.tls_client_trust_cert_path or None,
                self.tls_client_cert_path or None,
                self.tls_client_key_path or None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"tls.client.*: {exc}") from None
        if not self.tls_client_auth_server:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def server_tls(self) -> ServerTls:
        """The TLS of the listening ports (TlsConfigError: files that do not load)."""
        return server_tls(
            self.tls_server_mode,
            self.tls_server_cert_path,
            self.tls_server_key_path,
            self.tls_server_key_password,
            self.tls_server_need_client_auth,
            self.tls_server_trust_cert_path,
        )


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    """RocketMQ `NamesrvConfig`: the route service, embedded or standalone."""

    broker_heartbeat_timeout_ms: int = setting(
        120_000,
        "A registered broker that has not re-registered for this long is dropped.",
        key="brokerHeartbeatTimeoutMillis",
    )
    scan_not_active_broker_interval_ms: int = setting(5000, "How often to look for dead brokers.")
    route_unknown_topics_through_default: bool = setting(
        False,
        "Answer a route query for a topic that does not exist with TBW102's route (at most 4 "
        "queues, a RocketMQ client's defaultTopicQueueNums) instead of TOPIC_NOT_EXIST, without "
        "creating the topic: for clients that do not fall back to TBW102 themselves (ali-ons), "
        "whose first send then creates the topic when autoCreateTopicEnable is on.",
    )


@dataclass(frozen=True, slots=True)
class Settings:
    broker: BrokerConfig
    store: MessageStoreConfig
    remoting: RemotingConfig
    namesrv: NamesrvConfig


COMPONENTS = (BrokerConfig, MessageStoreConfig, RemotingConfig, NamesrvConfig)


def known_keys(cls: type) -> set[str]:
    return {f.name for f in fields(cls)} | {java_key(f) for f in fields(cls)}


def load_settings(
    conf_text: str = "",
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> tuple[Settings, dict[str, str]]:
    """Every component's settings; returns them with the broker.conf keys nobody knows.

    Raises ConfigError naming the key for a bad value or an unknown override."""
    overrides = dict(overrides or {})
    known = [known_keys(cls) for cls in COMPONENTS]
    for key in overrides:
        if not any(key in keys for keys in known):
            raise ConfigError(f"unknown setting {key}")
    loaded = []
    unknown: dict[str, str] | None = None
    for cls, keys in zip(COMPONENTS, known, strict=True):
        mine = {k: v for k, v in overrides.items() if k in keys}
        try:
            config: object
            config, missing = load_config(cls, conf_text, environ, mine)
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        loaded.append(config)
        unknown = missing if unknown is None else {k: v for k, v in unknown.items() if k in missing}
    broker, store, remoting, namesrv = loaded
    assert isinstance(broker, BrokerConfig) and isinstance(store, MessageStoreConfig)
    assert isinstance(remoting, RemotingConfig) and isinstance(namesrv, NamesrvConfig)
    return Settings(broker, store, remoting, namesrv), unknown or {}
