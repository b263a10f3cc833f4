"""`python -m rmqpy.broker` as users run it: a real process, signals, a second broker, bad
settings, a standalone name server, and SIGKILL."""

from __future__ import annotations

import asyncio
import json
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.errors import RemotingError
from rmqpy.remoting.protocol import Connection
from tests.broker.rpc import RC, call, create_topic, json_of, pull, records, send, send_batch
from tests.integration.daemon import BrokerProcess, standalone_namesrv

pytestmark = pytest.mark.slow


def log_events(process: BrokerProcess) -> list[str]:
    events = []
    for line in process.log_text().splitlines():
        if line.startswith("{"):
            events.append(json.loads(line)["event"])
    return events


async def test_sigterm_stops_cleanly(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store").start()
    conn = await connect("127.0.0.1", broker.port)
    await send(conn, "TermT", b"x")
    await call(
        conn,
        RC.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "g", "topic": "TermT", "queueId": 0, "commitOffset": 1},
    )
    started = time.monotonic()
    assert broker.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 5
    await conn.aclose()
    assert not (broker.store_dir / "abort").exists()
    offsets = json.loads((broker.store_dir / "config" / "consumerOffset.json").read_text())
    assert offsets["offsetTable"]["TermT@g"] == {"0": 1}
    events = log_events(broker)
    assert events[-2:] == ["broker stopping", "broker stopped"]
    assert "broker started" in events


async def test_a_shutdown_that_cannot_save_a_table_still_stops_the_store_cleanly(
    tmp_path: Path,
) -> None:
    """topics.json cannot be written at shutdown (a full disk; here its temporary file's name
    is taken by a directory): the store is still flushed and closed (no abort file, so the
    next start is a clean one), and the exit code and one line on stderr say what was not
    saved. Before, the error ended the shutdown before the store's, with a traceback."""
    broker = BrokerProcess(tmp_path / "store").start()
    conn = await connect("127.0.0.1", broker.port)
    assert (await send(conn, "SaveT", b"x")).code == ResponseCode.SUCCESS
    await conn.aclose()
    (broker.store_dir / "config" / "topics.json.tmp").mkdir()
    assert broker.stop(signal.SIGTERM) == 1
    assert not (broker.store_dir / "abort").exists()
    lines = [line for line in broker.log_text().splitlines() if line.startswith("rmqpy broker")]
    assert len(lines) == 1 and "could not save topics" in lines[0]
    assert "Traceback" not in broker.log_text()


async def test_a_broker_whose_log_cannot_be_written_keeps_answering(tmp_path: Path) -> None:
    """stderr goes to a pipe whose reader is gone (or a file on a full disk): lines are
    dropped, requests are still answered. Before, a request that logged (here a bad one)
    was never answered, as the write error escaped from the logging call."""
    broker = BrokerProcess(tmp_path / "store")
    proc = subprocess.Popen(broker.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        while b"broker started" not in proc.stdout.readline():
            assert proc.poll() is None
        proc.stdout.close()  # the log's reader goes away
        conn = await connect("127.0.0.1", broker.port)
        bad = {"consumerGroup": "g", "topic": "LogT", "queueId": "x", "commitOffset": 1}
        for _ in range(3):  # logged as a bad request, each
            answer = await call(conn, RC.UPDATE_CONSUMER_OFFSET, bad)
            assert answer.code == ResponseCode.SYSTEM_ERROR
        assert (await send(conn, "LogT", b"still here")).code == ResponseCode.SUCCESS
        got = await pull(conn, "LogT", 0, 0)
        assert [r.body for r in records(got.body)] == [b"still here"]
        await conn.aclose()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_a_port_taken_between_its_pick_and_the_bind_is_picked_again(tmp_path: Path) -> None:
    """The harness's own race (a free port handed to a subprocess can be taken first, by
    any client's ephemeral port): the broker says why it stopped, and is started again."""
    broker = BrokerProcess(tmp_path / "store")
    taken = broker.port
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", taken))
        squatter.listen()
        broker.start()
    assert broker.port != taken
    assert broker.stop() == 0
    assert (
        f"cannot listen on 0.0.0.0:{taken} for the broker"
        in (tmp_path / f"broker-{taken}.log").read_text()
    )


def test_second_broker_on_the_same_store_exits_at_once(tmp_path: Path) -> None:
    first = BrokerProcess(tmp_path / "store").start()
    second = BrokerProcess(tmp_path / "store")
    proc = subprocess.run(second.command(), capture_output=True, timeout=30, check=False)
    assert proc.returncode == 1
    assert b"lock" in proc.stderr.lower()
    assert first.stop() == 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--flushDiskType", "SOMETIMES"],
            "flushDiskType: 'SOMETIMES' is not one of SYNC_FLUSH, ASYNC_FLUSH",
        ),
        (["--listenPort", "ten"], "listenPort"),
        (["--noSuchSetting", "1"], "unknown setting noSuchSetting"),
    ],
)
def test_bad_settings_stop_startup_naming_the_key(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rmqpy.broker", "--storePathRootDir", str(tmp_path / "s"), *flags],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert message in proc.stderr.decode()
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("config/consumerOffset.json", '{"offsetTable": {"T@g": {"0": "abc"}}}'),
        ("config/topics.json", '{"topicConfigTable": {"T": null}}'),
        (
            "config/subscriptionGroup.json",
            '{"subscriptionGroupTable": {"g": {"retryMaxTimes": "x"}}}',
        ),
        ("commitlog/00000000000000000000", "cut short"),
    ],
)
def test_a_damaged_store_file_stops_startup_with_one_line_naming_it(
    tmp_path: Path, name: str, content: str
) -> None:
    """A hand-edited config file of the wrong shape, or a commitlog file cut short: exit 1
    with one line that names the file (it used to be a traceback)."""
    path = tmp_path / "s" / name
    path.parent.mkdir(parents=True)
    path.write_text(content)
    proc = subprocess.run(
        [sys.executable, "-m", "rmqpy.broker", "--storePathRootDir", str(tmp_path / "s"),
         "--listenPort", "0", "--namesrvListenPort", "0", "--metricsPort", "0"],
        capture_output=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.decode().splitlines() if line.startswith("rmqpy")]
    assert len(errors) == 1 and name in errors[0], proc.stderr.decode()[-2000:]
    assert "Traceback" not in proc.stderr.decode()


