"""What an operator sees: Prometheus scrapes /metrics on a running broker while messages are
sent and consumed, and /healthz turns 503 when the store cannot be written."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from rmqpy.bench.processes import free_port
from rmqpy.broker.health import HealthCheck
from rmqpy.client.admin import Admin
from rmqpy.client.consumer import ConsumeFrom
from rmqpy.client.errors import ClientError
from rmqpy.client.message import Message, MessageQueue
from rmqpy.client.producer import Producer
from rmqpy.client.pull_consumer import PullConsumer
from rmqpy.config.store_config import MessageStoreConfig
from rmqpy.store.message import Message as StoreMessage
from rmqpy.store.message_store import MessageStore
from tests.integration.daemon import SMALL_STORE_FLAGS, BrokerProcess
from tests.sdk.conftest import drain, topic

__all__ = ["topic"]  # the fixture: a topic name of each test's own

pytestmark = pytest.mark.slow

Samples = list[tuple[str, dict[str, str], float]]

# A root test process cannot make a directory unwritable to itself; the broker it starts
# can, once it runs without the capability to override file permissions (as the Docker
# image's non-root user does).
AS_NON_ROOT = (
    ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
)


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def scrape(port: int) -> Samples:
    status, body = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    ]


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples carrying these labels (0 when there is none)."""
    return sum(v for n, ls, v in samples if n == name and labels.items() <= ls.items())


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    store = tmp_path_factory.mktemp("metrics") / "store"
    process = BrokerProcess(store, extra={"metricsPort": str(free_port())}).start()
    yield process
    assert process.stop() == 0


@pytest.fixture
def metrics_port(broker: BrokerProcess) -> int:
    return int(broker.extra["metricsPort"])


@pytest.fixture
async def producer(broker: BrokerProcess) -> AsyncIterator[Producer]:
    async with Producer("metrics-producer", broker.namesrv) as p:
        yield p


async def test_sends_and_pulls_move_the_counters_and_histograms(
    broker: BrokerProcess, metrics_port: int, producer: Producer, topic: str
) -> None:
    group = f"group-of-{topic}"
    async with Admin(broker.namesrv) as admin:
        await admin.create_topic(topic, queues=1)
    mq = MessageQueue(topic, "broker-a", 0)
    before = scrape(metrics_port)

    small, large = b"s" * 100, b"L" * 3000  # under 4 KiB: not compressed by the producer
    for _ in range(5):
        await producer.send(Message(topic, small), queue=mq)
    for _ in range(2):
        await producer.send(Message(topic, large), queue=mq)
    await producer.send_batch([Message(topic, small) for _ in range(3)], queue=mq)
    sent_bytes = 8 * len(small) + 2 * len(large)

    after = scrape(metrics_port)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    mine = {"topic": topic, "message_type": "normal", "cluster": "DefaultCluster"}
    assert grew("rocketmq_messages_in_total", **mine) == 10
    assert grew("rocketmq_throughput_in_total", **mine) == sent_bytes
    assert grew("rocketmq_message_size_count", **mine) == 10
    assert grew("rocketmq_message_size_sum", **mine) == sent_bytes
    assert grew("rocketmq_message_size_bucket", le="1024.0", **mine) == 8
    assert grew("rocketmq_message_size_bucket", le="4096.0", **mine) == 10
    assert grew("rocketmq_message_size_bucket", le="+Inf", **mine) == 10
    sends = {"request_code": "send_message_v2", "response_code": "success"}
    assert grew("rocketmq_rpc_latency_count", **sends) == 7
    assert grew("rocketmq_rpc_latency_bucket", le="60.0", **sends) == 7
    assert 0 < grew("rocketmq_rpc_latency_sum", **sends) < 7 * 5
    batch = {"request_code": "send_batch_message", "response_code": "success"}
    assert grew("rocketmq_rpc_latency_count", **batch) == 1
    assert value(after, "rocketmq_topic_number") >= 1
    assert value(after, "rocketmq_connections") >= 1
    assert value(after, "rocketmq_processor_watermark", processor="send") == 0
    assert value(after, "rocketmq_storage_size") > 0
    assert value(after, "rocketmq_storage_message_reserve_time") > 0
    assert value(after, "process_resident_memory_bytes") > 0
    health = {n for n, _, _ in after}  # damage and a log that cannot be written are counted
    assert {"rmqpy_dispatch_records_skipped_total", "rmqpy_log_lines_dropped_total"} <= health
    assert value(after, "rmqpy_dispatch_records_skipped_total") == 0
    assert value(after, "rmqpy_storage_writable") == 1
    assert 0 < value(after, "rmqpy_storage_disk_used_percent") <= 100

    # A consumer takes all ten and commits them.
    consumer = PullConsumer(group, broker.namesrv, consume_from=ConsumeFrom.FIRST)
    consumer.assign([mq])
    async with consumer:
        assert len(await drain(consumer, 10)) == 10
        await consumer.commit()
    consumed = scrape(metrics_port)
    ours = {"topic": topic, "consumer_group": group}
    assert value(consumed, "rocketmq_messages_out_total", **ours) == 10
    assert value(consumed, "rocketmq_throughput_out_total", **ours) > sent_bytes  # whole records
    assert value(consumed, "rocketmq_consumer_lag_messages", **ours) == 0

    # Three more arrive while nobody consumes: lag, and how long they have waited.
    for _ in range(3):
        await producer.send(Message(topic, small), queue=mq)
    time.sleep(0.05)
    waiting = scrape(metrics_port)
    assert value(waiting, "rocketmq_consumer_lag_messages", **ours) == 3
    assert value(waiting, "rocketmq_consumer_ready_messages", **ours) == 3
    assert value(waiting, "rocketmq_consumer_inflight_messages", **ours) == 0
    assert value(waiting, "rocketmq_consumer_queueing_latency", **ours) >= 0.05
    assert value(waiting, "rocketmq_consumer_lag_latency", **ours) >= 0.05

    # Pulled but not committed: in flight.
    again = PullConsumer(group, broker.namesrv, auto_commit=False)
    again.assign([mq])
    async with again:
        assert len(await drain(again, 3)) == 3
        pulled = scrape(metrics_port)
        assert value(pulled, "rocketmq_consumer_inflight_messages", **ours) == 3
        assert value(pulled, "rocketmq_consumer_ready_messages", **ours) == 0
        assert value(pulled, "rocketmq_consumer_lag_messages", **ours) == 3
        await again.commit()
    done = scrape(metrics_port)
    assert value(done, "rocketmq_consumer_lag_messages", **ours) == 0
    assert value(done, "rocketmq_consumer_inflight_messages", **ours) == 0
    assert value(done, "rocketmq_messages_out_total", **ours) == 13


