"""The load generator for broker benchmarks: one process, uvloop, an asyncio `Protocol`,
requests encoded once and only their opaque patched per send, many requests per write.

Headers use RocketMQ's binary form (serialize type 1): the opaque sits at a fixed offset
in every frame (`BINARY_FIXED`), so matching a response to its send time costs two
`unpack_from`s, and the generator stays far cheaper per message than the broker.

    python -m bench.load producer --port P --topic T [--size 1024] [--inflight 64]
                                  [--batch 1] [--duration 10] [--rate 0]
    python -m bench.load consumer --port P --topic T --queues 8 [--pull 32] [--duration 10]

Each prints one JSON line: msgs, seconds, msgs_per_s, and latency p50/p99/max in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

import uvloop

from remoting.batch_body import BatchItem, encode_batch_body
from remoting.codes import RequestCode, ResponseCode, SerializeType
from remoting.command import RemotingCommand
from remoting.frame import encode_frame
from remoting.wire import BINARY_FIXED, FRAME_PREFIX

OPAQUE_AT = FRAME_PREFIX.size + 5  # code i16, language i8, version i16, then opaque
CODE_AT = FRAME_PREFIX.size
OPAQUE = struct.Struct(">i")
CODE = struct.Struct(">h")
assert BINARY_FIXED.size == 13


def request_frame(code: int, ext: dict[str, str], body: bytes = b"") -> bytearray:
    cmd = RemotingCommand(code, ext_fields=ext, body=body, serialize_type=SerializeType.ROCKETMQ)
    return bytearray(encode_frame(cmd))


class LoadProtocol(asyncio.Protocol):
    """Sends pre-encoded frames; calls `on_response(opaque, code, frame)` per response."""

    def __init__(self, on_response: Callable[[int, int, bytes], None]) -> None:
        self.on_response = on_response
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= 4:
            (length,) = OPAQUE.unpack_from(buf, pos)
            if end - pos - 4 < length:
                break
            (code,) = CODE.unpack_from(buf, pos + CODE_AT)
            (opaque,) = OPAQUE.unpack_from(buf, pos + OPAQUE_AT)
            self.on_response(opaque, code, bytes(buf[pos : pos + 4 + length]))
            pos += 4 + length
        del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


def percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return 0.0
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


async def run_requests(
    port: int,
    frames: list[bytearray],
    msgs_per_request: int,
    inflight: int,
    duration_s: float,
    rate: float,
) -> dict[str, Any]:
    """Keep `inflight` requests outstanding (or send at `rate` requests/s, at most
    `inflight` outstanding) for `duration_s`."""
    loop = asyncio.get_running_loop()
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    counts = {"msgs": 0, "errors": 0}
    next_opaque = 1
    wake = asyncio.Event()

    def on_response(opaque: int, code: int, frame: bytes) -> None:
        start = sent_at.pop(opaque, None)
        if start is None:
            return
        latencies.append((time.perf_counter() - start) * 1000)
        if code == ResponseCode.SUCCESS:
            counts["msgs"] += msgs_per_request
        else:
            counts["errors"] += 1
        wake.set()

    _, proto = await loop.create_connection(lambda: LoadProtocol(on_response), "127.0.0.1", port)
    assert proto.transport is not None
    transport = proto.transport
    began = time.perf_counter()
    deadline = began + duration_s
    interval = 1.0 / rate if rate else 0.0
    next_send = began
    i = 0
    while (now := time.perf_counter()) < deadline:
        parts = []
        while len(sent_at) < inflight and (not rate or next_send <= now):
            frame = frames[i % len(frames)]
            i += 1
            OPAQUE.pack_into(frame, OPAQUE_AT, next_opaque)
            sent_at[next_opaque] = now
            next_opaque += 1
            parts.append(bytes(frame))
            next_send += interval
        if parts:
            transport.writelines(parts)
        wake.clear()
        if rate and len(sent_at) < inflight:
            await asyncio.sleep(max(0.0, next_send - time.perf_counter()))
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), 1.0)
    elapsed = time.perf_counter() - began
    transport.close()
    latencies.sort()
    return {
        "msgs": counts["msgs"],
        "errors": counts["errors"],
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(counts["msgs"] / elapsed),
        "p50_ms": round(percentile(latencies, 0.50), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "max_ms": round(latencies[-1], 3) if latencies else 0.0,
        "requests": len(latencies),
    }


def send_frames(topic: str, size: int, batch: int, queues: int) -> list[bytearray]:
    body = os.urandom(size // 2).hex().encode()[:size]
    frames = []
    for queue_id in range(queues):
        ext = {
            "a": "bench-producer",
            "b": topic,
            "c": "TBW102",
            "d": "4",
            "e": str(queue_id),
            "f": "0",
            "g": str(int(time.time() * 1000)),
            "h": "0",
            "i": "",
        }
        if batch > 1:
            ext["m"] = "true"
            items = [BatchItem(0, body, "") for _ in range(batch)]
            frames.append(
                request_frame(RequestCode.SEND_BATCH_MESSAGE, ext, encode_batch_body(items))
            )
        else:
            frames.append(request_frame(RequestCode.SEND_MESSAGE_V2, ext, body))
    return frames


async def consume(
    port: int, topic: str, queues: int, pull: int, duration_s: float
) -> dict[str, Any]:
    """Pull every queue from offset 0 onwards, `pull` messages a request, one long-polling
    request per queue in flight (as a push consumer does); counts the records in each body."""
    offsets = dict.fromkeys(range(queues), 0)
    loop = asyncio.get_running_loop()
    done: asyncio.Queue[tuple[int, int, bytes]] = asyncio.Queue()
    latencies: list[float] = []
    sent_at: dict[int, tuple[float, int]] = {}

    def on_response(opaque: int, code: int, frame: bytes) -> None:
        entry = sent_at.pop(opaque, None)
        if entry is not None:
            latencies.append((time.perf_counter() - entry[0]) * 1000)
            done.put_nowait((entry[1], code, frame))

    _, proto = await loop.create_connection(lambda: LoadProtocol(on_response), "127.0.0.1", port)
    assert proto.transport is not None
    opaque = 0
    msgs = 0

    def issue(queue_id: int) -> None:
        nonlocal opaque
        opaque += 1
        ext = {
            "consumerGroup": "bench-consumer",
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offsets[queue_id]),
            "maxMsgNums": str(pull),
            "sysFlag": "6",
            "commitOffset": "0",
            "suspendTimeoutMillis": "1000",
            "subscription": "*",
            "subVersion": "0",
        }
        frame = request_frame(RequestCode.PULL_MESSAGE, ext)
        OPAQUE.pack_into(frame, OPAQUE_AT, opaque)
        sent_at[opaque] = (time.perf_counter(), queue_id)
        assert proto.transport is not None
        proto.transport.write(bytes(frame))

    began = time.perf_counter()
    for queue_id in range(queues):
        issue(queue_id)
    while time.perf_counter() - began < duration_s:
        try:
            queue_id, code, frame = await asyncio.wait_for(done.get(), 2.0)
        except TimeoutError:
            break
        if code == ResponseCode.SUCCESS:
            header_len = OPAQUE.unpack_from(frame, 4)[0] & 0xFFFFFF
            body = frame[8 + header_len :]
            count, pos = 0, 0
            while pos < len(body):
                pos += OPAQUE.unpack_from(body, pos)[0]
                count += 1
            msgs += count
            offsets[queue_id] += count
        issue(queue_id)
    elapsed = time.perf_counter() - began
    proto.transport.close()
    latencies.sort()
    return {
        "msgs": msgs,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(msgs / elapsed),
        "p50_ms": round(percentile(latencies, 0.5), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load")
    parser.add_argument("mode", choices=["producer", "consumer"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--pull", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=0.0, help="requests/s; 0 = closed loop")
    args = parser.parse_args(argv)
    if args.mode == "producer":
        frames = send_frames(args.topic, args.size, args.batch, args.queues)
        result = uvloop.run(
            run_requests(args.port, frames, args.batch, args.inflight, args.duration, args.rate)
        )
    else:
        result = uvloop.run(consume(args.port, args.topic, args.queues, args.pull, args.duration))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
