"""A broker process whose file system fills up: on a 16 MiB tmpfs, with SYNC_FLUSH, sends
are acknowledged until the disk passes `diskSpaceWarningLevelRatio`, then refused. Before,
RocketMQ's forced clean then deleted the oldest commitlog files, acknowledged and never
consumed, and logged it at INFO. By default nothing unexpired is deleted now: `/healthz`
says 503, and every acknowledged message is served, before and after space returns and
across a crash."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from rmqpy.bench.processes import free_port
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.protocol import Connection
from tests.broker.rpc import pull, records, send
from tests.conftest import small_file_system
from tests.integration.daemon import BrokerProcess
from tests.integration.test_observability import get

BODY = 8 * 1024


def body(i: int) -> bytes:
    return f"{i:08d}".encode() * (BODY // 8)


async def served(conn: Connection, topic: str) -> list[bytes]:
    """Every message of queue 0, oldest first."""
    out: list[bytes] = []
    while True:
        got = await pull(conn, topic, 0, len(out), suspend_ms=0)
        if got.code != ResponseCode.SUCCESS:
            return out
        out += [r.body for r in records(got.body)]


def health(port: int) -> tuple[int, list[str]]:
    status, text = get(f"http://127.0.0.1:{port}/healthz")
    return status, json.loads(text)["problems"]


def writable_gauge(port: int) -> str:
    status, text = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    [line] = [x for x in text.decode().splitlines() if x.startswith("rmqpy_storage_writable{")]
    return line.split()[-1]


async def test_a_full_disk_refuses_sends_and_deletes_nothing_acknowledged(tmp_path: Path) -> None:
    with small_file_system(tmp_path / "fs", "16m") as fs:
        ballast = fs / "ballast"
        ballast.write_bytes(b"\1" * 11 * 1024 * 1024)  # about 70% used
        metrics_port = free_port()
        flags = {
            "metricsPort": str(metrics_port),
            "flushDiskType": "SYNC_FLUSH",
            "mappedFileSizeCommitLog": str(512 * 1024),
            "cleanResourceInterval": "100",  # expiry checks ten times a second
        }
        broker = BrokerProcess(fs / "store", extra=flags).start()
        conn = await connect("127.0.0.1", broker.port)
        acked: list[bytes] = []
        refused = None
        for i in range(2000):
            answer = await send(conn, "Full", body(i))
            if answer.code != ResponseCode.SUCCESS:
                refused = answer
                break
            acked.append(body(i))
        assert refused is not None, "the file system never filled"
        # Refused by the space check, or, when the disk filled between two of its rounds,
        # by the commitlog file that could not be created (Java's CREATE_MAPPED_FILE_FAILED).
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE or (
            refused.code == ResponseCode.SYSTEM_ERROR
            and "No space left on device" in (refused.remark or "")
        ), refused.remark
        assert len(acked) > 100
        time.sleep(1.5)  # fifteen expiry rounds past every ratio
        status, problems = health(metrics_port)
        assert status == 503 and any("disk" in p for p in problems), problems
        assert writable_gauge(metrics_port) == "0.0"
        assert await served(conn, "Full") == acked  # nothing deleted, nothing hidden
        assert (await send(conn, "Full", b"late")).code == ResponseCode.SERVICE_NOT_AVAILABLE

        ballast.unlink()  # space returns: sends are taken again
        deadline = time.monotonic() + 10
        while health(metrics_port)[0] != 200:
            assert time.monotonic() < deadline, "health never came back once space returned"
            time.sleep(0.1)
        assert writable_gauge(metrics_port) == "1.0"
        assert (await send(conn, "Full", b"after")).code == ResponseCode.SUCCESS
        await conn.aclose()
        broker.stop(signal.SIGKILL)  # and a crash loses none of it (SYNC_FLUSH)
        again = BrokerProcess(fs / "store", extra=flags).start()
        conn = await connect("127.0.0.1", again.port)
        assert await served(conn, "Full") == [*acked, b"after"]
        await conn.aclose()
        assert again.stop() == 0
        log = broker.log_text()
        assert "expired files deleted" not in log and "are lost" not in log
        assert "disk past diskSpaceWarningLevelRatio: puts are refused" in log
        assert "disk back under diskSpaceWarningLevelRatio: puts are taken again" in log
