"""`make bench`: rmqpy side by side with Redis Streams and NATS JetStream, in one command.

Every server runs on 127.0.0.1 with its data under one temporary directory on the same
disk: rmqpy twice (ASYNC_FLUSH and SYNC_FLUSH, metrics on as deployed) and twice more to
price the metrics (two fresh ASYNC_FLUSH brokers given the same load, one scraped every
second, one with `metricsPort=0`), once more for the CPU a steady flow costs it (its own
process, so nothing else it did is counted), redis-server twice (AOF `appendfsync
everysec` and `always`), nats-server with JetStream's file store, a Python echo server, and
the protocol floor (`bench.floor`) that the end-to-end and steady flows also run against.
The cases then run interleaved, every system of every case once per round (A B C A B C …),
1 KiB bodies, one client process at a time, and each figure is the median of the rounds
with its min–max. Ratios are taken between figures of the same rounds. The end-to-end
row keeps the server under test (rmqpy, or the floor) on one half of the CPUs and its
clients on the other, so that what it measures is the server's time and not the clients'
wait for a CPU the server holds.

    python -m rmqpy.bench.compare [--rounds 3] [--duration 5] [--out bench/results]

writes `latest.md` and `latest.json` there and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import mmap
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rmqpy.bench.processes import free_port, wait_for_port
from rmqpy.store.fileio import preallocate, warm_page_cache
from rmqpy.store.message import Message

ROOT = Path(__file__).resolve().parent
BODY = 1024
BODY_TEXT = "x" * BODY
ASYNC_TOPIC = "BenchAsync"
SYNC_TOPIC = "BenchSync"
STREAM_KEY = "bench:s"
CONSUME_COUNT = 200_000
E2E_TOPIC = "BenchE2E"
# The steady flow whose broker CPU is priced: 5,000 msg/s of 1 KiB with keys, consumed as
# it comes (a consumer that keeps up makes about one pull per message).
STEADY_TOPIC = "BenchSteady"
STEADY_RATE = 5_000
STEADY_KEY = "bench:steady"
QUEUES = ",".join(str(q) for q in range(8))
# The record a bench.load send becomes in the commitlog (with the CLUSTER the broker adds).
STORED_RECORD = Message(
    ASYNC_TOPIC,
    bytes(BODY),
    0,
    {"WAIT": "false", "UNIQ_KEY": "U" * 32, "CLUSTER": "DefaultCluster"},
).encoded_length(False)
Measure = Callable[[], dict[str, Any]]


# --- servers -------------------------------------------------------------------------------------
@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    extra: dict[str, Any] = field(default_factory=dict)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def spawn(name: str, args: list[str], port: int, log: Path) -> Server:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    wait_for_port(port, proc, timeout_s=60)
    return Server(name, port, proc)


def start_rmqpy(
    work: Path, flush: str, metrics: bool = True, label: str = "", tls: bool = False
) -> Server:
    port, ns, http = free_port(), free_port(), free_port() if metrics else 0
    name = f"rmqpy {flush}" + (f", {label}" if label else "")
    root = work / name.replace(" ", "-").replace(",", "")
    args = [
        sys.executable, "-m", "rmqpy.broker", "--storePathRootDir", str(root),
        "--listenPort", str(port), "--namesrvListenPort", str(ns), "--fastListenPort", "0",
        "--brokerIP1", "127.0.0.1", "--flushDiskType", flush, "--metricsPort", str(http),
        "--mappedFileSizeCommitLog", str(256 * 1024 * 1024),
    ]  # fmt: skip
    if tls:
        cert, key = self_signed_certificate(work)
        args += ["--tls.server.mode", "enforcing", "--tls.server.certPath", str(cert),
                 "--tls.server.keyPath", str(key)]  # fmt: skip
    server = spawn(name, args, port, root.with_suffix(".log"))
    wait_for_port(ns, server.proc)
    server.extra["namesrv"] = f"127.0.0.1:{ns}"
    server.extra["metrics_port"] = http
    return server


def self_signed_certificate(work: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1 (RSA 2048, what most deployments run)."""
    cert, key = work / "tls-cert.pem", work / "tls-key.pem"
    if not cert.exists():
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
             "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    return cert, key


def start_redis(work: Path, fsync: str) -> Server:
    port = free_port()
    data = work / f"redis-{fsync}"
    data.mkdir()
    args = [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
        "--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--daemonize", "no",
        "--protected-mode", "no",
    ]  # fmt: skip
    return spawn(f"redis {fsync}", args, port, work / f"redis-{fsync}.log")


def start_nats(work: Path) -> Server:
    port = free_port()
    args = ["nats-server", "-js", "-sd", str(work / "nats"), "-a", "127.0.0.1", "-p", str(port)]
    return spawn("nats", args, port, work / "nats.log")


