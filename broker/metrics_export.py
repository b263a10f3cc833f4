"""The broker's Prometheus metric families, named after RocketMQ 5's so existing dashboards
fit, built when Prometheus scrapes: counters and histograms from `broker.metrics`, gauges read
from the store and the managers at that moment.

RocketMQ 5 puts `cluster`, `node_type` and `node_id` on every series; so do we. Durations are
in seconds (RocketMQ 5 reports milliseconds; Prometheus' convention is seconds).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from rmqpy.broker.metrics import (
    REQUEST_NAMES,
    RESPONSE_NAMES,
    Histogram,
    QueueKey,
    Snapshot,
    code_name,
)
from rmqpy.config.logging_setup import DroppingPrintLogger
from rmqpy.store.expiry import disk_used_ratio

if TYPE_CHECKING:
    from rmqpy.broker.controller import BrokerController

NODE_LABELS = ("cluster", "node_type", "node_id")
IN_LABELS = (*NODE_LABELS, "topic", "message_type")
GROUP_LABELS = (*NODE_LABELS, "topic", "consumer_group")
RPC_LABELS = (*NODE_LABELS, "protocol_type", "request_code", "response_code", "is_long_polling")


class BrokerCollector(Collector):
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        cfg = broker.settings.broker
        self.node = (cfg.broker_cluster_name, "broker", cfg.broker_name)

    def collect(self) -> Iterator[Metric]:
        snap = self.broker.metrics.snapshot()
        yield from self._traffic(snap)
        yield from self._consumers(snap.pulled)
        yield from self._storage()
        yield from self._broker()

    # --- counted as requests are served ---------------------------------------------------------
    def _traffic(self, snap: Snapshot) -> Iterator[Metric]:
        """Messages and bytes in are the size histogram's count and sum."""
        node = self.node
        yield _counter(
            "rocketmq_messages_in_total",
            "Messages stored from producers.",
            IN_LABELS,
            {(*node, *k): h.count for k, h in snap.sizes.items()},
        )
        yield _counter(
            "rocketmq_throughput_in_total",
            "Message body bytes stored from producers.",
            IN_LABELS,
            {(*node, *k): h.total for k, h in snap.sizes.items()},
        )
        yield _histogram(
            "rocketmq_message_size",
            "Body size of each message stored, in bytes.",
            IN_LABELS,
            {(*node, *k): h for k, h in snap.sizes.items()},
        )
        yield _counter(
            "rocketmq_messages_out_total",
            "Messages handed to consumers by pulls.",
            GROUP_LABELS,
            {(*node, *k): v for k, v in snap.messages_out.items()},
        )
        yield _counter(
            "rocketmq_throughput_out_total",
            "Record bytes handed to consumers by pulls.",
            GROUP_LABELS,
            {(*node, *k): v for k, v in snap.bytes_out.items()},
        )
        yield _histogram(
            "rocketmq_rpc_latency",
            "Seconds from a request's arrival to its answer, per request and response code.",
            RPC_LABELS,
            {
                (
                    *node,
                    "remoting",
                    code_name(REQUEST_NAMES, request),
                    code_name(RESPONSE_NAMES, response),
                    "true" if held else "false",
                ): h
                for (request, response, held), h in snap.rpc.items()
            },
        )

    # --- consumer progress, computed now ----------------------------------------------------------
    def _consumers(self, pulled: dict[QueueKey, int]) -> Iterator[Metric]:
        broker = self.broker
        store = broker.store
        assert store is not None
        committed = broker.offsets.committed()
        queues: dict[tuple[str, str], set[int]] = {k: set(v) for k, v in committed.items()}
        for group, topic, queue_id in pulled:
            queues.setdefault((group, topic), set()).add(queue_id)
        now_ms = time.time() * 1000

        def age_s(topic: str, queue_id: int, offset: int) -> float:
            stamp = store.get_message_store_timestamp(topic, queue_id, offset)
            return max(now_ms - stamp, 0) / 1000 if stamp > 0 else 0.0

        lag, lag_latency, inflight, ready, queueing = {}, {}, {}, {}, {}
        for (group, topic), ids in sorted(queues.items()):
            if broker.topics.get(topic) is None:
                continue
            key = (*self.node, topic, group)
            totals = [0, 0, 0]
            oldest_unconsumed = oldest_unpulled = 0.0
            for queue_id in ids:
                top = store.get_max_offset_in_queue(topic, queue_id)
                done = committed.get((group, topic), {}).get(queue_id, -1)
                next_pull = pulled.get((group, topic, queue_id), -1)
                if next_pull < 0:
                    next_pull = done if done >= 0 else top
                if done < 0:
                    done = next_pull
                totals[0] += max(top - done, 0)
                totals[1] += max(next_pull - done, 0)
                totals[2] += max(top - next_pull, 0)
                if top > done:
                    oldest_unconsumed = max(oldest_unconsumed, age_s(topic, queue_id, done))
                if top > next_pull:
                    oldest_unpulled = max(oldest_unpulled, age_s(topic, queue_id, next_pull))
            lag[key], inflight[key], ready[key] = totals
            lag_latency[key], queueing[key] = oldest_unconsumed, oldest_unpulled
        yield _gauge(
            "rocketmq_consumer_lag_messages",
            "Messages stored but not yet committed by the group.",
            GROUP_LABELS,
            lag,
        )
        yield _gauge(
            "rocketmq_consumer_lag_latency",
            "Seconds the oldest uncommitted message has been stored.",
            GROUP_LABELS,
            lag_latency,
        )
        yield _gauge(
            "rocketmq_consumer_inflight_messages",
            "Messages pulled by the group but not yet committed.",
            GROUP_LABELS,
            inflight,
        )
        yield _gauge(
            "rocketmq_consumer_ready_messages",
            "Messages stored and not yet pulled by the group.",
            GROUP_LABELS,
            ready,
        )
        yield _gauge(
            "rocketmq_consumer_queueing_latency",
            "Seconds the oldest message not yet pulled by the group has been waiting.",
            GROUP_LABELS,
            queueing,
        )

    # --- the store --------------------------------------------------------------------------------
    def _storage(self) -> Iterator[Metric]:
        store = self.broker.store
        assert store is not None
        node = self.node
        earliest = store.earliest_store_timestamp()
        reserve_s = max(time.time() * 1000 - earliest, 0) / 1000 if earliest else 0.0
        values = [
            (
                "rocketmq_storage_size",
                "Bytes of the files under the store root.",
                store.size_on_disk(),
            ),
            (
                "rocketmq_storage_flush_behind_bytes",
                "Commitlog bytes written but not yet flushed to disk.",
                store.flush_behind_bytes(),
            ),
            (
                "rocketmq_storage_dispatch_behind_bytes",
                "Commitlog bytes not yet in consume queues and the index.",
                store.reput.behind_bytes(),
            ),
            (
                "rocketmq_storage_message_reserve_time",
                "Seconds since the oldest message still in the commitlog was stored.",
                reserve_s,
            ),
        ]
        values += [
            (
                "rmqpy_storage_disk_used_percent",
                "How full the store's file system is, as df's Use%.",
                disk_used_ratio(store.config.store_path_root_dir),
            ),
            (
                "rmqpy_storage_writable",
                "1 while the store takes puts; 0 while it refuses them (a disk past "
                "diskSpaceWarningLevelRatio, a write error, no file to write to).",
                0.0 if store.write_problems() else 1.0,
            ),
        ]
        for name, help_text, value in values:
            yield _gauge(name, help_text, NODE_LABELS, {node: value})
        yield _counter(
            "rmqpy_dispatch_records_skipped_total",
            "Records dispatch stepped over because their topic or properties did not decode "
            "(damage on disk; each is logged with its commitlog offset).",
            NODE_LABELS,
            {node: store.reput.records_skipped},
        )

    # --- the broker itself ------------------------------------------------------------------------
    def _broker(self) -> Iterator[Metric]:
        broker = self.broker
        node = self.node
        yield _gauge(
            "rocketmq_processor_watermark",
            "Requests queued for each processor's executor.",
            (*NODE_LABELS, "processor"),
            {(*node, x.name): x.queued for x in broker.executors},
        )
        yield _counter(
            "rocketmq_processor_rejected_total",
            "Requests refused SYSTEM_BUSY by each processor's executor.",
            (*NODE_LABELS, "processor"),
            {(*node, x.name): x.rejected for x in broker.executors},
        )
        yield _counter(
            "rmqpy_log_lines_dropped_total",
            "Log lines that could not be written (a full disk under the log, its reader gone).",
            NODE_LABELS,
            {node: DroppingPrintLogger.dropped},
        )
        yield _gauge(
            "rocketmq_connections",
            "Open remoting connections (broker and name-server ports).",
            NODE_LABELS,
            {node: sum(len(s.connections) for s in broker.servers)},
        )
        producers, consumers = broker.clients.group_sizes()
        yield _gauge(
            "rocketmq_producer_connections",
            "Producers heard from (heartbeats), per producer group.",
            (*NODE_LABELS, "producer_group"),
            {(*node, g): n for g, n in producers.items()},
        )
        yield _gauge(
            "rocketmq_consumer_connections",
            "Consumers heard from (heartbeats), per consumer group.",
            (*NODE_LABELS, "consumer_group"),
            {(*node, g): n for g, n in consumers.items()},
        )
        yield _gauge(
            "rocketmq_topic_number",
            "Topics on this broker.",
            NODE_LABELS,
            {node: len(broker.topics.snapshot())},
        )
        yield _gauge(
            "rocketmq_consumer_group_number",
            "Subscription groups on this broker.",
            NODE_LABELS,
            {node: broker.groups.count()},
        )
        yield _gauge(
            "rocketmq_broker_permission",
            "Broker permission bits: 4 read, 2 write.",
            NODE_LABELS,
            {node: broker.settings.broker.broker_permission},
        )


# Series by their label values (tuples of str, as long as `labels`).
Series = Mapping[Any, float]


def _counter(name: str, help_text: str, labels: tuple[str, ...], values: Series) -> Metric:
    family = CounterMetricFamily(name, help_text, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(key, value)
    return family


def _gauge(name: str, help_text: str, labels: tuple[str, ...], values: Series) -> Metric:
    family = GaugeMetricFamily(name, help_text, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(key, value)
    return family


def _histogram(
    name: str, help_text: str, labels: tuple[str, ...], values: Mapping[Any, Histogram]
) -> Metric:
    family = HistogramMetricFamily(name, help_text, labels=labels)
    for key, hist in sorted(values.items()):
        family.add_metric(key, hist.cumulative(), hist.total)
    return family


def broker_registry(broker: BrokerController) -> CollectorRegistry:
    """The broker's metrics and the process's (CPU, memory, file descriptors, GC)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
