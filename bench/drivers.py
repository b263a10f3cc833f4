"""Client processes for `make bench` besides `bench.load`: each runs one measurement and prints
one JSON line (`msgs`, `seconds`, `msgs_per_s`, and latency fields where they apply).

    python -m rmqpy.bench.drivers nats-publish --port P [--size 1024] [--pending 256] [--duration 5]
    python -m rmqpy.bench.drivers redis-xrange --port P --key K --count N [--chunk 1000]
    python -m rmqpy.bench.drivers client-poll --namesrv H:P --topic T --count N [--pull 32]
    python -m rmqpy.bench.drivers redis-steady --port P --key K --rate R --duration S

nats-publish speaks NATS's text protocol on an asyncio `Protocol` (uvloop), the same way
`bench.load` speaks RocketMQ's: JetStream publishes with a reply inbox each, `--pending` of
them unacknowledged at most, bodies encoded once. redis-xrange reads a stream with redis-py
(`XRANGE key (last-id + COUNT chunk`), as a Python user would. client-poll drains a topic with
rmqpy's own `PullConsumer` from a fresh group. redis-steady is the steady flow of `make bench`
on Redis: XADD at `--rate` from one connection, each entry stamped with its send time, and a
reader process that keeps up with `XREAD BLOCK` (COUNT 32) from one more, as a consumer of a
stream does, and reports the time from send to receipt.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import subprocess
import sys
import time
from typing import Any

import uvloop

from rmqpy.bench.stats import Histogram
from rmqpy.config.logging_setup import configure_logging

STREAM = "BENCH"
SUBJECT = "bench.s"
INBOX = b"_INBOX.b."


class NatsPublisher(asyncio.Protocol):
    """A JetStream publisher: PUB with a reply inbox per message; the ack is a MSG to it."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.replies: dict[int, asyncio.Future[bytes]] = {}
        self.sent_at: dict[int, float] = {}
        self.samples: list[float] = []
        self.acked = 0
        self.errors = 0
        self.wake = asyncio.Event()
        self.ready = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        connect = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True}
        transport.write(  # type: ignore[attr-defined]
            b"CONNECT " + json.dumps(connect).encode() + b"\r\nSUB " + INBOX + b"* 1\r\nPING\r\n"
        )

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos = 0
        while (eol := buf.find(b"\r\n", pos)) >= 0:
            line = bytes(buf[pos:eol])
            if line.startswith(b"MSG "):
                parts = line.split()
                size = int(parts[-1])
                if len(buf) < eol + 2 + size + 2:
                    break
                payload = bytes(buf[eol + 2 : eol + 2 + size])
                self._reply(int(parts[1][len(INBOX) :]), payload)
                pos = eol + 2 + size + 2
                continue
            if line == b"PING":
                assert self.transport is not None
                self.transport.write(b"PONG\r\n")
            elif line == b"PONG" and not self.ready.done():
                self.ready.set_result(None)
            elif line.startswith(b"-ERR"):
                self.errors += 1
            pos = eol + 2
        del buf[:pos]

    def _reply(self, seq: int, payload: bytes) -> None:
        waiter = self.replies.pop(seq, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(payload)
            return
        start = self.sent_at.pop(seq, None)
        if start is None:
            return
        self.samples.append((time.perf_counter() - start) * 1000)
        if b'"error"' in payload:
            self.errors += 1
        else:
            self.acked += 1
        self.wake.set()

    async def request(self, subject: str, payload: bytes, seq: int) -> Any:
        waiter = asyncio.get_running_loop().create_future()
        self.replies[seq] = waiter
        assert self.transport is not None
        self.transport.write(
            b"PUB %s %s%d %d\r\n%s\r\n" % (subject.encode(), INBOX, seq, len(payload), payload)
        )
        return json.loads(await asyncio.wait_for(waiter, 10.0))


async def nats_publish(port: int, size: int, pending: int, duration_s: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(NatsPublisher, "127.0.0.1", port)
    await asyncio.wait_for(proto.ready, 10.0)
    config = {
        "name": STREAM, "subjects": [SUBJECT], "storage": "file", "retention": "limits",
        "discard": "old", "max_bytes": 2 * 1024**3, "num_replicas": 1,
    }  # fmt: skip
    created = await proto.request(f"$JS.API.STREAM.CREATE.{STREAM}", json.dumps(config).encode(), 0)
    if "error" in created and created["error"].get("err_code") != 10058:  # 10058: exists
        raise RuntimeError(f"JetStream refused the stream: {created['error']}")
    body = os.urandom(size // 2 + 1).hex().encode()[:size]
    head = b"PUB " + SUBJECT.encode() + b" " + INBOX
    tail = b" %d\r\n" % size + body + b"\r\n"
    assert proto.transport is not None
    transport = proto.transport
    seq = 1
    began = time.perf_counter()
    deadline = began + duration_s
    while (now := time.perf_counter()) < deadline:
        parts = []
        while len(proto.sent_at) < pending:
            proto.sent_at[seq] = now
            parts.append(head + b"%d" % seq + tail)
            seq += 1
        if parts:
            transport.writelines(parts)
        proto.wake.clear()
        try:
            await asyncio.wait_for(proto.wake.wait(), 1.0)
        except TimeoutError:
            continue
    seconds = time.perf_counter() - began
    transport.close()
    latency = Histogram.of(proto.samples)
    return {
        "msgs": proto.acked,
        "errors": proto.errors,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(proto.acked / seconds),
        **latency.summary(),
    }


def redis_xrange(port: int, key: str, count: int, chunk: int, hiredis: bool) -> dict[str, Any]:
    """redis-py's own RESP parser by default (what `pip install redis` gives), or hiredis."""
    import redis  # noqa: PLC0415 - only `make bench` installs redis-py
    from redis._parsers import _HiredisParser, _RESP2Parser  # noqa: PLC0415

    parser = _HiredisParser if hiredis else _RESP2Parser
    client = redis.Redis(connection_pool=redis.ConnectionPool(port=port, parser_class=parser))
    start, read = "-", 0
    began = time.perf_counter()
    while read < count:
        entries = client.xrange(key, min=start, max="+", count=min(chunk, count - read))
        if not entries:
            break
        read += len(entries)
        last = entries[-1][0]
        start = "(" + (last.decode() if isinstance(last, bytes) else str(last))
    seconds = time.perf_counter() - began
    client.close()
    return {"msgs": read, "seconds": round(seconds, 3), "msgs_per_s": round(read / seconds)}


def redis_steady(port: int, key: str, rate: float, duration: float, size: int) -> dict[str, Any]:
    import redis  # noqa: PLC0415 - only `make bench` installs redis-py

    client = redis.Redis(port=port)
    client.delete(key)
    client.xadd(key, {"f": b""})  # the reader starts after this one
    args = ["redis-steady-reader", "--port", str(port), "--key", key,
            "--duration", str(duration + 2.0)]  # fmt: skip
    reader = subprocess.Popen(
        [sys.executable, "-m", "rmqpy.bench.drivers", *args], stdout=subprocess.PIPE
    )
    time.sleep(0.5)
    body = b"x" * size
    sent = 0
    began = time.perf_counter()
    while (now := time.perf_counter()) - began < duration:
        due = began + sent / rate
        if now < due:
            time.sleep(due - now)
        fields: Any = {"t": time.time_ns(), "f": body}  # sent at, for the reader's latency
        client.xadd(key, fields)
        sent += 1
    seconds = time.perf_counter() - began
    out, _ = reader.communicate(timeout=60)
    client.close()
    read = json.loads(out.decode())
    return {"sent": sent, "msgs": read["msgs"], "seconds": round(seconds, 3),
            "msgs_per_s": round(sent / seconds), "p50_ms": read["p50_ms"],
            "p99_ms": read["p99_ms"]}  # fmt: skip


def redis_steady_reader(port: int, key: str, duration: float) -> dict[str, Any]:
    import redis  # noqa: PLC0415

    client = redis.Redis(port=port)
    newest: Any = client.xrevrange(key, count=1)
    last = newest[0][0]
    latencies: list[float] = []
    deadline = time.perf_counter() + duration
    while time.perf_counter() < deadline:
        got: Any = client.xread({key: last}, count=32, block=200)
        if got:
            entries = got[0][1]
            now = time.time_ns()
            latencies += [(now - int(fields[b"t"])) / 1e6 for _, fields in entries]
            last = entries[-1][0]
    client.close()
    sent_to_receipt = Histogram.of(latencies)
    return {"msgs": len(latencies), "p50_ms": round(sent_to_receipt.percentile(0.5), 3),
            "p99_ms": round(sent_to_receipt.percentile(0.99), 3)}  # fmt: skip


async def client_poll(namesrv: str, topic: str, count: int, pull: int) -> dict[str, Any]:
    configure_logging(logging.WARNING)
    from rmqpy.client.consumer import ConsumeFrom  # noqa: PLC0415 - keeps the other drivers light
    from rmqpy.client.pull_consumer import PullConsumer  # noqa: PLC0415

    group = f"bench-poll-{os.getpid()}-{time.time_ns()}"
    consumer = PullConsumer(
        group, namesrv, consume_from=ConsumeFrom.FIRST, pull_batch_size=pull, auto_commit=False
    )
    consumer.subscribe(topic)
    await consumer.start()
    read, first, began, last = 0, 0, 0.0, 0.0
    try:
        while read < count:
            got = await consumer.poll(2.0)
            if not got:
                break  # the topic holds fewer than `count`: the wait is not timed
            last = time.perf_counter()
            if not began:  # timed from the first arrival (start-up and rebalance excluded)
                began, first = last, len(got)
            read += len(got)
    finally:
        await consumer.close()
    seconds = last - began
    rate = round((read - first) / seconds) if seconds else 0
    return {"msgs": read, "seconds": round(seconds, 3), "msgs_per_s": rate}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmqpy.bench.drivers", description=__doc__)
    sub = parser.add_subparsers(dest="driver", required=True)
    nats = sub.add_parser("nats-publish")
    nats.add_argument("--port", type=int, required=True)
    nats.add_argument("--size", type=int, default=1024)
    nats.add_argument("--pending", type=int, default=256)
    nats.add_argument("--duration", type=float, default=5.0)
    stream = argparse.ArgumentParser(add_help=False)  # what the Redis drivers share
    stream.add_argument("--port", type=int, required=True)
    stream.add_argument("--key", required=True)
    xrange = sub.add_parser("redis-xrange", parents=[stream])
    xrange.add_argument("--count", type=int, required=True)
    xrange.add_argument("--chunk", type=int, default=1000)
    xrange.add_argument("--hiredis", action="store_true", help="parse replies with hiredis")
    poll = sub.add_parser("client-poll")
    poll.add_argument("--namesrv", required=True)
    poll.add_argument("--topic", required=True)
    poll.add_argument("--count", type=int, required=True)
    poll.add_argument("--pull", type=int, default=32)
    steady = sub.add_parser("redis-steady", parents=[stream])
    steady.add_argument("--rate", type=float, required=True)
    steady.add_argument("--duration", type=float, required=True)
    steady.add_argument("--size", type=int, default=1024)
    reader = sub.add_parser("redis-steady-reader", parents=[stream])
    reader.add_argument("--duration", type=float, required=True)
    args = parser.parse_args(argv)
    gc.freeze()  # as the load generator does: no full collection walks what the imports made
    if args.driver == "redis-steady":
        result = redis_steady(args.port, args.key, args.rate, args.duration, args.size)
    elif args.driver == "redis-steady-reader":
        result = redis_steady_reader(args.port, args.key, args.duration)
    elif args.driver == "nats-publish":
        result = uvloop.run(nats_publish(args.port, args.size, args.pending, args.duration))
    elif args.driver == "redis-xrange":
        result = redis_xrange(args.port, args.key, args.count, args.chunk, args.hiredis)
    else:
        result = uvloop.run(client_poll(args.namesrv, args.topic, args.count, args.pull))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