def start_echo(work: Path) -> Server:
    port = free_port()
    args = [sys.executable, "-m", "rmqpy.bench.echo", "--port", str(port)]
    return spawn("echo", args, port, work / "echo.log")


def start_floor(work: Path) -> Server:
    """`bench.floor`, its own name server: `rmqpy bench` runs against it unchanged."""
    port = free_port()
    args = [sys.executable, "-m", "rmqpy.bench.floor", "--port", str(port)]
    server = spawn(FLOOR, args, port, work / "floor.log")
    server.extra["namesrv"] = f"127.0.0.1:{port}"
    return server


# --- clients -------------------------------------------------------------------------------------
def scraped(measure: Measure, port: int, every_s: float = 1.0) -> dict[str, Any]:
    """`measure()` while GET /metrics runs every `every_s` (Prometheus scrapes every 15 s by
    default: this is the worse case); the figures, with how many scrapes were taken."""
    done = threading.Event()
    scrapes = [0]

    def scrape() -> None:
        while not done.wait(every_s):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                r.read()
            scrapes[0] += 1

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    try:
        figures = measure()
    finally:
        done.set()
        thread.join()
    return {**figures, "scrapes": scrapes[0]}


def run_json(
    args: list[str], timeout_s: float = 300, cpus: set[int] | None = None
) -> dict[str, Any]:
    """The last JSON line the command prints; with `cpus`, it (and what it starts) runs on
    those CPUs only."""
    pin = None if cpus is None else partial(os.sched_setaffinity, 0, cpus)
    out = subprocess.run(args, capture_output=True, timeout=timeout_s, check=False, preexec_fn=pin)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} … failed: {out.stderr.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    result.pop("latency", None)
    return result


def rmqpy_load(server: Server, duration: float, *args: str) -> dict[str, Any]:
    return run_json(
        [sys.executable, "-m", "rmqpy.bench.load", *args, "--addr", f"127.0.0.1:{server.port}",
         "--duration", str(duration)]
    )  # fmt: skip


def rmqpy_bench_args(server: Server, *args: str) -> list[str]:
    """An `rmqpy bench ... --json` command line against `server`, through its name server."""
    return [sys.executable, "-m", "rmqpy.cli", "bench", *args,
            "--namesrv", server.extra["namesrv"], "--json"]  # fmt: skip


def e2e_figures(out: dict[str, Any]) -> dict[str, Any]:
    """An `rmqpy bench e2e` summary as a row: what was received, and send-to-receipt times."""
    consumer = out["consumer"]
    return {
        "msgs_per_s": consumer["msgs_per_s"],
        "sent_per_s": out["producer"]["msgs_per_s"],
        "p50_ms": consumer["e2e"]["p50_ms"],
        "p99_ms": consumer["e2e"]["p99_ms"],
        "errors": out["producer"]["errors"] + consumer["errors"],
    }


def split_cpus() -> tuple[set[int], set[int]] | None:
    """The CPUs a server under test and its clients each keep to in the end-to-end row: two
    halves of this process's (None on one CPU). Sharing two, the clients waited in the run
    queue behind the broker's loop (scheduler traces: about 1 s of every 2 s, while a CPU
    was idle 0.4 of the time), and that wait was most of the tail measured as the broker's."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    half = len(cpus) // 2
    return set(cpus[:half]), set(cpus[half:])


def set_affinity(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` (threads it starts later inherit their starter's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cli(server: Server, *command: str) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(server.port), *command], capture_output=True, check=True
    )
    return out.stdout.decode().strip()


class RedisBenchmark:
    """redis-benchmark has no duration: `-n` is sized from the previous rate of the same
    configuration so a run takes about `duration` seconds."""

    def __init__(self) -> None:
        self.rates: dict[str, float] = {}

    def run(
        self, server: Server, duration: float, clients: int, pipeline: int, *command: str
    ) -> dict[str, Any]:
        key = f"{server.name} {clients} {pipeline} {command[0]}"
        if key not in self.rates:  # a short calibration run
            self.rates[key] = self._once(server, 2_000 * pipeline, clients, pipeline, command)[
                "requests_per_s"
            ]
        requests = max(clients * pipeline * 10, int(self.rates[key] * duration))
        result = self._once(server, requests, clients, pipeline, command)
        self.rates[key] = result["requests_per_s"]
        return result

    def _once(
        self, server: Server, n: int, clients: int, pipeline: int, command: tuple[str, ...]
    ) -> dict[str, Any]:
        args = ["redis-benchmark", "-p", str(server.port), "-c", str(clients),
                "-P", str(pipeline), "-n", str(n), "--csv", *command]  # fmt: skip
        began = time.perf_counter()
        out = subprocess.run(args, capture_output=True, check=True, timeout=600)
        seconds = time.perf_counter() - began
        rows = list(csv.DictReader(io.StringIO(out.stdout.decode())))
        row = rows[-1]
        rate = float(row["rps"])
        return {
            "requests": n,
            "seconds": round(seconds, 3),
            "requests_per_s": rate,
            "msgs_per_s": round(rate),
            "p50_ms": float(row["p50_latency_ms"]),
            "p99_ms": float(row["p99_latency_ms"]),
            "max_ms": float(row["max_latency_ms"]),
        }


# --- physical probes -----------------------------------------------------------------------------
def fdatasync_probe(work: Path, duration: float, group: int = 64) -> dict[str, Any]:
    """What the disk gives a group commit: `group` × 1 KiB written, then fdatasync, again."""
    path = work / "fdatasync.probe"
    chunk = os.urandom(BODY) * group
    latencies = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        began = time.perf_counter()
        while time.perf_counter() - began < duration:
            start = time.perf_counter()
            os.write(fd, chunk)
            os.fdatasync(fd)
            latencies.append((time.perf_counter() - start) * 1000)
        seconds = time.perf_counter() - began
    finally:
        os.close(fd)
        path.unlink()
    latencies.sort()
    return {
        "groups": len(latencies),
        "msgs_per_s": round(len(latencies) * group / seconds),
        "p50_ms": round(latencies[len(latencies) // 2], 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)], 3),
    }


def direct_write_bandwidth(work: Path, duration: float, block: int = 1 << 20) -> dict[str, Any]:
    """Sequential writes with O_DIRECT (the page cache bypassed), 1 MiB at a time."""
    path = work / "direct.probe"
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT requires
    buf.write(os.urandom(block))
    written = 0
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    except OSError as exc:
        return {"error": f"O_DIRECT: {exc}"}
    try:
        began = time.perf_counter()
        while time.perf_counter() - began < duration:
            written += os.write(fd, buf)
        os.fsync(fd)
        seconds = time.perf_counter() - began
    finally:
        os.close(fd)
        path.unlink()
    return {
        "mb_per_s": round(written / 1e6 / seconds),
        "msgs_per_s": round(written / BODY / seconds),
    }


def page_cache_bandwidth(
    work: Path, duration: float, file_size: int = 128 << 20, record: int = STORED_RECORD
) -> dict[str, Any]:
    """MB/s of new page-cache pages one core makes: preallocated files brought into the page
    cache as the store's warming thread does it (`fileio.warm_page_cache`), kept until the
    end, as a commitlog keeps them. Every byte a broker appends lands in such a page, so
    this bounds append rates where the kernel (or, in a VM, the host behind it) is slow to
    hand out fresh memory. `msgs_per_s`: records of `record` bytes."""
    paths: list[Path] = []
    made = 0
    try:
        began = time.perf_counter()
        while time.perf_counter() - began < duration:
            paths.append(work / f"page-cache.probe.{len(paths)}")
            fd = os.open(paths[-1], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                preallocate(fd, file_size)
                for at in range(0, file_size, 8 << 20):
                    warm_page_cache(fd, at, 8 << 20)
                    made += 8 << 20
                    if time.perf_counter() - began >= duration:
                        break
            finally:
                os.close(fd)
        seconds = time.perf_counter() - began
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
    return {"mb_per_s": round(made / 1e6 / seconds), "msgs_per_s": round(made / record / seconds)}


def loopback_bandwidth(duration: float, block: int = 1 << 20) -> dict[str, Any]:
    """One TCP stream over 127.0.0.1, a reader thread draining it."""
    listener = socket.create_server(("127.0.0.1", 0))
    received = [0]

    def drain() -> None:
        conn, _ = listener.accept()
        with conn:
            while data := conn.recv(block):
                received[0] += len(data)

    reader = threading.Thread(target=drain)
    reader.start()
    payload = os.urandom(block)
    with socket.create_connection(listener.getsockname()) as sender:
        began = time.perf_counter()
        while time.perf_counter() - began < duration:
            sender.sendall(payload)
    reader.join()
    seconds = time.perf_counter() - began
    listener.close()
    return {"mb_per_s": round(received[0] / 1e6 / seconds)}


# --- the cases -----------------------------------------------------------------------------------
@dataclass
class Bench:
    work: Path
    duration: float
    servers: dict[str, Server]
    redis: RedisBenchmark = field(default_factory=RedisBenchmark)
    # The figures of the round under way, for cases sized from an earlier one.
    this_round: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    round_number: int = 0
    _written: set[str] = field(default_factory=set)  # consume topics filled so far

    def xadd(self, server: str, clients: int, pipeline: int) -> dict[str, Any]:
        redis = self.servers[server]
        redis_cli(redis, "DEL", STREAM_KEY)
        return self.redis.run(
            redis, self.duration, clients, pipeline, "XADD", STREAM_KEY, "*", "f", BODY_TEXT
        )

    def producer(
        self,
        server: str,
        topic: str,
        inflight: int,
        batch: int = 1,
        wait: bool = False,
        json_headers: bool = False,
        tls: bool = False,
    ) -> Measure:
        args = ["producer", "--topic", topic, "--queues", QUEUES, "--inflight", str(inflight)]
        args += ["--batch", str(batch), *(["--wait"] if wait else [])]
        args += ["--json"] if json_headers else []
        args += ["--tls"] if tls else []
        return partial(rmqpy_load, self.servers[server], self.duration, *args)

    def driver(self, *args: str) -> Measure:
        return partial(run_json, [sys.executable, "-m", "rmqpy.bench.drivers", *args])

    def cases(self) -> dict[str, dict[str, Measure]]:
        s, d = self.servers, self.duration
        echo = partial(rmqpy_load, s["echo"], d, "echo", "--inflight", "1", "--size", str(BODY))
        nats = self.driver("nats-publish", "--port", str(s["nats"].port), "--duration", str(d))
        return {
            "async publish, 1 msg/request, 64 in flight": {
                "rmqpy ASYNC_FLUSH": self.producer("rmqpy ASYNC_FLUSH", ASYNC_TOPIC, 64),
                "Redis XADD everysec -c 1 -P 64": partial(self.xadd, "redis everysec", 1, 64),
                "NATS JetStream, 256 pending": nats,
            },
            JSON_CASE: {
                "rmqpy ASYNC_FLUSH": self.producer(
                    "rmqpy ASYNC_FLUSH", ASYNC_TOPIC, 64, json_headers=True
                ),
            },
            "metrics cost, async publish, 64 in flight": {
                "metrics on, scraped every second": partial(
                    scraped,
                    self.producer("rmqpy ASYNC_FLUSH, metrics on", ASYNC_TOPIC, 64),
                    s["rmqpy ASYNC_FLUSH, metrics on"].extra["metrics_port"],
                ),
                "metrics off": self.producer("rmqpy ASYNC_FLUSH, metrics off", ASYNC_TOPIC, 64),
            },
            TLS_CASE: {
                "rmqpy ASYNC_FLUSH, TLS": self.producer(
                    "rmqpy ASYNC_FLUSH, TLS", ASYNC_TOPIC, 64, tls=True
                ),
            },
            "async publish, batches of 32": {
                "rmqpy ASYNC_FLUSH": self.producer("rmqpy ASYNC_FLUSH", ASYNC_TOPIC, 64, 32),
            },
            "sync publish, 64 in flight": {
                "rmqpy SYNC_FLUSH": self.producer("rmqpy SYNC_FLUSH", SYNC_TOPIC, 64, wait=True),
                "Redis XADD always -c 64 -P 1": partial(self.xadd, "redis always", 64, 1),
                "write+fdatasync, 64 × 1 KiB groups": partial(fdatasync_probe, self.work, d),
            },
            "latency, 1 in flight": {
                "rmqpy ASYNC_FLUSH": self.producer("rmqpy ASYNC_FLUSH", "BenchLatency", 1),
                "rmqpy SYNC_FLUSH": self.producer("rmqpy SYNC_FLUSH", "BenchLatency", 1, wait=True),
                "Redis XADD everysec -c 1 -P 1": partial(self.xadd, "redis everysec", 1, 1),
                "Redis XADD always -c 1 -P 1": partial(self.xadd, "redis always", 1, 1),
                "Python echo RTT": echo,
            },
            CONSUME_CASE: {
                "rmqpy Python client": self.client_poll,
                "rmqpy bench consumer": self.bench_consumer,
                "redis-py XRANGE COUNT 1000": partial(self.xrange, hiredis=False),
                HIREDIS: partial(self.xrange, hiredis=True),
                "redis-benchmark XRANGE COUNT 1000": self.xrange_benchmark,
            },
            E2E_CASE: {
                "rmqpy ASYNC_FLUSH": partial(self.e2e, "rmqpy ASYNC_FLUSH"),
                FLOOR: partial(self.e2e, FLOOR),
            },
            STEADY_CASE: {
                "rmqpy ASYNC_FLUSH, steady flow": partial(
                    self.steady_flow, "rmqpy ASYNC_FLUSH, steady flow"
                ),
                REDIS_STEADY: self.redis_steady_flow,
                FLOOR: partial(self.steady_flow, FLOOR),
            },
            "load generator ceiling": {
                "bench.load against the echo server, 64 in flight": partial(
                    rmqpy_load, s["echo"], d, "echo", "--inflight", "64", "--size", str(BODY)
                ),
            },
            "physical": {
                "O_DIRECT sequential write": partial(direct_write_bandwidth, self.work, 2.0),
                "loopback TCP, one stream": partial(loopback_bandwidth, 2.0),
                "new page-cache pages, one core": partial(page_cache_bandwidth, self.work, d),
            },
        }

    def xrange(self, hiredis: bool) -> dict[str, Any]:
        redis = self.servers["redis everysec"]
        count = min(CONSUME_COUNT, int(redis_cli(redis, "XLEN", STREAM_KEY)))
        return run_json(
            [sys.executable, "-m", "rmqpy.bench.drivers", "redis-xrange", "--port", str(redis.port),
             "--key", STREAM_KEY, "--count", str(count), *(["--hiredis"] if hiredis else [])]
        )  # fmt: skip

    def consume_topic(self) -> str:
        """A topic of this round, written just before its consumers read it from its first
        message: what they read is the newest in the store, as a consumer that keeps up reads
        (after three rounds of publishing, the async topic's oldest messages may have left
        the page cache, and a drain from its start would measure the disk)."""
        topic = f"BenchConsume{self.round_number}"
        if topic not in self._written:
            rmqpy_load(self.servers["rmqpy ASYNC_FLUSH"], 3.0, "producer", "--topic", topic,
                       "--queues", QUEUES, "--inflight", "64")  # fmt: skip
            self._written.add(topic)
        return topic

    def client_poll(self) -> dict[str, Any]:
        """rmqpy's `PullConsumer`: a new group drains the round's consume topic."""
        namesrv = self.servers["rmqpy ASYNC_FLUSH"].extra["namesrv"]
        return run_json([sys.executable, "-m", "rmqpy.bench.drivers", "client-poll", "--namesrv",
                         namesrv, "--topic", self.consume_topic(), "--count", str(CONSUME_COUNT),
                         "--pull", "32"])  # fmt: skip

    def bench_consumer(self) -> dict[str, Any]:
        """`rmqpy bench consumer`: a new group pulls the round's consume topic."""
        group = f"bench-consumer-{time.time_ns()}"
        args = ["consumer", "--topic", self.consume_topic(), "--group", group, "--from",
                "first", "--max", str(CONSUME_COUNT), "--duration", "120"]  # fmt: skip
        consumer = run_json(rmqpy_bench_args(self.servers["rmqpy ASYNC_FLUSH"], *args))["consumer"]
        return {key: consumer[key] for key in ("msgs", "seconds", "msgs_per_s", "errors")}

    def e2e(self, server: str) -> dict[str, Any]:
        """`rmqpy bench e2e` against `server` at half the rate this round's async publish
        reached, its first second (connections, the first pulls) left out of the latencies."""
        peak = self.this_round[ASYNC_CASE]["rmqpy ASYNC_FLUSH"]["msgs_per_s"]
        group = f"bench-e2e-{time.time_ns()}"
        args = ["e2e", "--topic", E2E_TOPIC, "--group", group, "--from", "last",
                "--rate", str(peak // 2), "--duration", str(self.duration + 1),
                "--warmup", "1"]  # fmt: skip
        command = rmqpy_bench_args(self.servers[server], *args)
        split = split_cpus()
        if split is None:
            return e2e_figures(run_json(command))
        pid, every = self.servers[server].proc.pid, os.sched_getaffinity(0)
        set_affinity(pid, split[0])
        try:
            return e2e_figures(run_json(command, cpus=split[1]))
        finally:
            set_affinity(pid, every)

    def steady_flow(self, name: str) -> dict[str, Any]:
        """`rmqpy bench e2e` sending STEADY_RATE msg/s with keys and consuming them as they
        come; the server's CPU as cores and as CPU seconds per million messages (each one
        produced and consumed)."""
        server = self.servers[name]
        args = ["e2e", "--topic", STEADY_TOPIC, "--group", f"bench-steady-{time.time_ns()}",
                "--from", "last", "--rate", str(STEADY_RATE), "--keys",
                "--duration", str(self.duration + 2.5), "--warmup", "1.5"]  # fmt: skip
        out, cpu = self.priced(server, rmqpy_bench_args(server, *args))
        return {**e2e_figures(out), **cpu}

    def redis_steady_flow(self) -> dict[str, Any]:
        """The same flow on Redis (XADD, and XREAD BLOCK keeping up): redis-server's CPU."""
        server = self.servers["redis everysec"]
        args = [sys.executable, "-m", "rmqpy.bench.drivers", "redis-steady",
                "--port", str(server.port), "--key", STEADY_KEY, "--rate", str(STEADY_RATE),
                "--duration", str(self.duration + 2.5)]  # fmt: skip
        out, cpu = self.priced(server, args)
        redis_cli(server, "DEL", STEADY_KEY)
        return {**out, **cpu}

    def priced(self, server: Server, args: list[str]) -> tuple[dict[str, Any], dict[str, float]]:
        """Run a steady-flow client that prints one JSON line; the server's CPU over
        `duration` seconds of it, after 1.5 s of start-up (connections, routes, the first
        pulls), as cores and as CPU seconds per million messages (each produced and
        consumed)."""
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1.5)
        cpu, began = cpu_seconds(server.proc.pid), time.perf_counter()
        time.sleep(self.duration)
        cores = (cpu_seconds(server.proc.pid) - cpu) / (time.perf_counter() - began)
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:6])} … failed: {err.decode()[-2000:]}")
        cpu_figures = {"cores": round(cores, 3),
                       "cpu_s_per_m_msgs": round(cores / STEADY_RATE * 1e6, 1)}  # fmt: skip
        return json.loads(out.decode().strip().splitlines()[-1]), cpu_figures

    def xrange_benchmark(self) -> dict[str, Any]:
        """Requests/s of one `XRANGE - + COUNT 1000` after another, × 1000 messages."""
        redis = self.servers["redis everysec"]
        result = self.redis.run(
            redis, self.duration, 1, 1, "XRANGE", STREAM_KEY, "-", "+", "COUNT", "1000"
        )
        result["msgs_per_s"] = round(result["requests_per_s"] * 1000)
        return result


