"""`rmqpy cluster`, `rmqpy group` and `rmqpy topic status|consumers`: what an operator asks of
a running cluster (mqadmin's clusterList, getBrokerConfig, topicStatus, consumerProgress,
consumerConnection, producerConnection, updateSubGroup, deleteSubGroup, resetOffsetByTime)."""

from __future__ import annotations

import argparse
import asyncio
import signal
from datetime import datetime
from typing import Any

from rmqpy.cli.common import Out, Parser, UsageError, admin_of, timestamp_ms
from rmqpy.client.admin import Admin
from rmqpy.client.errors import ClientError
from rmqpy.remoting.codes import ResponseCode


def human_time(ms: int) -> str:
    """A store time as local wall-clock time, "-" for none."""
    if ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit}"


def reset_target(text: str) -> int:
    """--to: a time (ms or ISO-8601), `end` (each queue's end: skip the backlog) or `begin`."""
    if text == "end":
        return -1
    if text == "begin":
        return 0
    return timestamp_ms(text)


def add_ops_commands(sub: Any, common: Parser) -> None:
    console = sub.add_parser(
        "console",
        help="a web console for the cluster (http://127.0.0.1:8080)",
        description="Serve a web console: cluster, topics, groups, messages, live charts. It "
        "reaches the cluster through --namesrv, signing with --access-key when given.",
        parents=[common],
    )
    console.add_argument("--port", type=int, default=8080, help="HTTP port (8080)")
    console.add_argument(
        "--bind",
        default="127.0.0.1",
        help="address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface, "
        "and then anyone who reaches the port may change topics and offsets)",
    )
    console.add_argument(
        "--interval", type=float, default=5.0, help="seconds between samples for the charts (5)"
    )
    cluster = sub.add_parser("cluster", help="brokers of every cluster, and their settings")
    csub = cluster.add_subparsers(dest="action", required=True, parser_class=Parser)
    csub.add_parser(
        "list", help="every broker with its address, version and uptime", parents=[common]
    )
    config = csub.add_parser("config", help="a broker's settings in effect", parents=[common])
    config.add_argument("--broker", help="the broker's address (default: every broker)")
    change = csub.add_parser(
        "set",
        help="change a setting of running brokers (brokerPermission)",
        description="Change settings of the running brokers (mqadmin updateBrokerConfig): "
        "brokerPermission=4 takes a broker out of producers' routes while consumers drain it, "
        "6 puts it back. Lasts until restart: broker.conf is not rewritten.",
        parents=[common],
    )
    change.add_argument("settings", nargs="+", metavar="KEY=VALUE")
    change.add_argument("--broker", help="the broker's address (default: every broker)")

    group = sub.add_parser("group", help="consumer groups: list, progress, members, reset, ...")
    gsub = group.add_subparsers(dest="action", required=True, parser_class=Parser)
    gsub.add_parser(
        "list", help="every group with its members online, lag and rate", parents=[common]
    )
    progress = gsub.add_parser(
        "progress", help="a group's offsets and lag per queue", parents=[common]
    )
    progress.add_argument("group")
    progress.add_argument("--topic", help="only this topic (default: every topic it consumes)")
    members = gsub.add_parser("members", help="the group's consumers online", parents=[common])
    members.add_argument("group")
    producers = gsub.add_parser(
        "producers", help="the producers of a producer group", parents=[common]
    )
    producers.add_argument("group")
    create = gsub.add_parser(
        "create", help="create or change a group on every broker", parents=[common]
    )
    create.add_argument("group")
    create.add_argument(
        "--retry-max-times", type=int, default=16, help="redeliveries before the DLQ (16)"
    )
    create.add_argument("--disable", action="store_true", help="refuse the group's pulls")
    create.add_argument("--no-broadcast", action="store_true", help="refuse broadcast consumption")
    delete = gsub.add_parser("delete", help="delete a group on every broker", parents=[common])
    delete.add_argument("group")
    delete.add_argument("--keep-offsets", action="store_true", help="keep its committed offsets")
    deliver = gsub.add_parser(
        "deliver",
        help="hand one message to one consumer of a group, and print how it went",
        description="The consumer runs its listener on the message (found by its "
        "offsetMsgId) and answers CR_SUCCESS, CR_LATER, CR_THROW_EXCEPTION, ...; nothing is "
        "committed or sent back (mqadmin consumeMessage).",
        parents=[common],
    )
    deliver.add_argument("group")
    deliver.add_argument("offset_msg_id", metavar="OFFSETMSGID")
    deliver.add_argument("--client", help="the consumer's client id (default: the first online)")
    resend = gsub.add_parser(
        "resend-dlq",
        help="give a group its dead-letter messages again",
        description="Copy messages of %%DLQ%%GROUP to the group's retry topic, so that group "
        "(and no other) consumes them again under their original topic; each copy keeps its "
        "msgId, as a retry does. Give msgIds, or --all.",
        parents=[common],
    )
    resend.add_argument("group")
    resend.add_argument("msg_ids", nargs="*", metavar="MSGID")
    resend.add_argument("--all", action="store_true", help="every message in the DLQ")
    reset = gsub.add_parser(
        "reset",
        help="move a group's offsets on a topic to a time",
        description="Move GROUP's offsets on TOPIC to the first message stored at or after "
        "--to, on every broker; consumers online drop what they pulled and go on from there.",
        parents=[common],
    )
    reset.add_argument("group")
    reset.add_argument("topic")
    reset.add_argument(
        "--to",
        type=reset_target,
        required=True,
        help="a time (ms since the epoch, or ISO-8601 local time), `begin` or `end`",
    )
    reset.add_argument(
        "--only-back", action="store_true", help="leave queues already behind that time as they are"
    )


