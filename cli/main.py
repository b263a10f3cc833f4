"""`rmqpy`: run the broker or a name server, and operate them.

    rmqpy broker [-c broker.conf] [--key value ...]
    rmqpy config [--defaults | --markdown] [-c broker.conf] [--key value ...]
    rmqpy topic create|list|delete|route|status|consumers ...
    rmqpy cluster list | rmqpy cluster config [--broker ADDR]
    rmqpy group list|progress|members|producers|create|delete|reset ...
    rmqpy console [--port 8080] [--bind 127.0.0.1]
    rmqpy send TOPIC [BODY] [--file F]          (no BODY, no file: one message per stdin line)
    rmqpy consume TOPIC [--from first|last|timestamp] [--follow] [--json]
    rmqpy query key TOPIC KEY | rmqpy query id MSGID [--topic T] | query offset TOPIC QUEUE N
    rmqpy offsets GROUP TOPIC
    rmqpy store dump [commitlog|consumequeue|index] PATH
    rmqpy health [-c broker.conf] [--url http://127.0.0.1:5557/healthz]
    rmqpy bench producer|consumer|e2e --topic T ...      (rmqpy bench --help)

The name server comes from `--namesrv` or RMQPY_NAMESRV (default 127.0.0.1:9876). `--json`
prints JSON (lines) for scripts. Exit codes: 0 ok, 1 the operation failed, 2 usage error;
an error is one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import uvloop
from rich.progress import Progress

from rmqpy.cli.common import (
    Out,
    Parser,
    UsageError,
    admin_of,
    credentials_of,
    timestamp_ms,
    tls_of,
)
from rmqpy.cli.ops import (
    add_ops_commands,
    cmd_cluster,
    cmd_console,
    cmd_group,
    topic_consumers,
    topic_status,
)
from rmqpy.cli.store_dump import (
    DEFAULT_INDEX_SLOTS,
    DumpStopped,
    dump_commitlog,
    dump_consume_queue,
    dump_index,
)
from rmqpy.client.admin import Admin
from rmqpy.client.consumer import ConsumeFrom
from rmqpy.client.errors import ClientError
from rmqpy.client.message import Message, MessageQueue, ReceivedMessage
from rmqpy.client.producer import Producer, select_by_hash
from rmqpy.client.pull_consumer import PullConsumer
from rmqpy.config.broker_config import load_settings
from rmqpy.config.logging_setup import configure_logging
from rmqpy.config.properties import ConfigError
from rmqpy.config.store_config import DEFAULT_DELAY_LEVELS
from rmqpy.remoting.codes import TOOLS_CONSUMER_GROUP, ResponseCode

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped
DONE_SO_FAR = {"send": "messages sent", "consume": "messages printed", "query": "messages found",
               "console": ""}  # fmt: skip
DAEMONS = ("broker", "namesrv", "config")


DUMP_KINDS = ("commitlog", "consumequeue", "index")


DELAY_LEVELS = len(DEFAULT_DELAY_LEVELS.split())  # a broker's default messageDelayLevel


def parser() -> Parser:
    common = Parser(add_help=False)
    common.add_argument(
        "--namesrv",
        default=os.environ.get("RMQPY_NAMESRV", "127.0.0.1:9876"),
        help="name server host:port[;host:port] (RMQPY_NAMESRV, 127.0.0.1:9876)",
    )
    common.add_argument(
        "--access-key",
        default=os.environ.get("RMQPY_ACCESS_KEY"),
        help="ACL account to sign requests with (RMQPY_ACCESS_KEY), for a broker with aclEnable",
    )
    common.add_argument(
        "--secret-key",
        default=os.environ.get("RMQPY_SECRET_KEY"),
        help="its secret key (RMQPY_SECRET_KEY; the environment keeps it out of `ps`)",
    )
    common.add_argument(
        "--tls",
        action="store_true",
        default=os.environ.get("RMQPY_TLS", "").strip().lower() in ("1", "true", "yes"),
        help="connect over TLS (RMQPY_TLS=1), for a broker with tls.server.mode set",
    )
    common.add_argument(
        "--tls-ca",
        default=os.environ.get("RMQPY_TLS_CA_FILE"),
        help="authorities (PEM) the server's certificate is checked against (RMQPY_TLS_CA_FILE; "
        "default: the system's)",
    )
    common.add_argument("--json", action="store_true", help="JSON output for scripts")
    common.add_argument("--timeout", type=float, default=3.0, help="request timeout in seconds")
    common.add_argument(
        "--serialize",
        choices=["auto", "json", "msgpack", "binary"],
        default="auto",
        help="header encoding (auto: binary to rmqpy, JSON to other brokers)",
    )
    p = Parser(prog="rmqpy", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=f"rmqpy {package_version('rmqpy')}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    sub.add_parser("broker", help="run the broker (rmqpy broker --help)", add_help=False)
    sub.add_parser("namesrv", help="run a name server (rmqpy namesrv --help)", add_help=False)
    sub.add_parser(
        "config", help="print the settings as a broker.conf (rmqpy config --help)", add_help=False
    )
    sub.add_parser("bench", help="benchmark a broker (rmqpy bench --help)", add_help=False)

    topic = sub.add_parser("topic", help="create, list, delete topics; show a route")
    tsub = topic.add_subparsers(dest="action", required=True, parser_class=Parser)
    create = tsub.add_parser(
        "create", help="create or update a topic on every broker", parents=[common]
    )
    create.add_argument("topic")
    create.add_argument("--queues", type=int, default=8, help="read and write queues (8)")
    create.add_argument("--perm", type=int, default=6, help="permission bits (6 = read+write)")
    create.add_argument("--order", action="store_true", help="mark the topic ordered")
    create.add_argument(
        "--force",
        action="store_true",
        help="give an existing topic fewer queues, though consumers then miss the messages of "
        "the queues cut off",
    )
    tsub.add_parser("list", help="every topic with its queues", parents=[common])
    delete = tsub.add_parser("delete", help="delete a topic on every broker", parents=[common])
    delete.add_argument("topic")
    route = tsub.add_parser(
        "route", help="the topic's route from the name server", parents=[common]
    )
    route.add_argument("topic")
    status = tsub.add_parser(
        "status", help="per queue: offsets, messages, last stored", parents=[common]
    )
    status.add_argument("topic")
    consumers = tsub.add_parser("consumers", help="the groups consuming a topic", parents=[common])
    consumers.add_argument("topic")

    send = sub.add_parser("send", help="send messages", parents=[common])
    send.add_argument("topic")
    send.add_argument("body", nargs="?", help="the body (else --file, else stdin lines)")
    send.add_argument("--file", type=Path, help="send this file's bytes as one message")
    send.add_argument("--tags")
    send.add_argument("--keys", help="space-separated message keys")
    send.add_argument("--property", action="append", default=[], metavar="NAME=VALUE")
    send.add_argument("--sharding-key", help="send all to the queue this key hashes to")
    send.add_argument(
        "--delay-level", type=int, default=0, help="deliver after the broker's delay level N (1-18)"
    )
    send.add_argument("--group", default="rmqpy-cli", help="producer group (rmqpy-cli)")

    consume = sub.add_parser("consume", help="print a topic's messages", parents=[common])
    consume.add_argument("topic")
    consume.add_argument(
        "--group", help="consume as this group, committing (default: only read, as TOOLS_CONSUMER)"
    )
    consume.add_argument("--tags", default="*", help="subscription, e.g. 'TagA || TagB'")
    consume.add_argument(
        "--from", dest="start", choices=["first", "last", "timestamp"], default="first"
    )
    consume.add_argument("--timestamp", type=timestamp_ms, help="with --from timestamp")
    consume.add_argument("--follow", "-f", action="store_true", help="wait for new messages")
    consume.add_argument("--max", type=int, help="stop after this many messages")

    query = sub.add_parser("query", help="find messages by key or id")
    qsub = query.add_subparsers(dest="by", required=True, parser_class=Parser)
    qkey = qsub.add_parser("key", help="messages whose KEYS hold KEY", parents=[common])
    qkey.add_argument("topic")
    qkey.add_argument("key")
    qkey.add_argument("--max", type=int, default=32)
    qid = qsub.add_parser(
        "id", help="a message by msgId (with --topic) or offsetMsgId", parents=[common]
    )
    qid.add_argument("msg_id")
    qid.add_argument("--topic")
    qoffset = qsub.add_parser(
        "offset", help="messages of one queue from an offset on (printMsgByQueue)", parents=[common]
    )
    qoffset.add_argument("topic")
    qoffset.add_argument("queue", type=int, help="queue id")
    qoffset.add_argument("offset", type=int, help="queue offset")
    qoffset.add_argument("--broker", help="broker name (default: the topic's only broker)")
    qoffset.add_argument("--count", type=int, default=1, help="how many messages (1)")

    offsets = sub.add_parser(
        "offsets", help="per queue min/max/committed/lag of a group", parents=[common]
    )
    offsets.add_argument("group")
    offsets.add_argument("topic")

    health = sub.add_parser(
        "health",
        help="ask a broker's /healthz; exit 0 when healthy (the Docker HEALTHCHECK)",
        description="GET /healthz, print its JSON report, exit 0 on 200 and 1 otherwise.",
    )
    health.add_argument(
        "-c", "--config", type=Path, help="the broker's broker.conf, for its metricsPort"
    )
    health.add_argument(
        "--url", help="default: http://127.0.0.1:<metricsPort>/healthz (-c, RMQPY_*, 5557)"
    )
    health.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")

    store = sub.add_parser("store", help="offline tools for store files")
    ssub = store.add_subparsers(dest="action", required=True, parser_class=Parser)
    dump = ssub.add_parser(
        "dump",
        help="decode a commitlog, consume-queue or index file",
        description="Decode a store file, offline. Its kind is taken from where it lies in a "
        "store (commitlog/, consumequeue/TOPIC/QUEUE/, index/) unless named.",
    )
    dump.add_argument("kind", nargs="?", choices=DUMP_KINDS, help="default: from the path")
    dump.add_argument("path", type=Path)
    dump.add_argument("--json", action="store_true", help="JSON output for scripts")
    dump.add_argument("--no-crc", action="store_true", help="skip body CRC checks")
    dump.add_argument(
        "--slots", type=int, default=DEFAULT_INDEX_SLOTS, help="maxHashSlotNum of index files"
    )
    add_ops_commands(sub, common)
    return p


def message_text(msg: ReceivedMessage) -> str:
    return msg.body.decode("utf-8", "replace")


def message_detail(msg: ReceivedMessage) -> str:
    return (
        f"topic={msg.topic} queueId={msg.queue_id} queueOffset={msg.queue_offset} "
        f"msgId={msg.msg_id} offsetMsgId={msg.offset_msg_id} tags={msg.tags or ''} "
        f"keys={' '.join(msg.keys)} storeTimestamp={msg.store_timestamp} "
        f"body={message_text(msg)!r}"
    )


# --- commands ----------------------------------------------------------------------------------
async def cmd_topic(args: argparse.Namespace, out: Out) -> int:
    async with admin_of(args) as admin:
        if args.action == "create":
            had = (await admin.topics()).get(args.topic)
            queues = (
                min(int(had.get("readQueueNums", 0)), int(had.get("writeQueueNums", 0)))
                if had
                else 0
            )
            if args.queues < queues and not args.force:
                raise ClientError(
                    f"topic {args.topic} has {queues} queues: with {args.queues}, consumers would "
                    f"no longer read queues {args.queues}-{queues - 1} and the messages in them "
                    "(give --force to do it anyway)"
                )
            addrs = await admin.create_topic(args.topic, args.queues, args.perm, args.order)
            out.record(
                {"topic": args.topic, "queues": args.queues, "brokers": addrs},
                f"created {args.topic} with {args.queues} queues on {', '.join(addrs)}",
            )
        elif args.action == "delete":
            if args.topic not in await admin.topics():
                raise ClientError(f"topic {args.topic} does not exist")
            addrs = await admin.delete_topic(args.topic)
            out.record(
                {"topic": args.topic, "brokers": addrs},
                f"deleted {args.topic} on {', '.join(addrs)}",
            )
        elif args.action == "list":
            topics = await admin.topics()
            rows = [
                {
                    "topic": name,
                    "read": c.get("readQueueNums"),
                    "write": c.get("writeQueueNums"),
                    "perm": c.get("perm"),
                }
                for name, c in topics.items()
            ]
            out.table(rows, ["topic", "read", "write", "perm"])
        elif args.action == "status":
            await topic_status(args, out)
        elif args.action == "consumers":
            await topic_consumers(args, out)
        else:
            route = await admin.route(args.topic)
            rows = [
                {
                    "broker": q.broker_name,
                    "address": route.master(q.broker_name) or "",
                    "read": q.read_queue_nums,
                    "write": q.write_queue_nums,
                    "perm": q.perm,
                }
                for q in route.queue_datas
            ]
            out.table(rows, ["broker", "address", "read", "write", "perm"])
    return EXIT_OK


def stdin_lines() -> Iterator[bytes]:
    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\r\n")
        if line:
            yield line


async def cmd_send(args: argparse.Namespace, out: Out) -> int:
    props = {}
    for item in args.property:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise UsageError(f"rmqpy send: --property wants NAME=VALUE, got {item!r}")
        props[name] = value
    if args.body is not None and args.file is not None:
        raise UsageError("rmqpy send: give a body or --file, not both")
    if not 0 <= args.delay_level <= DELAY_LEVELS:
        raise UsageError(
            f"rmqpy send: --delay-level must be 1-{DELAY_LEVELS} (RocketMQ's levels: "
            f"{DEFAULT_DELAY_LEVELS}), not {args.delay_level}"
        )
    if args.file is not None:
        try:
            bodies: Iterator[bytes] = iter([args.file.read_bytes()])
        except OSError as exc:
            raise ClientError(f"cannot read {args.file}: {exc.strerror}") from exc
    elif args.body is not None:
        bodies = iter([args.body.encode("utf-8")])
    else:
        bodies = stdin_lines()
    selector = select_by_hash if args.sharding_key else None
    sent = 0
    async with Producer(
        args.group,
        args.namesrv,
        serialize=args.serialize,
        credentials=credentials_of(args),
        tls=tls_of(args),
        send_timeout_s=args.timeout,
    ) as producer:
        with Progress(transient=True, disable=args.json or not sys.stderr.isatty()) as progress:
            task = progress.add_task("sending", total=None)
            for body in bodies:
                msg = Message(
                    args.topic,
                    body,
                    args.tags,
                    args.keys,
                    dict(props),
                    delay_level=args.delay_level,
                )
                result = await producer.send(msg, selector=selector, arg=args.sharding_key)
                sent += 1
                progress.advance(task)
                out.record(
                    result.to_json(),
                    f"{result.status.value} msgId={result.msg_id} "
                    f"offsetMsgId={result.offset_msg_id} queue={result.queue.queue_id} "
                    f"queueOffset={result.queue_offset}",
                )
    if sent == 0:
        raise ClientError("nothing to send: no body, no --file and no lines on stdin")
    return EXIT_OK


async def cmd_consume(args: argparse.Namespace, out: Out) -> int:
    start = ConsumeFrom[args.start.upper()]
    if start is ConsumeFrom.TIMESTAMP and args.timestamp is None:
        raise UsageError("rmqpy consume: --from timestamp needs --timestamp")
    # Without --group this is a look, not a member's work: RocketMQ's tools group, offsets
    # left as they are (a group per run would leave a group, its offsets and its retry
    # topic behind on the broker every time).
    consumer = PullConsumer(
        args.group or TOOLS_CONSUMER_GROUP,
        args.namesrv,
        auto_commit=args.group is not None,
        consume_from=start,
        consume_timestamp_ms=args.timestamp,
        serialize=args.serialize,
        credentials=credentials_of(args),
        tls=tls_of(args),
        long_poll_ms=1000 if not args.follow else 5000,
    )
    queues = await topic_queues(consumer, args.topic, args.follow)
    consumer.assign(queues, args.tags)
    ends = {mq: await consumer.max_offset(mq) for mq in queues}
    await consumer.start()
    count = 0
    # SIGTERM (docker stop, systemd) ends it as Ctrl-C does: within a poll, offsets committed.
    stopped = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    try:
        while (args.max is None or count < args.max) and not stopped.is_set():
            for msg in await consumer.poll(timeout_s=1.0):
                out.record(msg.to_json(), message_text(msg))
                count += 1
                if args.max is not None and count >= args.max:
                    break
            if not args.follow and all(consumer.position(mq) >= end for mq, end in ends.items()):
                break
    finally:
        await consumer.close()
    return EXIT_OK


async def topic_queues(consumer: PullConsumer, topic: str, follow: bool) -> list[MessageQueue]:
    """The topic's queues. Following, a topic that does not exist yet is waited for (as
    `tail -F` waits for a file), with one line saying so; otherwise that is an error."""
    said = False
    while True:
        try:
            return await consumer.queues_of(topic)
        except ClientError as exc:
            if not follow or exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
        if not said:
            print(f"rmqpy consume: waiting for topic {topic} to be created", file=sys.stderr)
            said = True
        await asyncio.sleep(1.0)


async def cmd_query(args: argparse.Namespace, out: Out) -> int:
    async with admin_of(args) as admin:
        if args.by == "key":
            found = await admin.query_by_key(args.topic, args.key, args.max)
            if not found:
                raise ClientError(f"no message with key {args.key} in topic {args.topic}")
        elif args.by == "offset":
            found = await admin.browse(await queue_of(admin, args), args.offset, args.count)
            if not found:
                raise ClientError(f"no message at offset {args.offset} of queue {args.queue}")
        else:
            found = [await admin.query_by_id(args.msg_id, args.topic)]
        for msg in found:
            out.record(msg.to_json(), message_detail(msg))
    return EXIT_OK


async def queue_of(admin: Admin, args: argparse.Namespace) -> MessageQueue:
    """--broker's queue `args.queue` of `args.topic`, or the topic's only broker's."""
    brokers = sorted({q.broker_name for q in (await admin.route(args.topic)).queue_datas})
    if args.broker is None and len(brokers) > 1:
        raise UsageError(
            f"rmqpy query offset: {args.topic} is on {', '.join(brokers)}: give --broker"
        )
    return MessageQueue(args.topic, args.broker or brokers[0], args.queue)