# --- ratios and the report -----------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    what: str
    case: str
    ours: str
    peer_case: str
    peer: str | None  # None: `goal` bounds our own figure, in `unit`s
    field: str  # msgs_per_s (higher is better); p50_ms, p99_ms, cores (lower is better)
    goal: float | None  # None: a ceiling the machine sets, shown for what it explains
    unit: str = "×"

    @property
    def lower_is_better(self) -> bool:
        return self.field.endswith("_ms") or self.field == "cores"


ASYNC_CASE = "async publish, 1 msg/request, 64 in flight"
JSON_CASE = "async publish, JSON headers as Java clients send, 64 in flight"
TLS_CASE = "async publish over TLS (enforcing), 64 in flight"
REDIS_ASYNC = "Redis XADD everysec -c 1 -P 64"
CONSUME_CASE = "consume, pulls of 32"
HIREDIS = "redis-py + hiredis XRANGE COUNT 1000"
E2E_CASE = "end-to-end, at half the async publish rate"
STEADY_CASE = f"steady flow, {STEADY_RATE:,} msg/s with keys, consumed as it comes"
REDIS_STEADY = "Redis everysec, XADD and XREAD BLOCK"
# What the load generator, loopback TCP and the event loop give with a server that only
# hands messages on (`bench.floor`, compiled): the end-to-end and steady-flow rows' floor.
FLOOR = "protocol floor, a minimal server writing nothing to disk"
TARGETS = [
    Target("async publish vs Redis everysec", ASYNC_CASE, "rmqpy ASYNC_FLUSH", ASYNC_CASE,
           REDIS_ASYNC, "msgs_per_s", 1.0),
    Target("async publish vs NATS JetStream", ASYNC_CASE, "rmqpy ASYNC_FLUSH", ASYNC_CASE,
           "NATS JetStream, 256 pending", "msgs_per_s", 1.0),
    Target("JSON headers vs binary headers", JSON_CASE, "rmqpy ASYNC_FLUSH", ASYNC_CASE,
           "rmqpy ASYNC_FLUSH", "msgs_per_s", 0.9),
    Target("TLS vs plain TCP (what TLS costs; no goal)", TLS_CASE, "rmqpy ASYNC_FLUSH, TLS",
           ASYNC_CASE, "rmqpy ASYNC_FLUSH", "msgs_per_s", None),
    Target("batches of 32 vs Redis everysec (1 msg/request)", "async publish, batches of 32",
           "rmqpy ASYNC_FLUSH", ASYNC_CASE, REDIS_ASYNC, "msgs_per_s", 3.0),
    Target("sync publish vs Redis always", "sync publish, 64 in flight", "rmqpy SYNC_FLUSH",
           "sync publish, 64 in flight", "Redis XADD always -c 64 -P 1", "msgs_per_s", 1.5),
    Target("sync publish vs write+fdatasync probe", "sync publish, 64 in flight",
           "rmqpy SYNC_FLUSH", "sync publish, 64 in flight", "write+fdatasync, 64 × 1 KiB groups",
           "msgs_per_s", 0.5),
    Target("latency p50 ASYNC vs Redis everysec (at most)", "latency, 1 in flight",
           "rmqpy ASYNC_FLUSH", "latency, 1 in flight", "Redis XADD everysec -c 1 -P 1",
           "p50_ms", 1.2),
    Target("latency p50 SYNC vs Redis always (at most)", "latency, 1 in flight",
           "rmqpy SYNC_FLUSH", "latency, 1 in flight", "Redis XADD always -c 1 -P 1",
           "p50_ms", 1.0),
    Target("latency p99 vs echo RTT (at most)", "latency, 1 in flight", "rmqpy ASYNC_FLUSH",
           "latency, 1 in flight", "Python echo RTT", "p99_ms", 4.0),
    Target("consume vs redis-py + hiredis XRANGE", CONSUME_CASE, "rmqpy Python client",
           CONSUME_CASE, HIREDIS, "msgs_per_s", 1.0),
    Target("consume vs redis-py XRANGE, pure-Python parser (for reference)", CONSUME_CASE,
           "rmqpy Python client", CONSUME_CASE, "redis-py XRANGE COUNT 1000", "msgs_per_s", None),
    Target("rmqpy bench consumer vs redis-py + hiredis XRANGE", CONSUME_CASE,
           "rmqpy bench consumer", CONSUME_CASE, HIREDIS, "msgs_per_s", 1.5),
    Target("end-to-end p99, send to receipt, at half the async rate (at most)", E2E_CASE,
           "rmqpy ASYNC_FLUSH", E2E_CASE, None, "p99_ms", 2.0, " ms"),
    Target(f"broker CPU at {STEADY_RATE:,} msg/s produced and consumed (at most)", STEADY_CASE,
           "rmqpy ASYNC_FLUSH, steady flow", STEADY_CASE, None, "cores", 0.15, " cores"),
    Target("broker CPU at that flow vs Redis's at the same flow (at most)", STEADY_CASE,
           "rmqpy ASYNC_FLUSH, steady flow", STEADY_CASE, REDIS_STEADY, "cores", 1.0),
    Target("end-to-end p99 at that flow vs Redis's (at most)", STEADY_CASE,
           "rmqpy ASYNC_FLUSH, steady flow", STEADY_CASE, REDIS_STEADY, "p99_ms", 1.0),
    Target("end-to-end p99 at half the async rate vs the protocol floor's (no goal)", E2E_CASE,
           "rmqpy ASYNC_FLUSH", E2E_CASE, FLOOR, "p99_ms", None),
    Target("broker CPU at the steady flow vs the protocol floor's (no goal)", STEADY_CASE,
           "rmqpy ASYNC_FLUSH, steady flow", STEADY_CASE, FLOOR, "cores", None),
    Target("metrics on vs off (costs at most a few %)", "metrics cost, async publish, 64 in flight",
           "metrics on, scraped every second", "metrics cost, async publish, 64 in flight",
           "metrics off", "msgs_per_s", 0.95),
    # The load generator must not be the ceiling: against the echo server it must send at
    # least twice the async target (Redis everysec's rate).
    Target("load generator vs echo, against the async target", "load generator ceiling",
           "bench.load against the echo server, 64 in flight", ASYNC_CASE, REDIS_ASYNC,
           "msgs_per_s", 2.0),
    # Every appended byte lands in a new page-cache page; where the machine is slow to make
    # them (a VM whose host backs fresh memory lazily), that bounds batches, whatever the code.
    Target(f"batches of 32 vs new page-cache pages one core makes ({STORED_RECORD:,} B records)",
           "async publish, batches of 32", "rmqpy ASYNC_FLUSH", "physical",
           "new page-cache pages, one core", "msgs_per_s", None),
]  # fmt: skip


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(rounds: list[dict[str, dict[str, dict[str, Any]]]]) -> dict[str, Any]:
    """Per case and system: median/min/max of each figure; per target: the ratio in every
    round (ours ÷ peer, same round) and their median."""
    cases: dict[str, dict[str, dict[str, Any]]] = {}
    for case, systems in rounds[0].items():
        cases[case] = {}
        for system, first in systems.items():
            figures: dict[str, Any] = {}
            for key, value in first.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    figures[key] = spread([r[case][system][key] for r in rounds])
            cases[case][system] = figures
    targets = []
    for t in TARGETS:
        per_round = []
        for r in rounds:
            ours = r[t.case][t.ours].get(t.field)
            peer = 1.0 if t.peer is None else r[t.peer_case][t.peer].get(t.field)
            if ours is not None and peer:
                per_round.append(round(ours / peer, 3))
        ratio = statistics.median(per_round) if per_round else None
        met = (
            None
            if t.goal is None
            else ratio is not None and (ratio <= t.goal if t.lower_is_better else ratio >= t.goal)
        )
        targets.append(
            {"target": t.what, "goal": t.goal, "field": t.field, "ratio": ratio,
             "per_round": per_round, "met": met, "unit": t.unit,
             "lower_is_better": t.lower_is_better}
        )  # fmt: skip
    return {"cases": cases, "targets": targets}


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem_kib = int(line.split()[1])
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024**2, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis": _version(["redis-server", "--version"]),
        "nats": _version(["nats-server", "--version"]),
    }