async def topic_status(args: argparse.Namespace, out: Out) -> None:
    async with admin_of(args) as admin:
        rows = await admin.topic_status(args.topic)
    if out.as_json:
        out.table([r.to_json() for r in rows], [])
        return
    table = [
        {
            "broker": r.queue.broker_name,
            "queue": r.queue.queue_id,
            "min": r.min_offset,
            "max": r.max_offset,
            "messages": r.max_offset - r.min_offset,
            "last stored": human_time(r.last_update_ms),
        }
        for r in rows
    ]
    out.table(table, ["broker", "queue", "min", "max", "messages", "last stored"])


async def topic_consumers(args: argparse.Namespace, out: Out) -> None:
    async with admin_of(args) as admin:
        groups = await admin.consumed_by(args.topic)
    out.table([{"group": g} for g in groups], ["group"])


async def cmd_console(args: argparse.Namespace, out: Out) -> int:
    """Serve until Ctrl-C or SIGTERM."""
    from rmqpy.console.app import serve  # noqa: PLC0415 - only this command needs the web side

    async with admin_of(args) as admin:
        runner, sampling = await serve(admin, args.bind, args.port, args.interval)
        host = f"[{args.bind}]" if ":" in args.bind else args.bind
        out.line(f"console on http://{host}:{args.port}/ (cluster through {args.namesrv})")
        stopped = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
        try:
            await stopped.wait()
        finally:
            sampling.cancel()
            await runner.cleanup()
    return 0


async def cmd_cluster(args: argparse.Namespace, out: Out) -> int:
    async with admin_of(args) as admin:
        if args.action == "list":
            rows = []
            for cluster, brokers in (await admin.clusters()).items():
                for name, addrs in brokers.items():
                    for broker_id, addr in sorted(addrs.items()):
                        info = (await admin.runtime_info(addr))[addr]
                        rows.append(
                            {
                                "cluster": cluster,
                                "broker": name,
                                "id": broker_id,
                                "address": addr,
                                "version": info.get("brokerVersionDesc", ""),
                                "uptime": info.get("runtime", ""),
                                "connections": info.get("connections", ""),
                                "commitlog": human_size(int(info.get("commitLogMaxOffset", 0))),
                            }
                        )
            columns = ["cluster", "broker", "id", "address", "version", "uptime", "connections",
                       "commitlog"]  # fmt: skip
            out.table(rows, columns)
        elif args.action == "set":
            changes = dict(pair.partition("=")[::2] for pair in args.settings)
            if not all(changes) or any("=" not in pair for pair in args.settings):
                raise UsageError("rmqpy cluster set: give KEY=VALUE pairs")
            changed = await admin.update_broker_config(changes, args.broker)
            out.record({"brokers": changed, "settings": changes},
                       f"set {', '.join(args.settings)} on {', '.join(changed)}")  # fmt: skip
        else:
            configs = await admin.broker_config(args.broker)
            if out.as_json:
                out.table([{"broker": a, "settings": c} for a, c in configs.items()], [])
                return 0
            rows = [
                {"broker": addr, "key": key, "value": value}
                for addr, config in configs.items()
                for key, value in config.items()
            ]
            out.table(rows, ["broker", "key", "value"] if len(configs) > 1 else ["key", "value"])
    return 0