async def test_a_deleted_topics_series_end(
    broker: BrokerProcess, metrics_port: int, producer: Producer, topic: str
) -> None:
    async with Admin(broker.namesrv) as admin:
        await admin.create_topic(topic, queues=1)
        mq = MessageQueue(topic, "broker-a", 0)
        await producer.send(Message(topic, b"x"), queue=mq)
        group = f"group-of-{topic}"
        consumer = PullConsumer(group, broker.namesrv, consume_from=ConsumeFrom.FIRST)
        consumer.assign([mq])
        async with consumer:
            assert len(await drain(consumer, 1)) == 1
        mine = {n for n, labels, _ in scrape(metrics_port) if labels.get("topic") == topic}
        assert {"rocketmq_messages_in_total", "rocketmq_messages_out_total"} <= mine
        await admin.delete_topic(topic)
    assert [s for s in scrape(metrics_port) if s[1].get("topic") == topic] == []


async def test_refused_requests_are_counted_by_response_code(
    broker: BrokerProcess, metrics_port: int, producer: Producer
) -> None:
    before = scrape(metrics_port)
    with pytest.raises(ClientError, match=r"NO_PERMISSION: Sending message to topic\[TBW102\]"):
        await producer.send(Message("TBW102", b"x"))
    after = scrape(metrics_port)
    refused = {"request_code": "send_message_v2", "response_code": "no_permission"}
    assert (
        value(after, "rocketmq_rpc_latency_count", **refused)
        - value(before, "rocketmq_rpc_latency_count", **refused)
        >= 1
    )
    assert value(after, "rocketmq_messages_in_total", topic="TBW102") == 0


def test_healthz_and_the_index_page(broker: BrokerProcess, metrics_port: int) -> None:
    status, body = get(f"http://127.0.0.1:{metrics_port}/healthz")
    assert status == 200
    assert json.loads(body) == {
        "status": "ok",
        "problems": [],
        "dispatchBehindBytes": 0,
        "flushBehindBytes": json.loads(body)["flushBehindBytes"],
    }
    assert get(f"http://127.0.0.1:{metrics_port}/")[0] == 200
    assert get(f"http://127.0.0.1:{metrics_port}/nope")[0] == 404


