"""The broker process (RocketMQ `BrokerController` + `NamesrvController`): wires the store,
the managers, the processors and their executors, the remoting servers and the periodic
tasks, and owns their lifecycle.

Start: bind the ports (so a busy port fails before anything is touched), start (recover)
the store in a thread, load topics / offsets / groups, then serve. Stop (SIGTERM): stop
accepting, answer parked pulls, let requests in flight finish, persist offsets and config,
shut the store down cleanly (which removes `abort`), unregister from name servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import structlog

from rmqpy.broker.acl import AclError, PlainAcl, RequestGuard, default_acl_file
from rmqpy.broker.clients import ClientManager
from rmqpy.broker.context import RequestContext, SingleProcessor, not_supported, runs_of
from rmqpy.broker.executors import FamilyExecutor, LoopRounds, Table, per_request
from rmqpy.broker.groups import SubscriptionGroupManager
from rmqpy.broker.health import HealthCheck
from rmqpy.broker.http_endpoint import HttpEndpoint
from rmqpy.broker.long_polling import CHECK_INTERVAL_S, ParkedPull, PullRequestHoldService
from rmqpy.broker.metrics import BrokerMetrics, OutRates
from rmqpy.broker.metrics_export import broker_registry
from rmqpy.broker.offsets import ConsumerOffsetManager
from rmqpy.broker.open_files import SAMPLE_INTERVAL_S, OpenFiles
from rmqpy.broker.processors.admin import AdminProcessor
from rmqpy.broker.processors.client import ClientProcessor
from rmqpy.broker.processors.group_admin import GroupAdminProcessor
from rmqpy.broker.processors.namesrv import NamesrvProcessor
from rmqpy.broker.processors.offsets import OffsetProcessor
from rmqpy.broker.processors.pull import PullProcessor
from rmqpy.broker.processors.query import QueryProcessor
from rmqpy.broker.processors.send import LaterAnswers, SendIdentity, SendProcessor
from rmqpy.broker.registration import NamesrvRegistrar
from rmqpy.broker.route import RouteInfoManager
from rmqpy.broker.topics import TopicConfigManager
from rmqpy.config import compiled
from rmqpy.config.broker_config import BrokerRole, Settings
from rmqpy.config.reference import settings_json
from rmqpy.config.store_config import FlushDiskType
from rmqpy.remoting.codes import PERM_READ, PERM_WRITE, RequestCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.protocol import Connection
from rmqpy.remoting.server import ConnectionLimit, RemotingServer
from rmqpy.remoting.tls import ServerTls, TlsConfigError
from rmqpy.store.message_store import MessageStore

log = structlog.get_logger(__name__)

RC = RequestCode
ACL_RELOAD_INTERVAL_S = 1.0  # how often the ACL file is looked at (RocketMQ: 500 ms)


WILDCARDS = ("0.0.0.0", "::", "")


def advertised_ip(bind_address: str = "0.0.0.0") -> str:
    """The address clients are told to use when brokerIP1 is not set: the bind address
    when it is one address (a broker listening on 127.0.0.1 only must not advertise an
    address it does not answer on), else the first non-loopback IPv4 address (the route a
    UDP socket would take), else 127.0.0.1. Nothing is sent."""
    if bind_address not in WILDCARDS:
        return bind_address
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        ip: str = s.getsockname()[0]
        if not ip.startswith("127.") and ip != "0.0.0.0":
            return ip
    return "127.0.0.1"


def bind_port(port: int, what: str, host: str = "0.0.0.0") -> socket.socket:
    """A listening socket on host:port (an IPv6 address, `::` among them, gets an IPv6
    socket, which takes IPv4 connections too)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        where = f"{host}:{port}" if family == socket.AF_INET else f"[{host}]:{port}"
        reason = exc.strerror or str(exc)
        raise StartupError(f"cannot listen on {where} for the {what}: {reason}") from exc
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def bind_http(port: int, host: str, token: str = "") -> HttpEndpoint:
    try:
        return HttpEndpoint(port, host, token)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StartupError(
            f"cannot listen on {host}:{port} for metrics and health: {reason}"
        ) from exc


class StartupError(RuntimeError):
    """The broker cannot start; the message says why, in one line."""