async def cmd_offsets(args: argparse.Namespace, out: Out) -> int:
    async with admin_of(args) as admin:
        if args.group not in await admin.groups():
            raise ClientError(f"group {args.group} does not exist")
        rows = [r.to_json() for r in await admin.consumer_offsets(args.group, args.topic)]
    out.table(rows, ["brokerName", "queueId", "minOffset", "maxOffset", "committed", "lag"])
    return EXIT_OK


def dump_kind(path: Path) -> str:
    """What a file is, from where it lies in a store directory."""
    where = path.resolve().parts
    if len(where) >= 2 and where[-2] in ("commitlog", "index"):
        return where[-2]
    if len(where) >= 4 and where[-4] == "consumequeue":
        return "consumequeue"
    raise UsageError(
        f"rmqpy store dump: cannot tell what {path} is from its directory; "
        f"name its kind: rmqpy store dump {{{','.join(DUMP_KINDS)}}} PATH"
    )


def cmd_store(args: argparse.Namespace, out: Out) -> int:
    path: Path = args.path
    if not path.is_file():
        raise ClientError(f"no such file: {path}")
    kind = args.kind or dump_kind(path)
    rows: Iterator[dict[str, Any]]
    if kind == "commitlog":
        rows = dump_commitlog(path, check_crc=not args.no_crc)
    elif kind == "consumequeue":
        rows = dump_consume_queue(path)
    else:
        rows = dump_index(path, args.slots)
    count = 0
    try:
        for row in rows:
            count += 1
            out.record(row, " ".join(f"{k}={v}" for k, v in row.items() if k != "properties"))
    except DumpStopped as exc:
        print(f"rmqpy store dump: {path}: {exc} (after {count} entries)", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def health_url(conf: Path | None) -> str:
    """/healthz of the broker on this host, at the metricsPort that broker.conf and the
    RMQPY_* environment give it (as the broker itself reads them)."""
    try:
        settings, _ = load_settings(conf.read_text(encoding="utf-8") if conf else "")
    except OSError as exc:
        raise ClientError(f"cannot read {conf}: {exc.strerror}") from None
    except ConfigError as exc:
        raise ClientError(str(exc)) from None
    port = settings.broker.metrics_port
    if not port:
        raise ClientError("metrics are off (metricsPort=0): there is no /healthz to ask")
    return f"http://127.0.0.1:{port}/healthz"


def cmd_health(args: argparse.Namespace, out: Out) -> int:
    url = args.url or health_url(args.config)
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as response:
            out.line(response.read().decode("utf-8", "replace"))
            return EXIT_OK
    except urllib.error.HTTPError as exc:
        out.line(exc.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"rmqpy health: cannot reach {url}: {reason}", file=sys.stderr)
    return EXIT_FAILED


ASYNC_COMMANDS: dict[str, Callable[[argparse.Namespace, Out], Coroutine[Any, Any, int]]] = {
    "topic": cmd_topic,
    "send": cmd_send,
    "consume": cmd_consume,
    "query": cmd_query,
    "offsets": cmd_offsets,
    "cluster": cmd_cluster,
    "console": cmd_console,
    "group": cmd_group,
}


# The options every client command takes: before the command too (`rmqpy --namesrv H:P
# topic list`), as `git -C` and `kubectl --context` take theirs.
COMMON_VALUED = {"--namesrv", "--timeout", "--serialize", "--access-key", "--secret-key",
                 "--tls-ca"}  # fmt: skip
COMMON_FLAGS = {"--json", "--tls"}


def options_after_command(args: list[str]) -> list[str]:
    """`args` with the common options that come before the command moved after it."""
    front: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("--"):
        name = args[i].split("=", 1)[0]
        if name in COMMON_FLAGS or (name in COMMON_VALUED and "=" in args[i]):
            front.append(args[i])
            i += 1
        elif name in COMMON_VALUED and i + 1 < len(args):
            front += args[i : i + 2]
            i += 2
        else:
            break
    return args[i:] + front


def main(argv: Sequence[str] | None = None) -> int:
    args_list = options_after_command(list(sys.argv[1:] if argv is None else argv))
    if args_list and args_list[0] in DAEMONS:
        from rmqpy.broker.daemon import main as daemon_main  # noqa: PLC0415 - the daemon is heavy

        return daemon_main(args_list)
    if args_list and args_list[0] == "bench":
        from rmqpy.bench.cli import main as bench_main  # noqa: PLC0415 - only the bench needs it

        return bench_main(args_list[1:])
    try:
        args = parser().parse_args(args_list)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    configure_logging(logging.WARNING)
    out = Out(getattr(args, "json", False))
    try:
        if args.command == "store":
            return cmd_store(args, out)
        if args.command == "health":
            return cmd_health(args, out)
        return uvloop.run(ASYNC_COMMANDS[args.command](args, out))
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except ClientError as exc:
        print(f"rmqpy {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:  # Ctrl-C: what was done so far, and the shell's code for it
        what = DONE_SO_FAR.get(args.command, "results printed")
        done = f", {out.records:,} {what}" if what else ""
        print(f"rmqpy {args.command}: interrupted{done}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