def test_healthz_is_503_while_the_store_is_read_only(tmp_path: Path) -> None:
    port = free_port()
    store = tmp_path / "store"
    broker = BrokerProcess(store, extra={"metricsPort": str(port)}, prefix=AS_NON_ROOT).start()
    try:
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        store.chmod(0o555)
        status, body = get(f"http://127.0.0.1:{port}/healthz")
        assert status == 503
        report = json.loads(body)
        assert report["status"] == "unhealthy"
        assert report["problems"] == [f"{store} is not writable"]
        health = subprocess.run(
            [sys.executable, "-m", "rmqpy.cli", "health"],
            env={**os.environ, "RMQPY_METRICS_PORT": str(port)},
            capture_output=True,
            timeout=30,
            check=False,
        )
        assert health.returncode == 1
        assert json.loads(health.stdout)["problems"] == report["problems"]
        store.chmod(0o755)
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    finally:
        store.chmod(0o755)
        assert broker.stop() == 0
    assert "health" in broker.log_text()


def test_a_busy_metrics_port_stops_startup(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = BrokerProcess(tmp_path / "store", extra={"metricsPort": str(port)})
        proc = subprocess.run(broker.command(), capture_output=True, timeout=30, check=False)
    assert proc.returncode == 1
    assert f"cannot listen on 0.0.0.0:{port} for metrics and health" in proc.stderr.decode()


def test_dispatch_that_stops_moving_is_reported_after_the_stall_time(tmp_path: Path) -> None:
    flags = {k: v for k, v in SMALL_STORE_FLAGS.items() if k.startswith(("mapped", "max"))}
    config = MessageStoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commitlog=int(flags["mappedFileSizeCommitLog"]),
        mapped_file_size_consume_queue=int(flags["mappedFileSizeConsumeQueue"]),
        max_hash_slot_num=int(flags["maxHashSlotNum"]),
        max_index_num=int(flags["maxIndexNum"]),
    )
    now = [100.0]
    with MessageStore(config) as store:
        check = HealthCheck(store, stall_s=30, clock=lambda: now[0])
        assert check()[0]
        store.reput.shutdown()  # dispatch stops, as a wedged dispatch thread would
        assert store.put_message(StoreMessage("Stalled", b"x")).ok
        healthy, report = check()
        assert healthy and report["dispatchBehindBytes"] > 0
        now[0] += 29
        assert check()[0]
        now[0] += 2
        healthy, report = check()
        assert not healthy
        assert report["problems"] == [
            f"dispatch is {report['dispatchBehindBytes']} bytes behind and has not moved for 31 s"
        ]
        store.reput.do_reput()
        assert check() == (
            True,
            {**report, "status": "ok", "problems": [], "dispatchBehindBytes": 0},
        )


DOCKER = Path(__file__).resolve().parents[2] / "docker"


async def test_the_grafana_dashboard_graphs_series_the_broker_exports(
    broker: BrokerProcess, metrics_port: int, producer: Producer, topic: str
) -> None:
    """Every metric a panel of docker/grafana's dashboard queries is one a broker with a
    producer and a consumer group serves, and the compose file provisions that dashboard
    with the compose Prometheus as its data source."""
    await producer.send(Message(topic, b"graphed"))
    consumer = PullConsumer("grafana-group", broker.namesrv, consume_from=ConsumeFrom.FIRST)
    consumer.subscribe(topic)
    async with consumer:
        assert await drain(consumer, 1) == [b"graphed"]
    served = {name for name, _labels, _value in scrape(metrics_port)}
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "rmqpy.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = {m for e in exprs for m in re.findall(r"\b(?:rocketmq|rmqpy)_[a-z_]+", e)}
    assert len(queried) >= 8
    assert queried <= served, sorted(queried - served)
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    grafana = compose["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    provisioning = DOCKER / mounts["/etc/grafana/provisioning"]
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    [source] = sources["datasources"]
    assert source["url"] == "http://prometheus:9090" and "prometheus" in compose["services"]
    providers = yaml.safe_load((provisioning / "dashboards" / "rmqpy.yml").read_text())
    path = providers["providers"][0]["options"]["path"]
    assert (DOCKER / mounts[path] / "rmqpy.json").is_file()
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert uids == {source["uid"]}
