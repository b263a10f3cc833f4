"""Who can reach the broker: the addresses its ports listen on, and a broker.conf with a
security setting the broker does not know, which stops its start instead of being ignored."""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rmqpy.bench.processes import free_port, wait_for_port
from rmqpy.broker.controller import advertised_ip
from rmqpy.remoting.client import connect
from tests.broker.rpc import RC, call, json_of
from tests.integration.daemon import SMALL_STORE_FLAGS, BrokerProcess

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def other_address() -> str:
    """This machine's first non-loopback IPv4 address (the test needs one)."""
    ip = advertised_ip()
    if ip.startswith("127."):
        pytest.skip("this machine has no address but loopback")
    return ip


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("accessKey=RocketMQ", "accessKey"),
        ("tls.test.mode.enable=true", "tls.test.mode.enable"),
        ("tls.config.file=/etc/rocketmq/tls.properties", "tls.config.file"),
        ("useTLS=true", "useTLS"),
        ("authenticationEnabled=true", "authenticationEnabled"),
    ],
)
def test_a_security_setting_the_broker_does_not_know_stops_its_start(
    tmp_path: Path, line: str, key: str
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=guarded\n{line}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "rmqpy.broker", "-c", str(conf), "--storePathRootDir",
         str(tmp_path / "s"), "--listenPort", "0", "--namesrvListenPort", "0",
         "--metricsPort", "0"],
        capture_output=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    errors = [line for line in proc.stderr.decode().splitlines() if line.startswith("python -m")]
    assert proc.returncode == 2, proc.stderr.decode()[-2000:]
    assert len(errors) == 1 and key in errors[0]
    assert not (tmp_path / "s").exists()  # nothing started: no store was made


def test_rmqpy_config_still_reads_such_a_conf(tmp_path: Path) -> None:
    """Only a process about to serve refuses: `rmqpy config` prints the settings the file
    gives (the unknown key is not one of them) and exits 0."""
    conf = tmp_path / "broker.conf"
    conf.write_text("tls.test.mode.enable=true\n")
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "rmqpy"), "config", "-c", str(conf)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert "tls.test.mode.enable" not in proc.stdout.decode()  # unknown: left out


async def test_make_runs_broker_answers_on_loopback_and_on_no_other_address(
    tmp_path: Path,
) -> None:
    """The command `make run` runs, on free ports and a small store: the broker, its name
    server and its HTTP port answer on 127.0.0.1 and refuse connections to this machine's
    other address; the routes it hands out name 127.0.0.1."""
    other = other_address()
    dry_run = (
        subprocess.run(
            ["make", "-s", "-n", "run"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()
    )
    command = shlex.split(dry_run[-1])
    assert command[1:3] == ["broker", "--storePathRootDir"], dry_run
    ports = {key: free_port() for key in ("listenPort", "namesrvListenPort", "metricsPort")}
    flags = {
        **{k: v for k, v in SMALL_STORE_FLAGS.items() if k not in ("brokerIP1", "metricsPort")},
        **{key: str(port) for key, port in ports.items()},
        "storePathRootDir": str(tmp_path / "store"),
    }
    argv = [str(ROOT / command[0]), *command[1:]]
    for key, value in flags.items():
        argv += [f"--{key}", value]
    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        for port in ports.values():  # (the HTTP port may open a moment after the others)
            wait_for_port(port, proc)
            assert not reachable(other, port), f"port {port} answers on {other}"
        conn = await connect("127.0.0.1", ports["listenPort"])
        cluster = json_of(await call(conn, RC.GET_BROKER_CLUSTER_INFO))
        await conn.aclose()
        addrs = cluster["brokerAddrTable"]["broker-a"]["brokerAddrs"]
        assert addrs == {"0": f"127.0.0.1:{ports['listenPort']}"}
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, log.read_text()[-2000:]


def test_a_broker_bound_to_every_interface_answers_on_another_address(tmp_path: Path) -> None:
    """RocketMQ's default, and the Docker image's: every port answers on this machine's
    other address too; the HTTP port alone kept to loopback with its own bind address."""
    other = other_address()
    port, namesrv_port, metrics_port = free_port(), free_port(), free_port()
    argv = [sys.executable, "-m", "rmqpy.broker", "--storePathRootDir", str(tmp_path / "s")]
    flags = {
        **SMALL_STORE_FLAGS,
        "listenPort": str(port),
        "namesrvListenPort": str(namesrv_port),
        "metricsPort": str(metrics_port),
        "bindAddress": "0.0.0.0",
        "metricsBindAddress": "127.0.0.1",
        "aclEnable": "false",  # known, and off: no reason to refuse
    }
    for key, value in flags.items():
        argv += [f"--{key}", value]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        wait_for_port(metrics_port, proc)  # (it may open a moment after the others)
        assert reachable(other, port) and reachable(other, namesrv_port)
        assert reachable("127.0.0.1", metrics_port) and not reachable(other, metrics_port)
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_metrics_can_require_a_bearer_token_while_health_checks_stay_open(
    tmp_path: Path,
) -> None:
    metrics_port = free_port()
    broker = BrokerProcess(
        tmp_path / "store",
        extra={"metricsPort": str(metrics_port), "metricsBearerToken": "scrape-me-7f3a"},
    ).start()
    base = f"http://127.0.0.1:{metrics_port}"
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "scrape-me-7f3a"}):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(f"{base}/metrics", headers=headers))
            with refused.value as answer:  # an HTTPError holds its connection open
                assert answer.code == 401
                assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        signed = urllib.request.Request(
            f"{base}/metrics", headers={"Authorization": "Bearer scrape-me-7f3a"}
        )
        with urllib.request.urlopen(signed) as answer:
            assert answer.status == 200 and b"rmqpy_" in answer.read()
        with urllib.request.urlopen(f"{base}/healthz") as health:
            assert health.status == 200
    finally:
        assert broker.stop() == 0
