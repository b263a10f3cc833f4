"""Topic routes from the name server: which brokers hold a topic and how many
read and write queues each has. Bodies are fastjson's (bare integer keys), read leniently."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rmqpy.client.errors import ClientError
from rmqpy.client.message import MessageQueue
from rmqpy.config import java_json
from rmqpy.remoting.codes import MASTER_ID, PERM_READ, PERM_WRITE


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    brokers: dict[str, dict[int, str]]  # broker name -> {broker id: address}
    queue_datas: tuple[QueueData, ...]
    # The write queues, listed once: a producer asks for them at every send.
    _write: tuple[MessageQueue, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        write = tuple(
            MessageQueue(self.topic, q.broker_name, i)
            for q in sorted(self.queue_datas, key=lambda q: q.broker_name)
            if q.perm & PERM_WRITE and self.master(q.broker_name)
            for i in range(q.write_queue_nums)
        )
        object.__setattr__(self, "_write", write)

    @classmethod
    def from_body(cls, topic: str, body: bytes) -> TopicRoute:
        try:
            data: Any = java_json.loads(body.decode("utf-8"))
            brokers = {
                str(b["brokerName"]): {int(k): str(v) for k, v in b["brokerAddrs"].items()}
                for b in data.get("brokerDatas") or []
            }
            queues = tuple(
                QueueData(
                    str(q["brokerName"]),
                    int(q["readQueueNums"]),
                    int(q["writeQueueNums"]),
                    int(q["perm"]),
                )
                for q in data.get("queueDatas") or []
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ClientError(f"unreadable route of topic {topic}: {exc}") from exc
        return cls(topic, brokers, queues)

    def master(self, broker_name: str) -> str | None:
        return self.brokers.get(broker_name, {}).get(MASTER_ID)

    def masters(self) -> dict[str, str]:
        return {
            name: addrs[MASTER_ID] for name, addrs in self.brokers.items() if MASTER_ID in addrs
        }

    def write_queues(self) -> list[MessageQueue]:
        """Queues a producer may send to, in RocketMQ's order (per broker, then queue id)."""
        return list(self._write)

    def read_queues(self) -> list[MessageQueue]:
        return [
            MessageQueue(self.topic, q.broker_name, i)
            for q in sorted(self.queue_datas, key=lambda q: q.broker_name)
            if q.perm & PERM_READ
            for i in range(q.read_queue_nums)
        ]
