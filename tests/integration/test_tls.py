"""TLS on a real broker process: enforcing (our client over TLS, a plain client turned away,
`openssl s_client`'s handshake), permissive (both on one port), mutual TLS, the CLI, and
settings that cannot work stopping the start. Certificates are made with `openssl`."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqpy.client.consumer import ConsumeFrom
from rmqpy.client.message import Message
from rmqpy.client.producer import Producer
from rmqpy.client.pull_consumer import PullConsumer
from rmqpy.remoting.client import connect
from rmqpy.remoting.codes import ResponseCode
from rmqpy.remoting.errors import RemotingConnectionError
from rmqpy.remoting.tls import client_context
from tests.broker.rpc import RC, call
from tests.integration.daemon import BrokerProcess, registered, standalone_namesrv
from tests.sdk.conftest import drain

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""
    d = tmp_path_factory.mktemp("certs")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "2", "-subj", "/CN=rmqpy test CA", cwd=d)  # fmt: skip
    for name, extra in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
                        ("client", "extendedKeyUsage=clientAuth")):  # fmt: skip
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", f"/CN=rmqpy {name}", cwd=d)  # fmt: skip
        (d / f"{name}.ext").write_text(extra + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile",
                f"{name}.ext", cwd=d)  # fmt: skip
    return d


def tls_broker(tmp_path: Path, certs: Path, mode: str, **more: str) -> BrokerProcess:
    extra = {
        "tls.server.mode": mode,
        "tls.server.certPath": str(certs / "server.pem"),
        "tls.server.keyPath": str(certs / "server.key"),
        **more,
    }
    return BrokerProcess(tmp_path / "store", extra=extra).start()


@pytest.fixture
def enforcing(tmp_path: Path, certs: Path) -> Iterator[BrokerProcess]:
    broker = tls_broker(tmp_path, certs, "enforcing")
    yield broker
    assert broker.stop() == 0, broker.log_text()[-2000:]


async def cluster_info(port: int, tls: ssl.SSLContext | None) -> int:
    conn = await connect("127.0.0.1", port, tls=tls)
    try:
        return (await call(conn, RC.GET_BROKER_CLUSTER_INFO)).code
    finally:
        await conn.aclose()


async def test_enforcing_serves_our_client_over_tls_and_turns_a_plain_one_away(
    enforcing: BrokerProcess, certs: Path
) -> None:
    tls = client_context(str(certs / "ca.pem"))
    async with Producer("tls-pg", enforcing.namesrv, tls=tls) as producer:
        await producer.send(Message("Sealed", b"over TLS"))
    consumer = PullConsumer("tls-cg", enforcing.namesrv, consume_from=ConsumeFrom.FIRST, tls=tls)
    consumer.subscribe("Sealed")
    async with consumer:
        assert await drain(consumer, 1) == [b"over TLS"]
    for port in (enforcing.port, enforcing.namesrv_port):
        with pytest.raises(RemotingConnectionError):
            await cluster_info(port, None)  # a plain client: its handshake fails, it is closed
    assert await cluster_info(enforcing.port, tls) == ResponseCode.SUCCESS  # still serving


def test_openssl_s_client_completes_a_verified_handshake(
    enforcing: BrokerProcess, certs: Path
) -> None:
    proc = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{enforcing.port}", "-CAfile",
         str(certs / "ca.pem"), "-verify_return_error", "-verify_ip", "127.0.0.1"],
        input=b"", capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    assert "Verify return code: 0 (ok)" in out and "CN = rmqpy server" in out


async def test_permissive_takes_tls_and_plain_clients_on_one_port(
    tmp_path: Path, certs: Path
) -> None:
    broker = tls_broker(tmp_path, certs, "permissive")
    try:
        tls = client_context(str(certs / "ca.pem"))
        for port in (broker.port, broker.namesrv_port):
            assert await cluster_info(port, None) == ResponseCode.SUCCESS
            assert await cluster_info(port, tls) == ResponseCode.SUCCESS
    finally:
        assert broker.stop() == 0, broker.log_text()[-2000:]


async def test_mutual_tls_wants_a_client_certificate_its_authority_signed(
    tmp_path: Path, certs: Path
) -> None:
    broker = tls_broker(
        tmp_path, certs, "enforcing",
        **{"tls.server.need.client.auth": "require",
           "tls.server.trustCertPath": str(certs / "ca.pem")},
    )  # fmt: skip
    try:
        without = client_context(str(certs / "ca.pem"))
        with pytest.raises((RemotingConnectionError, ssl.SSLError, ConnectionError)):
            await cluster_info(broker.port, without)
        with_cert = client_context(
            str(certs / "ca.pem"), str(certs / "client.pem"), str(certs / "client.key")
        )
        assert await cluster_info(broker.port, with_cert) == ResponseCode.SUCCESS
    finally:
        assert broker.stop() == 0, broker.log_text()[-2000:]


def test_the_cli_connects_over_tls(enforcing: BrokerProcess, certs: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RMQPY_")}
    rmqpy = str(ROOT / ".venv" / "bin" / "rmqpy")
    common = ["--namesrv", enforcing.namesrv, "--tls", "--tls-ca", str(certs / "ca.pem")]
    sent = subprocess.run([rmqpy, "send", "CliSealed", "hello", *common], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    plain = subprocess.run(
        [rmqpy, "send", "CliSealed", "hello", "--namesrv", enforcing.namesrv],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert plain.returncode != 0


@pytest.mark.parametrize(
    ("flags", "code", "named"),
    [
        (["--tls.server.mode", "enforcing"], 1, "tls.server.certPath"),
        (["--tls.server.mode", "sometimes"], 2, "tls.server.mode"),
        (
            [
                "--tls.server.mode",
                "enforcing",
                "--tls.server.certPath",
                "/nowhere/cert.pem",
                "--tls.server.keyPath",
                "/nowhere/key.pem",
            ],
            1,
            "/nowhere/cert.pem",
        ),
    ],
)
def test_tls_settings_that_cannot_work_stop_the_start(
    tmp_path: Path, flags: list[str], code: int, named: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rmqpy.broker", "--storePathRootDir", str(tmp_path / "s"),
         "--listenPort", "0", "--namesrvListenPort", "0", "--metricsPort", "0", *flags],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(("rmqpy", "python -m"))]
    assert proc.returncode == code, proc.stderr[-2000:]
    assert len(lines) == 1 and named in lines[0], proc.stderr[-2000:]


async def test_a_broker_registers_with_a_tls_name_server_over_tls(
    tmp_path: Path, certs: Path
) -> None:
    """`rmqpy namesrv` enforcing TLS; the broker's registrations go over TLS with tls.enable,
    the name server's certificate checked (tls.client.authServer, trustCertPath)."""
    server_tls = ["--tls.server.mode", "enforcing",
                  "--tls.server.certPath", str(certs / "server.pem"),
                  "--tls.server.keyPath", str(certs / "server.key")]  # fmt: skip
    with standalone_namesrv(*server_tls) as ns_port:
        broker = BrokerProcess(
            tmp_path / "store",
            extra={"namesrvAddr": f"127.0.0.1:{ns_port}", "namesrvListenPort": "0",
                   "tls.enable": "true", "tls.client.authServer": "true",
                   "tls.client.trustCertPath": str(certs / "ca.pem")},
        ).start()  # fmt: skip
        ns = await connect("127.0.0.1", ns_port, tls=client_context(str(certs / "ca.pem")))
        try:
            await registered(ns, broker)
        finally:
            await ns.aclose()
            assert broker.stop() == 0