def _version(args: list[str]) -> str:
    out = subprocess.run(args, capture_output=True, check=False)
    return out.stdout.decode().strip().splitlines()[0] if out.stdout else "unknown"


def _fmt(figure: dict[str, float] | None, unit: str = "") -> str:
    if not figure:
        return "–"
    med, lo, hi = figure["median"], figure["min"], figure["max"]
    if unit == "ms":
        return f"{med:.3f} ({lo:.3f}–{hi:.3f})"
    return f"{med:,.0f} ({lo:,.0f}–{hi:,.0f})"


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"# rmqpy vs Redis Streams vs NATS JetStream — {report['when']}",
        "",
        f"`{report['command']}` · {report['rounds']} interleaved rounds of "
        f"{report['duration_s']} s per run · 1 KiB bodies · one client process",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
        f"Python {m['python']}; {m['redis']}; {m['nats']}.",
        "",
        "## Targets (ratios of the same rounds; median, then each round)",
        "",
        "| target | goal | ratio | rounds | met |",
        "| --- | ---: | ---: | --- | :---: |",
    ]
    for t in report["targets"]:
        unit = t.get("unit", "×")
        goal = f"≤ {t['goal']}{unit}" if t.get("lower_is_better") else f"≥ {t['goal']}{unit}"
        goal = "–" if t["goal"] is None else goal
        ratio = "–" if t["ratio"] is None else f"{t['ratio']:.2f}{unit}"
        rounds = ", ".join(f"{r:.2f}" for r in t["per_round"])
        met = {None: "–", True: "yes", False: "no"}[t["met"]]
        lines.append(f"| {t['target']} | {goal} | {ratio} | {rounds} | {met} |")
    lines += [
        "",
        "## Every figure (median, min–max over the rounds)",
        "",
        "| case | system | msgs/s | p50 ms | p99 ms |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for case, systems in report["cases"].items():
        for system, figures in systems.items():
            if "mb_per_s" in figures:
                rate = f"{_fmt(figures['mb_per_s'])} MB/s"
            else:
                rate = _fmt(figures.get("msgs_per_s"))
            if "cores" in figures:
                c = figures["cores"]
                rate += f", server CPU {c['median']:.2f} ({c['min']:.2f}–{c['max']:.2f}) cores"
            lines.append(
                f"| {case} | {system} | {rate} | {_fmt(figures.get('p50_ms'), 'ms')} "
                f"| {_fmt(figures.get('p99_ms'), 'ms')} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmqpy.bench.compare", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    tools = ("redis-server", "redis-benchmark", "redis-cli", "nats-server", "openssl")
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        print(f"bench.compare: not installed: {', '.join(missing)} (make bench installs them)",
              file=sys.stderr)  # fmt: skip
        return 1
    work = Path(tempfile.mkdtemp(prefix="rmqpy-compare-"))
    servers: dict[str, Server] = {}
    began = time.time()
    try:
        for server in (
            start_rmqpy(work, "ASYNC_FLUSH"), start_rmqpy(work, "SYNC_FLUSH"),
            start_rmqpy(work, "ASYNC_FLUSH", label="metrics on"),
            start_rmqpy(work, "ASYNC_FLUSH", metrics=False, label="metrics off"),
            start_rmqpy(work, "ASYNC_FLUSH", label="steady flow"),
            start_rmqpy(work, "ASYNC_FLUSH", label="TLS", tls=True),
            start_redis(work, "everysec"), start_redis(work, "always"),
            start_nats(work), start_echo(work), start_floor(work),
        ):  # fmt: skip
            servers[server.name] = server
        bench = Bench(work, args.duration, servers)
        cases = bench.cases()
        rounds: list[dict[str, dict[str, dict[str, Any]]]] = []
        for n in range(1, args.rounds + 1):
            results: dict[str, dict[str, dict[str, Any]]] = {}
            bench.this_round, bench.round_number = results, n
            for case, systems in cases.items():
                results[case] = {}
                for system, measure in systems.items():
                    results[case][system] = figures = measure()
                    shown = {k: v for k, v in figures.items() if k in ("msgs_per_s", "mb_per_s",
                             "p50_ms", "p99_ms", "cores")}  # fmt: skip
                    print(f"round {n} · {case} · {system}: {shown}", file=sys.stderr, flush=True)
            rounds.append(results)
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(began)),
        "command": "make bench",
        "rounds": args.rounds,
        "duration_s": args.duration,
        "machine": machine(),
        **summarise(rounds),
        "raw_rounds": rounds,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (args.out / "latest.md").write_text(text)
    print(text)
    print(f"written to {args.out / 'latest.md'} and latest.json "
          f"in {time.time() - began:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
