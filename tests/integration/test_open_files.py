"""A broker running out of open files at run time: under a limit of 256 descriptors, one send
to each of 300 new topics used to be acknowledged and then fail in dispatch, with a traceback
per send, `/healthz` still 200 and new connections dropped unexplained. Now a reserve is
kept: new topics and connections are refused with a clear error, `/healthz` says why,
existing topics are served, and all of it lifts once descriptors are freed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqpy.bench.processes import free_port, wait_for_port
from rmqpy.broker.http_endpoint import HttpEndpoint
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.errors import RemotingConnectionError
from tests.broker.rpc import RC, call, pull, records, send
from tests.integration.daemon import BrokerProcess
from tests.integration.test_daemon import HARD_LIMIT, LOW_SOFT_LIMIT
from tests.integration.test_observability import get

TOPICS = 300  # each holds at least one consume-queue file: more than the limit allows


def health(port: int) -> tuple[int, list[str]]:
    status, body = get(f"http://127.0.0.1:{port}/healthz")
    return status, json.loads(body)["problems"]


async def test_a_broker_short_of_open_files_refuses_new_topics_and_serves_the_rest(
    tmp_path: Path,
) -> None:
    metrics_port = free_port()
    broker = BrokerProcess(
        tmp_path / "store",
        extra={"metricsPort": str(metrics_port)},
        prefix=[sys.executable, "-c", HARD_LIMIT],
    ).start()
    conn = await connect("127.0.0.1", broker.port)
    acked: list[int] = []
    refusals: list[str] = []
    for t in range(TOPICS):
        answer = await send(conn, f"T{t}", f"m{t}".encode())
        if answer.code == ResponseCode.SUCCESS:
            acked.append(t)
        else:
            assert answer.code == ResponseCode.SYSTEM_ERROR
            refusals.append(answer.remark or "")
    assert 100 < len(acked) < TOPICS and len(refusals) == TOPICS - len(acked)
    assert refusals[0].startswith(f"topic T{len(acked)} not created: open files nearly exhausted")
    assert f"of the limit {LOW_SOFT_LIMIT} in use" in refusals[0]

    status, problems = health(metrics_port)
    assert status == 503 and any("open files nearly exhausted" in p for p in problems), problems
    # What was acknowledged is served, and topics that exist still take sends.
    for t in acked:
        got = await pull(conn, f"T{t}", 0, 0, suspend_ms=0)
        assert got.code == ResponseCode.SUCCESS, (t, got.remark)
        assert [r.body for r in records(got.body)] == [f"m{t}".encode()]
    assert (await send(conn, "T0", b"again")).code == ResponseCode.SUCCESS
    # A new connection would eat into the reserve: refused as it opens.
    with pytest.raises((RemotingConnectionError, ConnectionError, OSError)):
        extra = await connect("127.0.0.1", broker.port)
        await call(extra, RC.GET_BROKER_RUNTIME_INFO, {})

    # Descriptors freed (topics deleted): the broker takes new topics again.
    for t in acked[: len(acked) // 2]:
        gone = await call(conn, RC.DELETE_TOPIC_IN_BROKER, {"topic": f"T{t}"})
        assert gone.code == ResponseCode.SUCCESS, gone.remark
    deadline = time.monotonic() + 10
    while (status := health(metrics_port)[0]) != 200:
        assert time.monotonic() < deadline, "health never came back once descriptors were freed"
        time.sleep(0.2)
    assert (await send(conn, "AfterFreed", b"m")).code == ResponseCode.SUCCESS
    await conn.aclose()
    assert broker.stop() == 0
    log = broker.log_text()
    assert "Traceback" not in log
    assert log.count("open files nearly exhausted: new topics and connections") == 1
    assert "open files back within the limit" in log
    assert "connection refused: open files nearly exhausted" in log


SERVE_OUT_OF_FILES = """
import os, resource, sys, time
from rmqpy.broker.http_endpoint import HttpEndpoint
from prometheus_client import CollectorRegistry
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
http = HttpEndpoint(int(sys.argv[1]), host="127.0.0.1")
http.serve(CollectorRegistry(), lambda: (True, {"status": "ok", "problems": []}))
hoard = []
try:
    while True:
        hoard.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
print("exhausted", flush=True)
sys.stdin.read()
for fd in hoard:
    os.close(fd)
print("freed", flush=True)
time.sleep(60)
"""


def test_the_http_port_answers_503_when_the_process_is_out_of_open_files() -> None:
    """With no descriptor left, accept fails and the request used to hang unanswered: the
    port keeps one spare for that moment and answers 503 with the reason."""
    port = free_port()
    with subprocess.Popen(
        [sys.executable, "-c", SERVE_OUT_OF_FILES, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as proc:
        try:
            wait_for_port(port, proc)
            assert proc.stdout is not None and proc.stdin is not None
            assert b"exhausted\n" in iter(proc.stdout.readline, b"")
            for _ in range(3):  # and again: the spare is taken back each time
                status, body = get(f"http://127.0.0.1:{port}/healthz")
                assert status == 503, body
                assert json.loads(body)["problems"] == ["the broker is out of open files"]
            proc.stdin.close()
            assert b"freed\n" in iter(proc.stdout.readline, b"")
            assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        finally:
            proc.kill()


def test_closing_the_http_port_closes_its_spare_descriptor() -> None:
    """Closing the port closes its spare descriptor too."""
    before = len(list(Path("/proc/self/fd").iterdir()))
    for _ in range(5):
        HttpEndpoint(0, host="127.0.0.1").close()
    assert len(list(Path("/proc/self/fd").iterdir())) == before
