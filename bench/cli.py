"""`rmqpy bench`: RocketMQ's benchmark tool for any broker that speaks the protocol.

    rmqpy bench producer --topic T [--size 1024] [--inflight 64] [--batch 32] [--keys]
                         [--duration 20] [--sync-flush] [--rate R] [--procs N]
    rmqpy bench consumer --topic T --group G [--pull 32] [--from first|last] [--max N]
    rmqpy bench e2e      --topic T [--group G] [producer options] [--rate R]
    (all take --duration S, --warmup S: the latencies of each second begun in the first S
    are left out)

The topic's route comes from the name server (`--namesrv` or RMQPY_NAMESRV); a producer
creates a missing topic (`--queues`, 8 by default). The load runs in `bench.load`
processes, `--procs` per broker, each an asyncio `Protocol` on uvloop sending pre-encoded
frames, so the generator is not what is measured. A live line on stderr every second (a
rich status line on a terminal), then a summary on stdout, or one JSON object with
`--json`.

`--sync-flush` sends WAIT=true, so every acknowledgement waits for the disk, and refuses a
broker that does not flush with SYNC_FLUSH; without it messages carry WAIT=false. e2e
stamps each body with the send time in microseconds, and its consumers report the time
from that stamp to receipt; they pull on past `--duration` (up to 3 s) while messages
still come, so what producers that started a little later sent is received too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import uvloop
from rich.console import Console
from rich.live import Live
from rich.text import Text

from rmqpy.bench.stats import Histogram
from rmqpy.client.admin import Admin
from rmqpy.client.errors import ClientError
from rmqpy.client.message import MessageQueue
from rmqpy.client.offset_store import RemoteOffsetStore
from rmqpy.remoting.codes import ResponseCode

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped
MB = 1024 * 1024
E2E_LINGER_S = 3.0  # how long e2e consumers may pull on past the end while messages come


@dataclass
class Role:
    """What the processes of one kind (producer or consumer) reported so far."""

    name: str
    procs: int = 0
    ticks: dict[int, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    finals: list[dict[str, Any]] = field(default_factory=list)

    def second(self, tick: int) -> dict[str, Any] | None:
        """The whole role's figures for second `tick`, once every process reported it."""
        lines = self.ticks.get(tick, [])
        if len(lines) < self.procs:
            return None
        return combine(lines, seconds=1.0)

    def total(self) -> dict[str, Any]:
        seconds = max((f["seconds"] for f in self.finals), default=0.0)
        out = combine(self.finals, seconds)
        out["procs"] = len(self.finals)
        return out