async def cmd_group(args: argparse.Namespace, out: Out) -> int:
    async with admin_of(args) as admin:
        if args.action == "list":
            await _group_list(admin, out)
        elif args.action == "progress":
            await _require_group(admin, args.group)
            await _group_progress(admin, args, out)
        elif args.action == "members":
            await _group_members(admin, args.group, out)
        elif args.action == "producers":
            found = await admin.producers(args.group)
            if not found:
                raise ClientError(f"no producer of group {args.group} is connected")
            out.table(found, ["clientId", "clientAddr", "language", "version"])
        elif args.action == "create":
            config = {
                "retryMaxTimes": args.retry_max_times,
                "consumeEnable": not args.disable,
                "consumeBroadcastEnable": not args.no_broadcast,
            }
            addrs = await admin.create_group(args.group, **config)
            out.record(
                {"group": args.group, "brokers": addrs, **config},
                f"group {args.group} set on {', '.join(addrs)}",
            )
        elif args.action == "delete":
            await _require_group(admin, args.group)
            addrs = await admin.delete_group(args.group, remove_offsets=not args.keep_offsets)
            out.record(
                {"group": args.group, "brokers": addrs},
                f"deleted {args.group} on {', '.join(addrs)}",
            )
        elif args.action == "deliver":
            result = await admin.consume_directly(args.group, args.offset_msg_id, args.client)
            out.record(result, f"{result.get('consumeResult')} in {result.get('spentTimeMills')} ms"
                       + (f": {result['remark']}" if result.get("remark") else ""))  # fmt: skip
            if result.get("consumeResult") != "CR_SUCCESS":
                raise ClientError(f"the consumer answered {result.get('consumeResult')}")
        elif args.action == "resend-dlq":
            await _group_resend(admin, args, out)
        else:
            await _group_reset(admin, args, out)
    return 0


async def _group_resend(admin: Admin, args: argparse.Namespace, out: Out) -> None:
    if bool(args.msg_ids) == args.all:
        raise UsageError("rmqpy group resend-dlq: give MSGIDs or --all (see --help)")
    dlq = f"%DLQ%{args.group}"
    if args.all:
        found = [
            m for q in await admin.topic_status(dlq)
            for m in await admin.browse(q.queue, q.min_offset, q.max_offset - q.min_offset)
        ]  # fmt: skip
    else:
        found = [await admin.query_by_id(msg_id, dlq) for msg_id in args.msg_ids]
    for msg in found:
        await admin.resend_to_group(args.group, msg)
        out.record(
            {"msgId": msg.msg_id, "group": args.group},
            f"resent {msg.msg_id} to {args.group}",
        )


async def _require_group(admin: Admin, group: str) -> None:
    if group not in await admin.groups():
        raise ClientError(f"group {group} does not exist")


async def _group_list(admin: Admin, out: Out) -> None:
    rows = []
    for group, config in (await admin.groups()).items():
        progress = await admin.progress(group)
        try:
            members = await admin.members(group)
            online, model = len(members.connections), members.message_model
        except ClientError as exc:
            if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                raise
            online, model = 0, ""
        rows.append(
            {
                "group": group,
                "online": online,
                "model": model,
                "topics": len({q.queue.topic for q in progress.queues}),
                "lag": progress.lag,
                "msgs/s": round(progress.consume_tps, 1),
                "retryMaxTimes": config.get("retryMaxTimes"),
            }
        )
    out.table(rows, ["group", "online", "model", "topics", "lag", "msgs/s", "retryMaxTimes"])


async def _group_progress(admin: Admin, args: argparse.Namespace, out: Out) -> None:
    progress = await admin.progress(args.group, args.topic)
    if out.as_json:
        out.record(progress.to_json(), "")
        return
    rows = [
        {
            "topic": q.queue.topic,
            "broker": q.queue.broker_name,
            "queue": q.queue.queue_id,
            "broker offset": q.broker_offset,
            "consumer offset": q.consumer_offset,
            "lag": q.lag,
            "last consumed": human_time(q.last_timestamp_ms),
        }
        for q in progress.queues
    ]
    columns = ["topic", "broker", "queue", "broker offset", "consumer offset", "lag",
               "last consumed"]  # fmt: skip
    out.table(rows, columns)
    out.line(
        f"total lag {progress.lag:,}, {progress.consume_tps:.1f} messages/s over the last minute"
    )


async def _group_members(admin: Admin, group: str, out: Out) -> None:
    members = await admin.members(group)
    if out.as_json:
        out.record(members.to_json(), "")
        return
    out.line(
        f"{group}: {members.message_model}, {members.consume_type}, {members.consume_from_where}; "
        "subscribes to "
        + ", ".join(f"{topic} ({tags})" for topic, tags in members.subscriptions.items())
    )
    out.table(members.connections, ["clientId", "clientAddr", "language", "version"])


async def _group_reset(admin: Admin, args: argparse.Namespace, out: Out) -> None:
    offsets = await admin.reset_offsets(args.group, args.topic, args.to, force=not args.only_back)
    rows = [
        {"broker": mq.broker_name, "queue": mq.queue_id, "offset": offset}
        for mq, offset in offsets.items()
    ]
    out.table(rows, ["broker", "queue", "offset"])
    if not out.as_json:
        target = {-1: "each queue's end", 0: "each queue's start"}.get(args.to, human_time(args.to))
        out.line(f"offsets of {args.group} on {args.topic} moved to {target}")
