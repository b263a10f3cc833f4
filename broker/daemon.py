"""`rmqpy broker` / `python -m rmqpy.broker` and `rmqpy namesrv`: parse the command line, load the
settings, run on uvloop until SIGTERM or SIGINT, stop cleanly, exit 0. `rmqpy config` prints
the settings they would run with.

Settings come from `-c broker.conf`, then `RMQPY_*` environment variables, then
`--key value` flags with RocketMQ's key names (`--listenPort 10911 --flushDiskType
SYNC_FLUSH`). A bad value or an unknown flag stops startup with one line naming the key
(exit 2); a busy port or a store directory locked by another broker exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import gc
import json
import resource
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog
import uvloop

from rmqpy.broker.acl import AclError, PlainAcl, RequestGuard, default_acl_file
from rmqpy.broker.controller import (
    ACL_RELOAD_INTERVAL_S,
    BrokerController,
    Dispatcher,
    StartupError,
    bind_port,
)
from rmqpy.broker.executors import FamilyExecutor
from rmqpy.broker.processors.namesrv import NamesrvProcessor
from rmqpy.broker.route import RouteInfoManager
from rmqpy.config.broker_config import Settings, load_settings
from rmqpy.config.logging_setup import configure_logging
from rmqpy.config.properties import ConfigError
from rmqpy.config.reference import broker_conf, keys_help, markdown, settings_json
from rmqpy.config.security import refuse_unknown_security
from rmqpy.remoting.server import RemotingServer
from rmqpy.remoting.tls import TlsConfigError
from rmqpy.store.config_files import ConfigFileError
from rmqpy.store.mapped_file import StoreFileError
from rmqpy.store.store_lock import StoreLockedError

log = structlog.get_logger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def split_flags(rest: Sequence[str]) -> dict[str, str]:
    """`--key value` and `--key=value` pairs; raises ConfigError on anything else."""
    out: dict[str, str] = {}
    i = 0
    while i < len(rest):
        arg = rest[i]
        if not arg.startswith("--") or len(arg) < 3:
            raise ConfigError(f"unexpected argument {arg!r} (settings are --key value)")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(rest):
                raise ConfigError(f"--{key} needs a value")
            value = rest[i + 1]
            i += 1
        out[key] = value
        i += 1
    return out


def load_from_args(conf_path: str | None, flags: dict[str, str], serving: bool = True) -> Settings:
    """The settings of a broker.conf and flags; unknown keys are warnings, except that a
    process about to serve (`serving`) refuses security settings it does not know
    (`refuse_unknown_security`)."""
    text = ""
    if conf_path:
        try:
            with open(conf_path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ConfigError(f"cannot read {conf_path}: {exc.strerror}") from exc
    settings, unknown = load_settings(text, overrides=flags)
    if serving:
        refuse_unknown_security(unknown)
    for key in unknown:
        log.warning("unknown setting ignored", key=key, file=conf_path)
    return settings


def stop_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT. Installed before anything starts, so a stop
    that arrives while the broker is still starting is a clean stop too."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


LOW_OPEN_FILES = 4096
NR_OPEN_DEFAULT = 1024 * 1024


def raise_open_files_limit() -> None:
    """Raise the soft limit on open files to the hard one, as a JVM does when it starts
    (MaxFDLimit) and so a Java broker runs with: every consume-queue file holds a descriptor,
    every connection one, so several hundred queues exhaust the 1024 that shells and systemd
    units give by default, and dispatch then fails for every topic. Warns when even the hard
    limit is low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # Linux caps open files at fs.nr_open
        target = NR_OPEN_DEFAULT
        with contextlib.suppress(OSError, ValueError):
            target = int(Path("/proc/sys/fs/nr_open").read_text())
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open files limit", soft=soft, hard=hard, error=str(exc))
        else:
            log.info("open files limit raised", soft=soft, to=target)
            soft = target
    if soft != resource.RLIM_INFINITY and soft < LOW_OPEN_FILES:
        log.warning(
            "open files limit is low: each consume-queue file takes a descriptor and "
            "each connection one; raise it (ulimit -n, LimitNOFILE=) for many queues",
            limit=soft,
        )


def startup_os_error(exc: OSError) -> str:
    """What an OSError at start means for the operator."""
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return (
            f"too many open files (limit {soft}): each consume-queue file takes a "
            "descriptor and each commitlog and index file two; raise the limit (ulimit -n, "
            "LimitNOFILE= in systemd, nofile in Docker)"
        )
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