def combine(lines: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    msgs = sum(int(line["msgs"]) for line in lines)
    size = sum(int(line["bytes"]) for line in lines)
    latency = Histogram.merged(Histogram.from_json(line["latency"]) for line in lines)
    out: dict[str, Any] = {
        "msgs": msgs,
        "errors": sum(int(line["errors"]) for line in lines),
        "seconds": round(seconds, 3),
        "msgs_per_s": round(msgs / seconds) if seconds else 0,
        "mb_per_s": round(size / MB / seconds, 2) if seconds else 0.0,
        "rt": latency.summary(),
    }
    for paced in ("sent", "writes"):  # a paced producer's requests and the writes they took
        if lines and all(paced in line for line in lines):
            out[paced] = sum(int(line[paced]) for line in lines)
    e2e = [Histogram.from_json(line["e2e"]) for line in lines if "e2e" in line]
    if e2e:
        out["e2e"] = Histogram.merged(e2e).summary()
    return out


def describe(name: str, figures: dict[str, Any]) -> str:
    rt = figures["rt"]
    text = (
        f"{name:<8} {figures['msgs_per_s']:>9,} msgs/s {figures['mb_per_s']:>8.1f} MB/s  "
        f"RT avg {rt['avg_ms']:.2f} p50 {rt['p50_ms']:.2f} p99 {rt['p99_ms']:.2f} "
        f"max {rt['max_ms']:.2f} ms  errors {figures['errors']}"
    )
    if "e2e" in figures:
        e2e = figures["e2e"]
        text += f"  e2e p50 {e2e['p50_ms']:.2f} p99 {e2e['p99_ms']:.2f} max {e2e['max_ms']:.2f} ms"
    return text


# --- planning: which processes to start ----------------------------------------------------------
@dataclass(frozen=True)
class Proc:
    """One `bench.load` process: producer or consumer, the broker it loads, its arguments."""

    role: str
    broker: str
    args: list[str]


async def plan(args: argparse.Namespace) -> list[Proc]:
    """Every process to start, from the route and the group's offsets."""
    async with Admin(args.namesrv, timeout_s=args.timeout) as admin:
        producing = args.mode in ("producer", "e2e")
        consuming = args.mode in ("consumer", "e2e")
        try:
            route = await admin.route(args.topic)
        except ClientError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST or not producing:
                raise
            await admin.create_topic(args.topic, args.queues)
            print(f"created topic {args.topic} with {args.queues} queues", file=sys.stderr)
            route = await admin.route(args.topic)
        masters = route.masters()
        if args.sync_flush:
            for addr in masters.values():
                info = (await admin.runtime_info(addr))[addr]
                if info.get("flushDiskType") != "SYNC_FLUSH":
                    raise ClientError(
                        f"broker {addr} flushes with {info.get('flushDiskType', 'unknown')}; "
                        "--sync-flush needs a broker started with --flushDiskType SYNC_FLUSH"
                    )
        procs: list[Proc] = []
        if producing:
            for name, queues in _by_broker(route.write_queues()).items():
                common = ["--addr", masters[name], "--topic", args.topic,
                          "--warmup", str(args.warmup)]  # fmt: skip
                for _ in range(args.procs):
                    procs.append(Proc("producer", name, [*common, *_producer_args(args, queues)]))
        if consuming:
            offsets = await _start_offsets(admin, args)
            for name, queues in _by_broker(route.read_queues()).items():
                for share in _split(queues, args.procs):
                    spec = ",".join(f"{q.queue_id}:{offsets[q]}" for q in share)
                    procs.append(
                        Proc(
                            "consumer",
                            name,
                            [
                                "--addr", masters[name], "--topic", args.topic,
                                "--group", args.group, "--queues", spec,
                                "--pull", str(args.pull), "--max", str(args.max),
                                "--warmup", str(args.warmup),
                                # Producers may start a little later, so end later:
                                # what they send up to their end is received too.
                                *(["--stamp", "--linger", str(E2E_LINGER_S)]
                                  if args.mode == "e2e" else []),
                            ],
                        )
                    )  # fmt: skip
        if not procs:
            raise ClientError(f"topic {args.topic} has no queue on a live master")
        return procs


def _producer_args(args: argparse.Namespace, queues: list[MessageQueue]) -> list[str]:
    flags = [
        "--queues", ",".join(str(q.queue_id) for q in queues),
        "--size", str(args.size), "--inflight", str(args.inflight), "--batch", str(args.batch),
        "--rate", str(args.rate / args.procs if args.rate else 0),
    ]  # fmt: skip
    if args.keys:
        flags.append("--keys")
    if args.sync_flush:
        flags.append("--wait")
    if args.mode == "e2e":
        flags.append("--stamp")
    return flags


def _by_broker(queues: list[MessageQueue]) -> dict[str, list[MessageQueue]]:
    out: dict[str, list[MessageQueue]] = defaultdict(list)
    for q in queues:
        out[q.broker_name].append(q)
    return out


def _split(queues: list[MessageQueue], parts: int) -> list[list[MessageQueue]]:
    shares = [queues[i::parts] for i in range(parts)]
    return [s for s in shares if s]


async def _start_offsets(admin: Admin, args: argparse.Namespace) -> dict[MessageQueue, int]:
    """The group's committed offset per queue, else the first (or, `--from last`, the next)."""
    out = {}
    for row in await admin.consumer_offsets(args.group, args.topic):
        if row.committed is not None:
            out[row.queue] = max(row.committed, row.min_offset)
        else:
            out[row.queue] = row.min_offset if args.start == "first" else row.max_offset
    return out


async def commit(args: argparse.Namespace, finals: list[dict[str, Any]]) -> None:
    """Commit where every consumer process stopped (its final line, with its broker)."""
    async with Admin(args.namesrv, timeout_s=args.timeout) as admin:
        store = RemoteOffsetStore(admin.instance, args.group)
        queues = []
        for final in finals:
            for queue_id, offset in final["offsets"].items():
                mq = MessageQueue(args.topic, final["broker"], int(queue_id))
                store.update(mq, int(offset))
                queues.append(mq)
        await store.persist(queues)


# --- running -------------------------------------------------------------------------------------
async def run(args: argparse.Namespace) -> dict[str, Any]:
    procs = await plan(args)
    roles = {proc.role: Role(proc.role) for proc in procs}
    for proc in procs:
        roles[proc.role].procs += 1
    console = Console(stderr=True)

    async def one(proc: Proc) -> None:
        role = roles[proc.role]
        duration = ["--duration", str(args.duration)]
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rmqpy.bench.load", role.name, *proc.args, *duration,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert child.stdout is not None
        async for raw in child.stdout:
            line = json.loads(raw)
            if line.get("done"):
                role.finals.append({**line, "broker": proc.broker})
            else:
                role.ticks[int(line["tick"])].append(line)
                show(int(line["tick"]))
        if await child.wait() != 0:
            raise ClientError(f"a bench.load {role.name} process exited with {child.returncode}")

    shown: set[int] = set()
    live = Live(Text(""), console=console, transient=False, auto_refresh=False)

    def show(tick: int) -> None:
        seconds = [role.second(tick) for role in roles.values()]
        if tick in shown or any(s is None for s in seconds):
            return
        shown.add(tick)
        lines = [describe(name, s) for name, s in zip(roles, seconds, strict=True) if s is not None]
        text = f"[{tick:>3}s] " + "\n       ".join(lines)
        if console.is_terminal:
            live.update(Text(text), refresh=True)
        else:
            console.print(text, highlight=False, soft_wrap=True)

    with live if console.is_terminal else contextlib.nullcontext():
        await asyncio.gather(*(one(proc) for proc in procs))
    if "consumer" in roles:
        await commit(args, roles["consumer"].finals)
    return {
        "mode": args.mode,
        "topic": args.topic,
        "size": args.size,
        "inflight": args.inflight,
        "batch": args.batch,
        "sync_flush": args.sync_flush,
        **{name: role.total() for name, role in roles.items()},
    }


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="rmqpy bench", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = top.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--topic", default="BenchmarkTest")
    common.add_argument(
        "--namesrv", default=os.environ.get("RMQPY_NAMESRV", "127.0.0.1:9876"),
        help="name server(s), ';'-separated (env RMQPY_NAMESRV)",
    )  # fmt: skip
    common.add_argument("--duration", type=float, default=20.0, help="seconds (default 20)")
    common.add_argument("--warmup", type=float, default=0.0,
                        help="seconds at the start whose latencies the summary leaves out (each "
                        "reported second that begins in them)")  # fmt: skip
    common.add_argument("--procs", type=int, default=1, help="load processes per broker")
    common.add_argument("--timeout", type=float, default=5.0, help="admin calls, seconds")
    common.add_argument("--json", action="store_true", help="print the summary as JSON")
    common.add_argument("--access-key", help="ACL account to sign with (RMQPY_ACCESS_KEY)")
    common.add_argument("--secret-key", help="its secret key (RMQPY_SECRET_KEY)")
    send = argparse.ArgumentParser(add_help=False)
    send.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    send.add_argument("--inflight", type=int, default=64, help="requests outstanding per process")
    send.add_argument("--batch", type=int, default=1, help="messages per request")
    send.add_argument("--keys", action="store_true", help="a unique KEYS value per message")
    send.add_argument("--sync-flush", action="store_true", help="WAIT=true on a SYNC_FLUSH broker")
    send.add_argument("--rate", type=float, default=0.0, help="requests/s in all (0: no limit)")
    send.add_argument("--queues", type=int, default=8, help="queues of a topic created here")
    receive = argparse.ArgumentParser(add_help=False)
    receive.add_argument("--group", default="benchmark_consumer")
    receive.add_argument("--pull", type=int, default=32, help="messages per pull (default 32)")
    receive.add_argument("--max", type=int, default=0, help="stop a process after N messages")
    receive.add_argument("--from", dest="start", choices=["first", "last"], default="first",
                         help="where a group with no committed offset starts")  # fmt: skip
    sub.add_parser("producer", parents=[common, send], help="send as fast as the broker acks")
    consumer = sub.add_parser("consumer", parents=[common, receive], help="pull a topic fast")
    consumer.set_defaults(size=1024, inflight=64, batch=1, rate=0.0, sync_flush=False, keys=False)
    sub.add_parser("e2e", parents=[common, send, receive], help="produce and consume together")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.procs < 1 or args.duration <= 0 or args.batch < 1 or args.inflight < 1:
        print("rmqpy bench: --procs, --duration, --batch and --inflight must be positive",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    if bool(args.access_key) != bool(args.secret_key):
        print("rmqpy bench: --access-key and --secret-key go together", file=sys.stderr)
        return EXIT_USAGE
    if args.access_key:  # the load processes and the admin calls read the account from there
        os.environ.update(RMQPY_ACCESS_KEY=args.access_key, RMQPY_SECRET_KEY=args.secret_key)
    try:
        result = uvloop.run(run(args))
    except ClientError as exc:
        print(f"rmqpy bench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:  # Ctrl-C reaches the load processes too: they stop quietly
        print("rmqpy bench: interrupted before the summary", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.json:
        print(json.dumps(result))
    else:
        for role in ("producer", "consumer"):
            if role in result:
                print(describe(role, result[role]) + f"  ({result[role]['msgs']:,} msgs)")
    errors = sum(result[r]["errors"] for r in ("producer", "consumer") if r in result)
    return EXIT_FAILED if errors else EXIT_OK