async def test_broker_conf_with_an_unknown_key_warns_and_starts(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-conf\nbrokerClusterName=ConfCluster\nsomethingOld=1\n")
    broker = BrokerProcess(tmp_path / "store", conf=conf).start()
    conn = await connect("127.0.0.1", broker.port)
    cluster = json_of(await call(conn, RC.GET_BROKER_CLUSTER_INFO))
    assert cluster["clusterAddrTable"] == {"ConfCluster": ["broker-conf"]}
    await conn.aclose()
    assert broker.stop() == 0
    assert any('"key": "somethingOld"' in line for line in broker.log_text().splitlines())


async def test_acknowledged_messages_survive_sigkill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store").start()
    conn = await connect("127.0.0.1", broker.port)
    for i in range(200):
        assert (await send(conn, "KillT", f"m{i}".encode(), queue_id=i % 2)).code == 0
    await conn.aclose()
    broker.stop(signal.SIGKILL)
    assert (broker.store_dir / "abort").exists()
    again = broker.started_again()
    conn = await connect("127.0.0.1", again.port)
    bodies = []
    for qid in (0, 1):
        offset = 0
        while offset < 100:
            got = await pull(conn, "KillT", qid, offset)
            assert got.code == ResponseCode.SUCCESS, got.remark
            bodies += [r.body for r in records(got.body)]
            offset = int(got.ext_fields["nextBeginOffset"])
    assert sorted(bodies) == sorted(f"m{i}".encode() for i in range(200))
    await conn.aclose()
    assert again.stop() == 0


KILL_AFTER_S = (0.3, 0.8, 1.4)  # how long each load runs before its SIGKILL
CHAOS_QUEUES = 4


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_every_acknowledged_message_survives_sigkills_in_the_middle_of_a_load(
    tmp_path: Path, flush: str
) -> None:
    """Producers keep sends and batches in flight, their files rolling, while the broker is
    killed three times: after each restart every acknowledged message is in its queue at
    the offset its answer named, each queue has neither a gap nor a message twice, and what
    was never acknowledged is there whole or not at all."""
    store = tmp_path / "store"
    settings = {"flushDiskType": flush}
    broker = BrokerProcess(store, extra=settings).start()
    sent: set[bytes] = set()
    acked: dict[bytes, tuple[int, int]] = {}  # body -> (queue id, queue offset)

    async def produce(conn: Connection, worker: str) -> None:
        for i in range(1_000_000):
            queue_id = i % CHAOS_QUEUES
            bodies = [f"{worker}-{i}-{k}".encode() * 40 for k in range(1 + i % 3)]
            sent.update(bodies)
            try:
                if len(bodies) == 1:
                    answer = await send(conn, "ChaosT", bodies[0], queue_id=queue_id)
                else:
                    answer = await send_batch(conn, "ChaosT", bodies, queue_id=queue_id)
            except RemotingError:
                return  # the broker is gone, and with it this connection
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            first = int(answer.ext_fields["queueOffset"])
            for k, body in enumerate(bodies):
                acked[body] = (queue_id, first + k)

    try:
        for round_no, kill_after_s in enumerate(KILL_AFTER_S):
            conns = [await connect("127.0.0.1", broker.port) for _ in range(2)]
            if round_no == 0:
                assert (await create_topic(conns[0], "ChaosT", CHAOS_QUEUES)).code == 0
            workers = [
                asyncio.create_task(produce(conns[w % 2], f"r{round_no}w{w}")) for w in range(12)
            ]
            await asyncio.sleep(kill_after_s)
            broker.stop(signal.SIGKILL)
            await asyncio.gather(*workers)
            for conn in conns:
                await conn.aclose()
            broker = broker.started_again()

        conn = await connect("127.0.0.1", broker.port)
        found: dict[bytes, tuple[int, int]] = {}
        for queue_id in range(CHAOS_QUEUES):
            offset = 0
            while True:
                got = await pull(conn, "ChaosT", queue_id, offset, suspend_ms=0)
                if got.code != ResponseCode.SUCCESS:
                    assert got.code == ResponseCode.PULL_NOT_FOUND, got.remark
                    break
                for record in records(got.body):
                    assert record.queue_offset == offset  # no gap
                    assert record.body not in found  # nor any twice
                    found[record.body] = (queue_id, offset)
                    offset += 1
        assert len(acked) > 100
        assert {body: found.get(body) for body in acked} == acked
        assert set(found) <= sent
        await conn.aclose()
        assert broker.stop() == 0
    finally:  # a failed check leaves no broker behind
        broker.kill_if_running()


async def test_a_consumer_that_goes_on_from_its_committed_offsets_misses_nothing_across_sigkills(
    tmp_path: Path,
) -> None:
    """A consumer group commits its offsets with its pulls while producers send, and the
    broker is killed twice: each time the group goes on from the offsets the restarted
    broker has for it (a few hundred milliseconds old at most), never past what it had
    read, and in the end it has received every acknowledged message, some twice."""
    store = tmp_path / "store"
    settings = {"flushConsumerOffsetInterval": "300"}
    broker = BrokerProcess(store, extra=settings).start()
    acked: set[bytes] = set()
    received: set[bytes] = set()
    read_to = [0] * CHAOS_QUEUES  # the offset the consumer has read each queue up to

    async def produce(conn: Connection, worker: str) -> None:
        for i in range(1_000_000):
            body = f"{worker}-{i}".encode()
            try:
                answer = await send(conn, "GoOnT", body, queue_id=i % CHAOS_QUEUES)
            except RemotingError:
                return
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            acked.add(body)

    async def consume(conn: Connection, queue_id: int, stop: asyncio.Event) -> None:
        offset = read_to[queue_id]
        while not stop.is_set():
            try:
                got = await pull(conn, "GoOnT", queue_id, offset, group="GoOnG",
                                 suspend_ms=200, commit_offset=offset)  # fmt: skip
            except RemotingError:
                return
            if got.code == ResponseCode.SUCCESS:
                received.update(record.body for record in records(got.body))
                offset = read_to[queue_id] = int(got.ext_fields["nextBeginOffset"])

    async def committed(conn: Connection) -> list[int]:
        offsets = []
        for queue_id in range(CHAOS_QUEUES):
            query = {"consumerGroup": "GoOnG", "topic": "GoOnT", "queueId": queue_id,
                     "setZeroIfNotFound": False}  # fmt: skip
            found = await call(conn, RC.QUERY_CONSUMER_OFFSET, query)
            assert found.code == ResponseCode.SUCCESS, found.remark  # never lost
            offsets.append(int(found.ext_fields["offset"]))
        return offsets

    try:
        for round_no in range(3):
            conn = await connect("127.0.0.1", broker.port)
            if round_no == 0:
                assert (await create_topic(conn, "GoOnT", CHAOS_QUEUES)).code == 0
            else:
                offsets = await committed(conn)
                assert all(o <= r for o, r in zip(offsets, read_to, strict=True)), read_to
                read_to[:] = offsets  # where the group goes on
            stop = asyncio.Event()
            tasks = [asyncio.create_task(produce(conn, f"r{round_no}w{w}")) for w in range(4)]
            if round_no < 2:
                tasks += [asyncio.create_task(consume(conn, q, stop)) for q in range(CHAOS_QUEUES)]
                await asyncio.sleep(1.5)
                broker.stop(signal.SIGKILL)
                await asyncio.gather(*tasks)
                await conn.aclose()
                broker = broker.started_again()
                continue
            # The last round: no kill; the producers stop, then the group reads on.
            await asyncio.sleep(0.5)
            await conn.aclose()
            await asyncio.gather(*tasks)
            conn = await connect("127.0.0.1", broker.port)
            consumers = [asyncio.create_task(consume(conn, q, stop)) for q in range(CHAOS_QUEUES)]
            async with asyncio.timeout(30):
                while not acked <= received:
                    await asyncio.sleep(0.05)
            stop.set()
            await asyncio.gather(*consumers)
            await conn.aclose()
        assert len(acked) > 100 and acked <= received
        assert broker.stop() == 0
    finally:  # a failed check leaves no broker behind
        broker.kill_if_running()


async def test_a_groups_first_offset_for_a_queue_survives_an_early_sigkill(
    tmp_path: Path,
) -> None:
    """Offsets are written every flushConsumerOffsetInterval (5 s); a group's first one for
    a queue is now written within 50 ms. Killed before the 5 s were up, the queue's next
    owner used to find no offset and, from CONSUME_FROM_LAST (the default), start at the
    queue's end, skipping everything the group had not consumed."""
    broker = BrokerProcess(tmp_path / "store").start()
    conn = await connect("127.0.0.1", broker.port)
    for i in range(5):
        await send(conn, "FirstT", f"m{i}".encode())
    commit = {"consumerGroup": "g", "topic": "FirstT", "queueId": 0, "commitOffset": 2}
    assert (await call(conn, RC.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
    await conn.aclose()
    time.sleep(0.5)  # well within the 5 s persist interval
    broker.stop(signal.SIGKILL)
    again = broker.started_again()
    conn = await connect("127.0.0.1", again.port)
    query = {"consumerGroup": "g", "topic": "FirstT", "queueId": 0, "setZeroIfNotFound": False}
    found = await call(conn, RC.QUERY_CONSUMER_OFFSET, query)
    assert (found.code, found.ext_fields.get("offset")) == (ResponseCode.SUCCESS, "2")
    await conn.aclose()
    assert again.stop() == 0


LOW_SOFT_LIMIT = 256
WITH_LIMIT = (  # sets RLIMIT_NOFILE's soft limit, then runs the broker's command line
    "import os, resource, sys; hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LOW_SOFT_LIMIT}, hard)); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


async def test_a_broker_started_with_a_low_open_files_limit_raises_it_and_serves_many_queues(
    tmp_path: Path,
) -> None:
    """Every consume-queue file holds a descriptor (two before they were read with pread),
    so several hundred queues exhaust the soft limit of 1024 that shells and systemd units give.
    Dispatch then failed for every topic with "Too many open files": sends were acknowledged
    and never served. A JVM raises its soft limit to the hard one when it starts
    (MaxFDLimit); the broker now does the same."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4 * LOW_SOFT_LIMIT:
        pytest.skip(f"the hard open-files limit here is {hard}")
    queues = 300
    broker = BrokerProcess(tmp_path / "store", prefix=[sys.executable, "-c", WITH_LIMIT]).start()
    assert broker.proc is not None
    limits = Path(f"/proc/{broker.proc.pid}/limits").read_text()
    soft_now = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    assert int(soft_now.split()[3]) > LOW_SOFT_LIMIT, soft_now
    conn = await connect("127.0.0.1", broker.port)
    assert (await create_topic(conn, "ManyQ", queues=queues)).code == ResponseCode.SUCCESS
    for qid in range(queues):
        assert (await send(conn, "ManyQ", f"m{qid}".encode(), queue_id=qid)).code == 0
    deadline = time.monotonic() + 30  # dispatch goes in order: wait for the last queue's
    while (last := await pull(conn, "ManyQ", queues - 1, 0)).code == ResponseCode.PULL_NOT_FOUND:
        assert time.monotonic() < deadline, "the last queue's message was never dispatched"
    assert last.code == ResponseCode.SUCCESS, last.remark
    for qid in range(queues):
        got = await pull(conn, "ManyQ", qid, 0, suspend_ms=0)
        assert got.code == ResponseCode.SUCCESS, (qid, got.remark)
        assert [r.body for r in records(got.body)] == [f"m{qid}".encode()]
    await conn.aclose()
    assert broker.stop() == 0
    assert "open files limit raised" in broker.log_text()


async def test_standalone_name_server_routes_and_expires_a_broker(tmp_path: Path) -> None:
    flags = ("--brokerHeartbeatTimeoutMillis", "1500", "--scanNotActiveBrokerIntervalMs", "200")
    with standalone_namesrv(*flags) as ns_port:
        broker = BrokerProcess(
            tmp_path / "store",
            extra={"namesrvAddr": f"127.0.0.1:{ns_port}", "namesrvListenPort": "0"},
        )
        broker.start()
        conn = await connect("127.0.0.1", broker.port)
        await create_topic(conn, "NsT")
        await conn.aclose()
        ns = await connect("127.0.0.1", ns_port)
        route = await call(ns, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "NsT"})
        async with asyncio.timeout(10):  # registration follows the topic change within a period
            while route.code != ResponseCode.SUCCESS:
                await asyncio.sleep(0.2)
                route = await call(ns, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "NsT"})
        assert json_of(route)["brokerDatas"][0]["brokerAddrs"] == {"0": f"127.0.0.1:{broker.port}"}
        broker.stop(signal.SIGKILL)
        async with asyncio.timeout(10):
            while route.code == ResponseCode.SUCCESS:
                await asyncio.sleep(0.2)
                route = await call(ns, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "NsT"})
        assert route.code == ResponseCode.TOPIC_NOT_EXIST
        await ns.aclose()


HARD_LIMIT = (  # sets RLIMIT_NOFILE's soft and hard limits, then runs the broker's command
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LOW_SOFT_LIMIT}, {LOW_SOFT_LIMIT})); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


async def test_a_store_with_more_files_than_the_limit_allows_fails_to_start_in_one_line(
    tmp_path: Path,
) -> None:
    """Restarted under a hard limit its queue files exceed (300 against 256), the broker said
    nothing useful: a traceback of EMFILE. Now one line names the limit and how to raise it."""
    broker = BrokerProcess(tmp_path / "store").start()
    conn = await connect("127.0.0.1", broker.port)
    assert (await create_topic(conn, "ManyQ", queues=300)).code == ResponseCode.SUCCESS
    for qid in range(300):
        assert (await send(conn, "ManyQ", b"m", queue_id=qid)).code == ResponseCode.SUCCESS
    await conn.aclose()
    assert broker.stop() == 0
    limited = BrokerProcess(tmp_path / "store", prefix=[sys.executable, "-c", HARD_LIMIT])
    proc = subprocess.run(limited.command(), capture_output=True, timeout=60, check=False)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "Traceback" not in err, err
    [line] = [x for x in err.splitlines() if x.startswith("rmqpy broker:")]
    assert line.startswith(
        f"rmqpy broker: cannot start: too many open files (limit {LOW_SOFT_LIMIT})"
    )


async def test_a_consume_queue_file_costs_one_descriptor(tmp_path: Path) -> None:
    """Python's mmap keeps a descriptor of its own: consume-queue files, read with pread,
    are not mapped, so each holds one (a 72 h soak at 5k msg/s would have held ~13,500)."""
    broker = BrokerProcess(tmp_path / "store").start()
    assert broker.proc is not None
    fds = Path(f"/proc/{broker.proc.pid}/fd")
    conn = await connect("127.0.0.1", broker.port)
    assert (await send(conn, "Warm", b"w")).code == ResponseCode.SUCCESS
    before = len(list(fds.iterdir()))
    assert (await create_topic(conn, "FdQ", queues=100)).code == ResponseCode.SUCCESS
    for qid in range(100):
        assert (await send(conn, "FdQ", b"m", queue_id=qid)).code == ResponseCode.SUCCESS
    deadline = time.monotonic() + 30
    while (await pull(conn, "FdQ", 99, 0, suspend_ms=0)).code != ResponseCode.SUCCESS:
        assert time.monotonic() < deadline, "the last queue was never dispatched"
    grown = len(list(fds.iterdir())) - before
    await conn.aclose()
    assert broker.stop() == 0
    assert 90 <= grown < 120, f"100 consume-queue files took {grown} descriptors"
