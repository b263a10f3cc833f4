"""The name server's route table (RocketMQ `RouteInfoManager`).

Brokers register their topic configs (REGISTER_BROKER every 30 s, or in-process for the
name server embedded in a broker); a broker that has not registered for
`broker_heartbeat_timeout_ms` is dropped by `scan_not_active`. Routes and cluster info are
built as the JSON bodies Java clients parse (standard JSON with quoted broker-id keys, which
fastjson reads).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from rmqpy.remoting.codes import DEFAULT_TOPIC, MASTER_ID, PERM_INHERIT

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class RegisteredBroker:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    topics: dict[str, dict[str, Any]]  # topic -> TopicConfig JSON
    last_update_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    permanent: bool = False  # the broker this name server is embedded in


class RouteInfoManager:
    def __init__(self, broker_timeout_ms: int) -> None:
        self.broker_timeout_ms = broker_timeout_ms
        self._lock = threading.Lock()
        self._brokers: dict[str, RegisteredBroker] = {}  # by address

    def register_broker(
        self,
        cluster: str,
        broker_name: str,
        broker_id: int,
        addr: str,
        topics: dict[str, dict[str, Any]],
        *,
        permanent: bool = False,
    ) -> str | None:
        """Record a broker's topics; returns its master's address (None for a master)."""
        with self._lock:
            known = addr in self._brokers
            self._brokers[addr] = RegisteredBroker(
                cluster, broker_name, broker_id, addr, dict(topics), permanent=permanent
            )
            master = next(
                (
                    b.addr
                    for b in self._brokers.values()
                    if b.broker_name == broker_name and b.broker_id == MASTER_ID
                ),
                None,
            )
        if not known:
            log.info("broker registered", broker=broker_name, addr=addr, cluster=cluster)
        return master if broker_id != 0 else None

    def unregister_broker(self, addr: str) -> None:
        with self._lock:
            gone = self._brokers.pop(addr, None)
        if gone is not None:
            log.info("broker unregistered", broker=gone.broker_name, addr=addr)

    def scan_not_active(self) -> None:
        deadline = int(time.time() * 1000) - self.broker_timeout_ms
        with self._lock:
            dead = [
                b for b in self._brokers.values() if not b.permanent and b.last_update_ms < deadline
            ]
            for b in dead:
                del self._brokers[b.addr]
        for b in dead:
            log.warning("broker expired", broker=b.broker_name, addr=b.addr)

    def route_for(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData JSON for `topic`, None when no live broker serves it."""
        with self._lock:
            brokers = list(self._brokers.values())
        queue_datas = []
        names: set[str] = set()
        for b in brokers:
            config = b.topics.get(topic)
            if config is None or b.broker_id != 0:
                continue
            names.add(b.broker_name)
            queue_datas.append(
                {
                    "brokerName": b.broker_name,
                    "perm": int(config.get("perm", 6)),
                    "readQueueNums": int(config.get("readQueueNums", 0)),
                    "topicSysFlag": int(config.get("topicSysFlag", 0)),
                    "writeQueueNums": int(config.get("writeQueueNums", 0)),
                }
            )
        if not queue_datas:
            return None
        return {
            "brokerDatas": _broker_datas(brokers, names),
            "filterServerTable": {},
            "queueDatas": sorted(queue_datas, key=lambda q: str(q["brokerName"])),
        }

    def route_through_default(self, topic: str, queue_cap: int) -> dict[str, Any] | None:
        """`topic`'s route as a RocketMQ producer builds it for a topic the name server does
        not know (`MQClientInstance.updateTopicRouteInfoFromNameServer` with isDefault):
        TBW102's route with at most `queue_cap` queues and no INHERIT bit."""
        route = self.route_for(DEFAULT_TOPIC)
        if route is None:
            return None
        for queue in route["queueDatas"]:
            queue["readQueueNums"] = min(queue["readQueueNums"], queue_cap)
            queue["writeQueueNums"] = min(queue["writeQueueNums"], queue_cap)
            queue["perm"] &= ~PERM_INHERIT
        return route

    def cluster_info(self) -> dict[str, Any]:
        """ClusterInfo JSON (GET_BROKER_CLUSTER_INFO)."""
        with self._lock:
            brokers = list(self._brokers.values())
        clusters: dict[str, set[str]] = {}
        for b in brokers:
            clusters.setdefault(b.cluster, set()).add(b.broker_name)
        table = {
            d["brokerName"]: d for d in _broker_datas(brokers, {b.broker_name for b in brokers})
        }
        return {
            "brokerAddrTable": table,
            "clusterAddrTable": {c: sorted(n) for c, n in clusters.items()},
        }


def _broker_datas(brokers: list[RegisteredBroker], names: set[str]) -> list[dict[str, Any]]:
    datas: dict[str, dict[str, Any]] = {}
    for b in brokers:
        if b.broker_name not in names:
            continue
        data = datas.setdefault(
            b.broker_name,
            {
                "brokerAddrs": {},
                "brokerName": b.broker_name,
                "cluster": b.cluster,
                "enableActingMaster": False,
            },
        )
        data["brokerAddrs"][str(b.broker_id)] = b.addr
    return [datas[n] for n in sorted(datas)]
