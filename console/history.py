"""The console's memory of the last minutes: every `interval_s` it reads each topic's queue
offsets and each group's progress through the name server, as RocketMQ Dashboard does, and
keeps `window_s` of samples. Rates are differences between samples: messages in per topic
(its max offsets), messages consumed per group (its consumer offsets), and each group's lag.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from rmqpy.client.admin import Admin
from rmqpy.client.errors import ClientError

log = structlog.get_logger(__name__)

SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_")
SYSTEM_TOPICS = frozenset(
    ("TBW102", "SCHEDULE_TOPIC_XXXX", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC")
)
# The groups a RocketMQ broker keeps for its own tools (`SubscriptionGroupManager`, `MixAll`)
SYSTEM_GROUPS = frozenset(
    ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
     "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER")
)  # fmt: skip


def is_system_group(name: str) -> bool:
    return name in SYSTEM_GROUPS or name.startswith("CID_RMQ_SYS_")


def is_system_topic(name: str, cluster_names: set[str]) -> bool:
    """The broker's own topics, retry and dead-letter topics, and the topics named after a
    cluster or a broker (`cluster_names` holds both)."""
    return name.startswith(SYSTEM_PREFIXES) or name in SYSTEM_TOPICS or name in cluster_names


async def cluster_and_broker_names(admin: Admin) -> set[str]:
    clusters = await admin.clusters()
    return set(clusters) | {broker for names in clusters.values() for broker in names}


@dataclass(slots=True)
class Sample:
    at: float  # seconds since the epoch
    topics: dict[str, int]  # topic -> sum of its queues' max offsets
    consumed: dict[str, int]  # group -> sum of its consumer offsets
    lag: dict[str, int]  # group -> messages behind
    topics_consumed: dict[str, int]  # topic -> sum of every group's consumer offsets in it


@dataclass(slots=True)
class History:
    admin: Admin
    interval_s: float = 5.0
    window_s: float = 600.0
    samples: deque[Sample] = field(default_factory=deque)
    cluster_names: set[str] = field(default_factory=set)

    async def run(self) -> None:
        while True:
            try:
                await self.sample()
            except ClientError as exc:
                log.warning("cannot sample the cluster", error=str(exc))
            await asyncio.sleep(self.interval_s)

    async def sample(self) -> Sample:
        self.cluster_names = await cluster_and_broker_names(self.admin)
        topics: dict[str, int] = {}
        for name in await self.admin.topics():
            if is_system_topic(name, self.cluster_names):
                continue
            try:
                topics[name] = sum(q.max_offset for q in await self.admin.topic_status(name))
            except ClientError:
                continue  # deleted meanwhile, or not routed yet
        consumed: dict[str, int] = {}
        lag: dict[str, int] = {}
        topics_consumed: dict[str, int] = {}
        for group in await self.admin.groups():
            if is_system_group(group):
                continue
            progress = await self.admin.progress(group)
            queues = [q for q in progress.queues if not q.queue.topic.startswith("%RETRY%")]
            consumed[group] = sum(q.consumer_offset for q in queues)
            lag[group] = sum(q.lag for q in queues)
            for q in queues:
                topic = q.queue.topic
                topics_consumed[topic] = topics_consumed.get(topic, 0) + q.consumer_offset
        sample = Sample(time.time(), topics, consumed, lag, topics_consumed)
        self.samples.append(sample)
        while self.samples and sample.at - self.samples[0].at > self.window_s:
            self.samples.popleft()
        return sample

    def rate_in(self, topic: str) -> float:
        return self._rate(lambda s: s.topics.get(topic))

    def rate_out(self, group: str) -> float:
        return self._rate(lambda s: s.consumed.get(group))

    def topic_rate_out(self, topic: str) -> float:
        """Messages of `topic` consumed a second, over every group consuming it."""
        return self._rate(lambda s: s.topics_consumed.get(topic, 0) if topic in s.topics else None)

    def _rate(self, value: Callable[[Sample], int | None]) -> float:
        """Per second between the last two samples that both have the value."""
        if len(self.samples) < 2:
            return 0.0
        a, b = self.samples[-2], self.samples[-1]
        va, vb = value(a), value(b)
        if va is None or vb is None or b.at <= a.at:
            return 0.0
        return max(0, vb - va) / (b.at - a.at)

    def series(self) -> dict[str, Any]:
        """Chart data: times, and per topic its rate in, per group its lag and rate out (None
        where a sample has no value)."""
        samples = list(self.samples)
        pairs = list(itertools.pairwise(samples))
        topics = sorted({t for s in samples for t in s.topics})
        groups = sorted({g for s in samples for g in s.lag})

        def rates(get: Callable[[Sample], int | None]) -> list[float | None]:
            out: list[float | None] = []
            for a, b in pairs:
                va, vb = get(a), get(b)
                if va is None or vb is None or b.at <= a.at:
                    out.append(None)
                else:
                    out.append(round(max(0, vb - va) / (b.at - a.at), 2))
            return out

        def topic_total(topic: str) -> Callable[[Sample], int | None]:
            return lambda s: s.topics.get(topic)

        def group_consumed(group: str) -> Callable[[Sample], int | None]:
            return lambda s: s.consumed.get(group)

        return {
            "times": [round(b.at, 3) for _, b in pairs],
            "in": {t: rates(topic_total(t)) for t in topics},
            "out": {g: rates(group_consumed(g)) for g in groups},
            "lag": {g: [b.lag.get(g) for _, b in pairs] for g in groups},
        }