async def run_broker(settings: Settings) -> int:
    stop = stop_signals()
    raise_open_files_limit()
    controller = BrokerController(settings)
    try:
        await controller.start()
    except (StartupError, StoreLockedError, StoreFileError, ConfigFileError) as exc:
        print(f"rmqpy broker: {exc}", file=sys.stderr)
        await controller.shutdown()
        return EXIT_FAILED
    except OSError as exc:  # the store's files could not be opened: one line, no traceback
        print(f"rmqpy broker: cannot start: {startup_os_error(exc)}", file=sys.stderr)
        with contextlib.suppress(OSError):
            await controller.shutdown()
        return EXIT_FAILED
    # The store, topics and modules loaded so far live as long as the broker: out of the
    # collector's sight, a full collection walks only what came later (it took 10-18 ms
    # with them, a pause every request waiting on the loop took as latency).
    gc.freeze()
    await stop.wait()
    await controller.shutdown()
    if controller.stop_problems:
        print(f"rmqpy broker: stopped, but {'; '.join(controller.stop_problems)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


async def run_namesrv(port: int, settings: Settings) -> int:
    loop = asyncio.get_running_loop()
    stop = stop_signals()
    try:
        sock = bind_port(port, "name server", settings.remoting.bind_address)
    except StartupError as exc:
        print(f"rmqpy namesrv: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        tls = settings.remoting.server_tls()
        acl = (
            PlainAcl(settings.broker.plain_acl_file or default_acl_file())
            if settings.broker.acl_enable
            else None
        )
    except (TlsConfigError, AclError) as exc:
        sock.close()
        print(f"rmqpy namesrv: {exc}", file=sys.stderr)
        return EXIT_FAILED
    routes = RouteInfoManager(settings.namesrv.broker_heartbeat_timeout_ms)
    processor = NamesrvProcessor(routes, settings.namesrv.route_unknown_topics_through_default)
    executor = FamilyExecutor("namesrv", loop, 2, 100_000, 30_000)
    guard = RequestGuard.for_namesrv(acl) if acl is not None else None
    server = RemotingServer(Dispatcher(processor.table(executor), loop, guard=guard))
    bound = await server.start("", 0, sock=sock, tls=tls)
    log.info("name server started", port=bound, acl=acl is not None, tls=tls.mode)
    interval = settings.namesrv.scan_not_active_broker_interval_ms / 1000

    async def scan() -> None:
        while True:
            await asyncio.sleep(interval)
            routes.scan_not_active()

    async def reload(acl: PlainAcl) -> None:
        while True:
            await asyncio.sleep(ACL_RELOAD_INTERVAL_S)
            await asyncio.to_thread(acl.reload)

    tasks = [loop.create_task(scan()), *([loop.create_task(reload(acl))] if acl else [])]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await server.close()
    executor.shutdown()
    log.info("name server stopped", port=bound)
    return EXIT_OK


def main(argv: Sequence[str] | None = None, prog: str = "rmqpy") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser(
        "broker",
        help="run the broker (with its embedded name server)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="settings, each as --key value after a broker.conf's, and RMQPY_* variables'\n"
        "(rmqpy config --defaults prints each with its default and meaning):\n" + keys_help(),
    )
    b.add_argument("-c", "--config", help="a RocketMQ broker.conf")
    n = sub.add_parser("namesrv", help="run a standalone name server")
    n.add_argument("-c", "--config", help="a properties file with name-server settings")
    n.add_argument("-p", "--port", type=int, default=9876, help="port to listen on (9876)")
    c = sub.add_parser(
        "config",
        help="print every setting as a commented broker.conf",
        description="Print a commented broker.conf: the settings that -c FILE, RMQPY_* and "
        "--key value flags give, or with --defaults every default. --markdown prints the "
        "reference in docs/configuration.md.",
    )
    c.add_argument("-c", "--config", help="a RocketMQ broker.conf")
    shown = c.add_mutually_exclusive_group()
    shown.add_argument("--defaults", action="store_true", help="every setting at its default")
    shown.add_argument("--markdown", action="store_true", help="the Markdown reference")
    shown.add_argument("--json", action="store_true", help="the settings as one JSON object")
    args, rest = parser.parse_known_args(argv)
    configure_logging()
    try:
        settings = load_from_args(args.config, split_flags(rest), serving=args.command != "config")
    except ConfigError as exc:
        print(f"{prog} {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "config":
        if args.markdown:
            sys.stdout.write(markdown())
        elif args.json:
            print(json.dumps(settings_json(settings), indent=2))
        else:
            sys.stdout.write(broker_conf(None if args.defaults else settings))
        return EXIT_OK
    if args.command == "namesrv":
        return uvloop.run(run_namesrv(args.port, settings))
    return uvloop.run(run_broker(settings))


def broker_main() -> int:
    """`python -m rmqpy.broker`: the same as `rmqpy broker`."""
    return main(["broker", *sys.argv[1:]], prog="python -m rmqpy.broker")