# Runs and answers a read's requests at once on the loop, or declines, having changed
# nothing (`SendProcessor.send_read`, `PullProcessor.pull_read`).
DirectRead = Callable[[Connection, list[RemotingCommand], float, asyncio.AbstractEventLoop], bool]
SEND_CODES = frozenset(
    (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
)
PULL_CODES = frozenset((RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE))
# Answers the requests of a read it refuses, and returns the others (`acl.RequestGuard`).
Guard = Callable[[Connection, list[RemotingCommand]], list[RemotingCommand]]
# Runs and answers the requests at the start of a read's bytes straight from their frames:
# the bytes it took, 0 for none (`SendProcessor.send_frames`, `PullProcessor.pull_frames`).
FramesRead = Callable[[Connection, memoryview, float, asyncio.AbstractEventLoop], int]


class Dispatcher:
    """Routes a request to its processor's executor; unknown codes are answered at once."""

    def __init__(
        self,
        table: Table,
        loop: asyncio.AbstractEventLoop,
        direct: Mapping[int, DirectRead] | None = None,
        guard: Guard | None = None,
        frames_read: Sequence[FramesRead] = (),
    ) -> None:
        self.table = table
        self.loop = loop
        self.direct = direct or {}
        self.guard = guard
        self.frames_read = frames_read
        # Connections with requests handed to executors and not yet run: their next
        # requests must not overtake those, so none is run at once until the executors ran.
        self._queued: set[Connection] = set()

    def __call__(self, conn: Connection, request: RemotingCommand) -> None:
        self.batch(conn, [request])

    def frames(self, conn: Connection, data: memoryview) -> int:
        """A read's bytes, before they are decoded: the bytes of the requests at its start
        that the `frames_read` ran and answered straight from their frames (runs of sends,
        runs of pulls, each taken by the first that takes it), 0 for none (and always where
        requests are checked against the ACL, or where this connection's earlier requests
        still wait in an executor)."""
        readers = self.frames_read
        if not readers or self.guard is not None or conn in self._queued:
            return 0
        received_s, loop = time.monotonic(), self.loop
        # The reader that took this connection's last read is asked first: a producer's
        # reads are sends, a consumer's pulls.
        hint = conn.frames_hint
        if hint is not None and (took := hint(conn, data, received_s, loop)):
            if took == len(data):
                return took
            used = took
        else:
            used = 0
        while used < len(data):
            for read in readers:
                took = read(conn, data[used:] if used else data, received_s, loop)
                if took:
                    used += took
                    conn.frames_hint = read
                    break
            else:
                return used
        return used

    def batch(self, conn: Connection, requests: list[RemotingCommand]) -> None:
        """The requests of one read, in order: each run of requests for one processor goes
        to its executor in one hand-over. A read of requests that one `direct` handler takes
        (sends only, pulls only) is first offered to it, which runs and answers them at once
        when it can (and when no request of this connection still waits in an executor)."""
        received_s = time.monotonic()
        if self.guard is not None:
            requests = self.guard(conn, requests)
            if not requests:
                return
        direct = self.direct.get(requests[0].code) if self.direct else None
        if (
            direct is not None
            and conn not in self._queued
            and all(self.direct.get(r.code) is direct for r in requests)
            and direct(conn, requests, received_s, self.loop)
        ):
            return
        for entry, run in runs_of(self.table, conn, requests, self.loop, received_s):
            if entry is None:
                for request in run:
                    conn.respond(request, not_supported(request))
            else:
                entry[1].submit_all(entry[0], run)
        if self.direct:
            if not self._queued:  # cleared once the hand-overs queued so far have run
                self.loop.call_soon(self._queued.clear)
            self._queued.add(conn)


class BrokerController:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ip = settings.broker.broker_ip1 or advertised_ip(settings.remoting.bind_address)
        self.port = 0
        self.namesrv_port = 0
        self.store: MessageStore | None = None
        self.servers: list[RemotingServer] = []
        self.executors: list[FamilyExecutor] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._registrar: NamesrvRegistrar | None = None
        self._oneoff: set[asyncio.Task[None]] = set()
        self._wired = False
        self._direct: dict[int, DirectRead] = {}
        self._frames_read: list[FramesRead] = []
        self._loop_thread = 0
        self.stopped = asyncio.Event()
        self.stop_problems: list[str] = []  # what shutdown could not save, for the exit code
        self.metrics = BrokerMetrics()
        self.out_rates = OutRates(self.metrics)
        self.acl: PlainAcl | None = None
        self.tls: ServerTls | None = None
        self._client_tls: ssl.SSLContext | None = None
        self.http: HttpEndpoint | None = None
        self.open_files = OpenFiles()

    @property
    def broker_addr(self) -> str:
        return f"{self.ip}:{self.port}"

    # --- start -------------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.settings.broker
        host = self.settings.remoting.bind_address
        loop = self._loop = asyncio.get_running_loop()
        sockets = [bind_port(cfg.listen_port, "broker", host)]
        self.port = sockets[0].getsockname()[1]
        fast = cfg.fast_listen_port if cfg.fast_listen_port >= 0 else cfg.listen_port - 2
        if cfg.listen_port > 0 and fast > 0:
            sockets.append(bind_port(fast, "broker's fast (VIP) channel", host))
        namesrv_sock = (
            bind_port(cfg.namesrv_listen_port, "name server", cfg.namesrv_bind_address or host)
            if cfg.namesrv_listen_port
            else None
        )
        if namesrv_sock is not None:
            self.namesrv_port = namesrv_sock.getsockname()[1]
        try:
            self.tls = self.settings.remoting.server_tls()
            self._client_tls = self.settings.remoting.client_tls()
        except TlsConfigError as exc:
            for sock in [*sockets, *([namesrv_sock] if namesrv_sock else [])]:
                sock.close()
            raise StartupError(str(exc)) from None
        try:
            self.acl = self._load_acl()
            if cfg.metrics_port:
                self.http = bind_http(
                    cfg.metrics_port, cfg.metrics_bind_address or host, cfg.metrics_bearer_token
                )
            store_cfg = replace(self.settings.store, store_host=self.broker_addr)
            self.store = MessageStore(store_cfg)
            await asyncio.to_thread(self.store.start)
        except BaseException:
            for sock in [*sockets, *([namesrv_sock] if namesrv_sock else [])]:
                sock.close()
            if self.http is not None:
                self.http.close()
                self.http = None
            raise
        self._wire(loop)
        broker_table, namesrv_table = self._tables(loop)
        remoting = self.settings.remoting
        limit = ConnectionLimit(remoting.max_connections, lambda: self.open_files.low)
        guard = RequestGuard(self.acl) if self.acl is not None else None
        for sock in sockets:
            server = RemotingServer(
                Dispatcher(broker_table, loop, self._direct, guard, self._frames_read),
                on_closed=self.clients.connection_closed,
                idle_timeout_s=remoting.server_channel_max_idle_time_seconds,
                max_in_flight=remoting.max_requests_in_flight_per_connection,
                limit=limit,
            )
            await server.start("", 0, sock=sock, tls=self.tls)
            self.servers.append(server)
        if namesrv_sock is not None:
            server = RemotingServer(
                Dispatcher(namesrv_table, loop, guard=self._namesrv_guard()),
                idle_timeout_s=remoting.server_channel_max_idle_time_seconds,
                limit=limit,
            )
            await server.start("", 0, sock=namesrv_sock, tls=self.tls)
            self.servers.append(server)
        self._register_self()
        self._start_periodic(loop)
        if self.http is not None:
            self.http.serve(
                broker_registry(self),
                HealthCheck(self.store, cfg.health_dispatch_stall_seconds, self.open_files),
            )
        log.info(
            "broker started",
            broker=cfg.broker_name,
            cluster=cfg.broker_cluster_name,
            addr=self.broker_addr,
            namesrv_port=self.namesrv_port or None,
            metrics_port=self.http.port if self.http is not None else None,
            store=store_cfg.store_path_root_dir,
            flush=store_cfg.flush_disk_type.value,
            core=compiled.describe(),
        )
        if compiled.missing:
            log.warning("compiled core not built: the pure-Python path runs, slower; "
                        "reinstall with a C compiler (gcc) and the Python headers",
                        missing=sorted(compiled.missing))  # fmt: skip

    def _wire(self, loop: asyncio.AbstractEventLoop) -> None:
        cfg = self.settings.broker
        assert self.store is not None
        config_dir = self.store.config.config_dir
        self.topics = TopicConfigManager(
            config_dir, cfg.broker_cluster_name, cfg.broker_name, cfg.default_topic_queue_nums
        )
        self.topics.load()
        self.topics.room_for_new_files = self.open_files.room_for_new_files
        self.offsets = ConsumerOffsetManager(config_dir)
        self.offsets.load()
        self.groups = SubscriptionGroupManager(
            config_dir, cfg.auto_create_subscription_group, cfg.max_reconsume_times
        )
        self.groups.load()
        self.clients = ClientManager(loop, cfg.channel_expired_timeout_ms)
        self.routes = RouteInfoManager(self.settings.namesrv.broker_heartbeat_timeout_ms)
        self.hold = PullRequestHoldService(self.store.max_offset_reader(), self._wake_pulls)
        self.store.register_arrival_listener(self.hold.on_arrivals)
        # Sends stored on the loop are dispatched on the loop, after their answers.
        self.rounds = LoopRounds(loop)
        self.store.dispatch_with(self.rounds.schedule)
        self.topics.on_change.append(self._register_self)
        self._wired = True  # the managers exist: shutdown persists them

    def _tables(self, loop: asyncio.AbstractEventLoop) -> tuple[Table, Table]:
        cfg = self.settings.broker
        assert self.store is not None
        store = self.store

        def family(
            name: str, threads: int, capacity: int, wait_ms: int, on_loop_ok: bool = False
        ) -> FamilyExecutor:
            """An executor of at least one thread; none (the event loop) only where allowed."""
            threads = max(0 if on_loop_ok else 1, threads)
            executor = FamilyExecutor(name, loop, threads, capacity, wait_ms, self.metrics)
            self.executors.append(executor)
            return executor

        # Sends run on the event loop: under SYNC_FLUSH they do not wait for their group
        # commit either (`LaterAnswers` answers them once it is done), but a send-back still
        # waits for its flush, so under SYNC_FLUSH it keeps a thread of its own.
        send_x = family(
            "send",
            cfg.send_message_thread_pool_nums,
            cfg.send_thread_pool_queue_capacity,
            cfg.wait_time_mills_in_send_queue,
            on_loop_ok=store.config.flush_disk_type is not FlushDiskType.SYNC_FLUSH,
        )
        pull_x = family(
            "pull",
            cfg.pull_message_thread_pool_nums,
            cfg.pull_thread_pool_queue_capacity,
            cfg.wait_time_mills_in_pull_queue,
        )
        query_x = family(
            "query",
            cfg.query_message_thread_pool_nums,
            cfg.query_thread_pool_queue_capacity,
            cfg.wait_time_mills_in_pull_queue,
        )
        admin_x = family(
            "admin",
            cfg.admin_broker_thread_pool_nums,
            cfg.admin_thread_pool_queue_capacity,
            cfg.wait_time_mills_in_heartbeat_queue,
        )
        client_x = family(
            "client",
            cfg.client_manage_thread_pool_nums,
            cfg.client_manager_thread_pool_queue_capacity,
            cfg.wait_time_mills_in_heartbeat_queue,
        )
        self.pull_executor = pull_x
        self._loop_thread = threading.get_ident()  # wiring runs on the loop

        self.send = send = SendProcessor(
            store,
            self.topics,
            self.groups,
            SendIdentity(
                cfg.broker_cluster_name,
                cfg.broker_name,
                cfg.broker_permission,
                cfg.auto_create_topic_enable,
            ),
            self.metrics,
        )
        if store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            send.later = LaterAnswers(
                loop, send_x.answer, store.config.sync_flush_timeout_ms / 1000
            )
            if cfg.send_message_thread_pool_nums == 0:
                send_x.inline = _not_a_send_back
        if cfg.send_message_thread_pool_nums == 0:
            self._direct.update(dict.fromkeys(SEND_CODES, send.send_read))
            self._frames_read.append(send.send_frames)
        pull = PullProcessor(
            store,
            self.topics,
            self.groups,
            self.clients,
            self.offsets,
            self.hold,
            cfg.broker_permission,
            cfg.long_polling_enable,
            cfg.short_polling_time_mills,
            cfg.broker_role is not BrokerRole.SLAVE,
            self.metrics,
        )
        self.pull = pull
        self.pull_processor = per_request(pull)
        pull.hand_over = partial(pull_x.submit, self.pull_processor)
        pull_x.inline = pull.reads_memory
        self._direct.update(dict.fromkeys(PULL_CODES, pull.pull_read))
        self._frames_read.append(pull.pull_frames)
        query = QueryProcessor(store)
        offsets = OffsetProcessor(store, self.offsets)
        client = ClientProcessor(self.clients, self.groups, self.topics)
        admin = AdminProcessor(
            store,
            self.topics,
            self.groups,
            self.offsets,
            self._runtime_extra,
            self.metrics.forget_topic,
            lambda: settings_json(self.settings),
            self.apply_settings,
        )
        group_admin = GroupAdminProcessor(
            store,
            cfg.broker_name,
            self.topics,
            self.groups,
            self.offsets,
            self.clients,
            self.out_rates,
        )
        namesrv = NamesrvProcessor(
            self.routes, self.settings.namesrv.route_unknown_topics_through_default
        )
        namesrv_table = namesrv.table(admin_x)
        broker_table: Table = {
            RC.SEND_MESSAGE: (send, send_x),
            RC.SEND_MESSAGE_V2: (send, send_x),
            RC.SEND_BATCH_MESSAGE: (send, send_x),
            RC.CONSUMER_SEND_MSG_BACK: (per_request(send.send_back), send_x),
            RC.PULL_MESSAGE: (self.pull_processor, pull_x),
            RC.LITE_PULL_MESSAGE: (self.pull_processor, pull_x),
            RC.QUERY_MESSAGE: (per_request(query.query_message), query_x),
            RC.VIEW_MESSAGE_BY_ID: (per_request(query.view_message_by_id), query_x),
            RC.QUERY_CONSUMER_OFFSET: (per_request(offsets.query_consumer_offset), client_x),
            RC.UPDATE_CONSUMER_OFFSET: (per_request(offsets.update_consumer_offset), client_x),
            RC.HEART_BEAT: (per_request(client.heartbeat), client_x),
            RC.UNREGISTER_CLIENT: (per_request(client.unregister_client), client_x),
            RC.GET_CONSUMER_LIST_BY_GROUP: (per_request(client.consumer_list), client_x),
            RC.LOCK_BATCH_MQ: (per_request(client.lock_batch), client_x),
            RC.UNLOCK_BATCH_MQ: (per_request(client.unlock_batch), client_x),
            RC.GET_ROUTEINFO_BY_TOPIC: namesrv_table[RC.GET_ROUTEINFO_BY_TOPIC],
            RC.GET_BROKER_CLUSTER_INFO: namesrv_table[RC.GET_BROKER_CLUSTER_INFO],
        }
        administered: dict[int, SingleProcessor] = {
            RC.GET_MAX_OFFSET: offsets.get_max_offset,
            RC.GET_MIN_OFFSET: offsets.get_min_offset,
            RC.SEARCH_OFFSET_BY_TIMESTAMP: offsets.search_offset,
            RC.GET_EARLIEST_MSG_STORETIME: offsets.get_earliest_store_time,
            RC.GET_ALL_CONSUMER_OFFSET: offsets.get_all_consumer_offset,
            RC.UPDATE_AND_CREATE_TOPIC: admin.create_topic,
            RC.DELETE_TOPIC_IN_BROKER: admin.delete_topic,
            RC.GET_ALL_TOPIC_CONFIG: admin.all_topic_config,
            RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.all_subscription_groups,
            RC.GET_BROKER_RUNTIME_INFO: admin.runtime_info,
            RC.GET_BROKER_CONFIG: admin.broker_config,
            RC.UPDATE_BROKER_CONFIG: admin.update_broker_config,
            RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: group_admin.update_group,
            RC.DELETE_SUBSCRIPTIONGROUP: group_admin.delete_group,
            RC.GET_TOPIC_STATS_INFO: group_admin.topic_stats,
            RC.GET_CONSUME_STATS: group_admin.consume_stats,
            RC.QUERY_TOPIC_CONSUME_BY_WHO: group_admin.consume_by_who,
            RC.GET_CONSUMER_CONNECTION_LIST: group_admin.consumer_connections,
            RC.GET_PRODUCER_CONNECTION_LIST: group_admin.producer_connections,
            RC.INVOKE_BROKER_TO_RESET_OFFSET: group_admin.reset_offset,
            RC.CONSUME_MESSAGE_DIRECTLY: group_admin.consume_directly,
        }  # the admin family's requests, each answered on its own
        broker_table.update(
            {code: (per_request(run), admin_x) for code, run in administered.items()}
        )
        return broker_table, namesrv_table

    # --- access control -----------------------------------------------------------------------
    def _load_acl(self) -> PlainAcl | None:
        cfg = self.settings.broker
        if not cfg.acl_enable:
            return None
        try:
            return PlainAcl(cfg.plain_acl_file or default_acl_file())
        except AclError as exc:
            raise StartupError(f"aclEnable=true, but {exc}") from None

    def _namesrv_guard(self) -> RequestGuard | None:
        """With ACL on, the embedded name server takes no broker registration from outside:
        its own broker registers in-process, and anyone else's REGISTER_BROKER could send
        producers to a rogue address, as UNREGISTER_BROKER could empty the routes."""
        if self.acl is None:
            return None
        only_ours = "the embedded name server registers only its own broker"
        return RequestGuard(
            None, dict.fromkeys((RC.REGISTER_BROKER, RC.UNREGISTER_BROKER), only_ours)
        )

    # --- routes -------------------------------------------------------------------------------
    def _register_self(self) -> None:
        """Register with the embedded route table, and (from any thread) with the name
        servers at once: a topic change should not wait for the next period."""
        self._register_embedded()
        if self._registrar is not None:
            self._loop.call_soon_threadsafe(self._spawn, self._registrar.register_all())

    def _register_embedded(self) -> None:
        """This broker's routes in the embedded route table: at start, on a topic change, and
        every registerNameServerPeriod, so routes removed from outside come back."""
        cfg = self.settings.broker
        topics = self._advertised_topics()["topicConfigTable"]
        self.routes.register_broker(
            cfg.broker_cluster_name,
            cfg.broker_name,
            cfg.broker_id,
            self.broker_addr,
            topics,
            permanent=True,
        )

    def _advertised_topics(self) -> dict[str, Any]:
        """The topic table a registration carries: as Java's `registerBrokerAll`, a broker
        that may not be read or written advertises each topic's perm masked by its own, so
        clients route no sends (or pulls) to it."""
        wrapper = self.topics.wrapper_json()
        perm = self.settings.broker.broker_permission
        if perm & PERM_READ and perm & PERM_WRITE:
            return wrapper
        for config in wrapper["topicConfigTable"].values():
            config["perm"] = int(config["perm"]) & perm
        return wrapper

    def apply_settings(self, changes: Mapping[str, str]) -> None:
        """Settings changed on the running broker (UPDATE_BROKER_CONFIG), all or none:
        `brokerPermission` (2 write, 4 read, 6 both: 4 takes a broker out of producers'
        routes while its consumers drain it). ValueError naming any other key, or a bad value.
        The change lasts until restart: broker.conf is not rewritten."""
        live = {"brokerPermission"}
        others = sorted(k for k in changes if k not in live)
        if others:
            raise ValueError(
                f"{', '.join(others)} cannot change while the broker runs (live: "
                f"{', '.join(sorted(live))}): set them in broker.conf and restart"
            )
        if "brokerPermission" not in changes:
            return
        raw = changes["brokerPermission"]
        if not raw.isdigit() or int(raw) not in (PERM_READ, PERM_WRITE, PERM_READ | PERM_WRITE):
            raise ValueError(f"brokerPermission {raw!r}: 2 (write), 4 (read) or 6 (both)")
        perm = int(raw)
        broker = replace(self.settings.broker, broker_permission=perm)
        self.settings = replace(self.settings, broker=broker)
        self.pull.broker_permission = perm
        self.send.set_permission(perm)
        log.info("broker setting changed", brokerPermission=perm)
        self.topics.data_version.next()  # the name servers take the new registration
        self._register_self()

    def _spawn(self, work: Coroutine[object, object, None]) -> None:
        task = self._loop.create_task(work)
        self._oneoff.add(task)
        task.add_done_callback(self._oneoff.discard)

    # --- long polling ---------------------------------------------------------------------------
    def _wake_pulls(self, pulls: Sequence[ParkedPull]) -> None:
        """From any thread: run the woken pulls again on the loop (from the loop's own
        thread, where dispatch usually runs, right after the dispatch round that woke them,
        without waking the loop up)."""
        if threading.get_ident() == self._loop_thread:
            self.rounds.after_round(partial(self._resubmit, pulls))
        else:
            self.pull_executor.loop.call_soon_threadsafe(self._resubmit, pulls)

    def _resubmit(self, pulls: Sequence[ParkedPull]) -> None:
        """Woken pulls that read only memory are answered at once; the others go to the
        pull executor's threads."""
        for pull in self.pull.resume(list(pulls), time.monotonic()):
            self.pull_executor.submit(self.pull_processor, pull.ctx)

    # --- periodic work ------------------------------------------------------------------------
    def _start_periodic(self, loop: asyncio.AbstractEventLoop) -> None:
        cfg = self.settings.broker
        every: list[tuple[float, Callable[[], object], bool]] = [
            (CHECK_INTERVAL_S, self.hold.check_timeouts, False),
            (cfg.flush_consumer_offset_interval_ms / 1000, self.offsets.persist, True),
            (10.0, self.clients.expire_idle, False),
            (10.0, self.out_rates.sample, False),
            (SAMPLE_INTERVAL_S, self.open_files.sample, True),
            (
                self.settings.namesrv.scan_not_active_broker_interval_ms / 1000,
                self.routes.scan_not_active,
                False,
            ),
        ]
        if self.acl is not None:
            every.append((ACL_RELOAD_INTERVAL_S, self.acl.reload, True))
        if self.namesrv_port:
            every.append(
                (cfg.register_name_server_period_ms / 1000, self._register_embedded, False)
            )
        for interval, fn, threaded in every:
            self._tasks.append(loop.create_task(_periodic(interval, fn, threaded)))
        if cfg.namesrv_addr:
            self._registrar = NamesrvRegistrar(
                cfg, self.broker_addr, self._advertised_topics, self._client_tls
            )
            self._tasks.append(
                loop.create_task(
                    _periodic(
                        cfg.register_name_server_period_ms / 1000,
                        self._registrar.register_all,
                        False,
                        first_now=True,
                    )
                )
            )

    def _runtime_extra(self) -> dict[str, str]:
        return {
            "brokerAddr": self.broker_addr,
            "parkedPulls": str(self.hold.parked_count()),
            "rejectedRequests": str(sum(x.rejected for x in self.executors)),
            "connections": str(sum(len(s.connections) for s in self.servers)),
        }

    # --- stop ---------------------------------------------------------------------------------
    async def shutdown(self, grace_s: float = 3.0) -> None:
        log.info("broker stopping", addr=self.broker_addr)
        if self.http is not None:
            await asyncio.to_thread(self.http.close)
            self.http = None
        tasks = [*self._tasks, *self._oneoff]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._wired:
            self.hold.wake_all()
        await asyncio.gather(*(s.close(grace_s) for s in self.servers))
        for executor in self.executors:
            await asyncio.to_thread(executor.shutdown)
        if self._registrar is not None:
            await self._registrar.unregister_all()
        # Each step is tried whatever the one before did (a full disk fails the config
        # files' writes): the store must still flush, write its checkpoint and unlock.
        steps: list[tuple[str, Callable[[], object]]] = []
        if self._wired:
            steps += [("consumer offsets", self.offsets.persist), ("topics", self.topics.persist)]
        if self.store is not None:
            steps.append(("the store", self.store.shutdown))
        for what, step in steps:
            try:
                await asyncio.to_thread(step)
            except OSError as exc:
                self.stop_problems.append(f"could not save {what}: {exc}")
                log.error("could not save at shutdown", what=what, error=str(exc))
        log.info("broker stopped", addr=self.broker_addr)
        self.stopped.set()


def _not_a_send_back(ctx: RequestContext) -> bool:
    return ctx.request.code != RequestCode.CONSUMER_SEND_MSG_BACK


async def _periodic(
    interval_s: float, fn: Callable[[], object], threaded: bool, first_now: bool = False
) -> None:
    if not first_now:
        await asyncio.sleep(interval_s)
    while True:
        try:
            result = await asyncio.to_thread(fn) if threaded else fn()
            if isinstance(result, Awaitable):
                await result
        except Exception:
            log.exception("periodic task failed", task=getattr(fn, "__qualname__", repr(fn)))
        await asyncio.sleep(interval_s)
