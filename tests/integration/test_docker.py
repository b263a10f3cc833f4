"""The Docker deployment, without a Docker engine: the Dockerfile passes hadolint, the compose
file and Prometheus config agree with it, and the image's exact ENTRYPOINT, run here with the
image's environment against a temporary store, starts, passes its own HEALTHCHECK, serves a
producer and a consumer, and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from rmqpy.bench.processes import free_port, wait_for_port
from rmqpy.broker.acl import PUB, SUB, parse_rules, permitted
from rmqpy.client.consumer import ConsumeFrom
from rmqpy.client.message import Message
from rmqpy.client.producer import Producer
from rmqpy.client.pull_consumer import PullConsumer
from rmqpy.config.broker_config import load_settings
from tests.sdk.conftest import drain

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
BIN = Path(sys.executable).parent  # the venv's bin: the image's /opt/rmqpy/bin


@dataclass
class Image:
    """What the Dockerfile's final stage sets up."""

    entrypoint: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    copies: dict[str, Path] = field(default_factory=dict)  # path in the image -> source here
    exposed: set[int] = field(default_factory=set)
    volumes: list[str] = field(default_factory=list)
    user: str = "root"
    stop_signal: str = "SIGTERM"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        word, _, rest = (pending + line).partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def final_stage() -> Image:
    steps = instructions((DOCKER / "Dockerfile").read_text())
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    image = Image()
    for word, rest in steps[last_from + 1 :]:
        if word == "ENTRYPOINT":
            image.entrypoint = json.loads(rest)
        elif word == "HEALTHCHECK":
            image.healthcheck = json.loads(rest.split(" CMD ", 1)[1])
        elif word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                image.env[key] = value
        elif word == "COPY" and "--from=" not in rest:
            *_, src, dst = rest.split()
            image.copies[dst] = ROOT / src
        elif word == "EXPOSE":
            image.exposed |= {int(p) for p in rest.split()}
        elif word == "VOLUME":
            image.volumes += json.loads(rest)
        elif word == "USER":
            image.user = rest
        elif word == "STOPSIGNAL":
            image.stop_signal = rest
    return image


def test_the_dockerfile_passes_hadolint() -> None:
    proc = subprocess.run(
        [str(BIN / "hadolint"), str(DOCKER / "Dockerfile")],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_the_image_runs_as_non_root_with_the_store_on_a_volume() -> None:
    image = final_stage()
    assert image.user.split(":")[0] not in ("root", "0")
    assert image.volumes == [image.env["RMQPY_STORE_PATH_ROOT_DIR"]] == ["/home/rmqpy/store"]
    assert {9876, 10911, 10912, 5557} <= image.exposed
    assert image.stop_signal == "SIGTERM"
    assert image.entrypoint[:2] == ["rmqpy", "broker"]
    assert image.healthcheck[:2] == ["rmqpy", "health"]


def test_the_baked_in_broker_conf_has_only_known_keys() -> None:
    conf = final_stage().copies["/home/rmqpy/conf/broker.conf"]
    _, unknown = load_settings(conf.read_text(), environ={})
    assert unknown == {}


def test_the_image_listens_on_every_interface_as_rocketmq_does() -> None:
    conf = final_stage().copies["/home/rmqpy/conf/broker.conf"]
    settings, _ = load_settings(conf.read_text(), environ={})
    assert settings.remoting.bind_address == "0.0.0.0"
    assert not settings.broker.namesrv_bind_address and not settings.broker.metrics_bind_address


def test_compose_runs_the_broker_with_acl_and_its_clients_sign() -> None:
    """The compose file turns plain ACL on with the ACL file it mounts, and each demo client
    signs with an account of that file allowed what the client does."""
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    broker = compose["services"]["broker"]
    env = broker["environment"]
    settings, unknown = load_settings("", environ=env)
    assert settings.broker.acl_enable and unknown == {}
    mounts = {v.split(":")[1]: v.split(":")[0] for v in broker["volumes"]}
    rules = parse_rules((DOCKER / mounts[settings.broker.plain_acl_file]).read_text())
    wants = {
        "producer": {"DemoOrders": PUB},
        "consumer": {"DemoOrders": SUB, "%RETRY%demo-consumers": SUB},
    }
    console = compose["services"]["console"]
    assert rules.accounts[console["environment"]["RMQPY_ACCESS_KEY"]].admin
    assert console["ports"] == ["127.0.0.1:8080:8080"]  # no login: this host only
    for name, needs in wants.items():
        client_env = compose["services"][name]["environment"]
        account = rules.accounts[client_env["RMQPY_ACCESS_KEY"]]
        assert account.secret_key == client_env["RMQPY_SECRET_KEY"]
        assert account.perms is not None
        assert all(permitted(perm, account.perms[resource]) for resource, perm in needs.items())


def test_compose_and_prometheus_agree_with_the_image() -> None:
    image = final_stage()
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    broker = compose["services"]["broker"]
    assert (ROOT / "docker" / broker["build"]["context"] / broker["build"]["dockerfile"]).samefile(
        DOCKER / "Dockerfile"
    )
    mounts = {v.split(":")[1]: v.split(":")[0] for v in broker["volumes"]}
    assert image.volumes[0] in mounts
    assert (DOCKER / mounts["/home/rmqpy/conf/broker.conf"]).samefile(
        image.copies["/home/rmqpy/conf/broker.conf"]
    )
    published = {int(p.split(":")[1]) for p in broker["ports"]}
    assert {9876, 10911, 5557} <= published <= image.exposed
    ip = broker["networks"]["rmqpy"]["ipv4_address"]
    assert broker["environment"]["RMQPY_BROKER_IP1"] == ip
    for name in ("producer", "consumer", "console"):
        service = compose["services"][name]
        assert any(f"{ip}:9876" in part for part in service["entrypoint"])
        assert service["depends_on"]["broker"]["condition"] == "service_healthy"
    prometheus = compose["services"]["prometheus"]
    config_path = next(v.split(":")[0] for v in prometheus["volumes"] if "prometheus.yml" in v)
    scrape = yaml.safe_load((DOCKER / config_path).read_text())
    [job] = scrape["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["broker:5557"]


async def test_the_entrypoint_starts_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    image = final_stage()
    ports = {name: free_port() for name in ("LISTEN", "NAMESRV_LISTEN", "METRICS")}
    env = {
        **os.environ,
        **image.env,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "RMQPY_STORE_PATH_ROOT_DIR": str(tmp_path / "store"),
        # What `docker run -e` would set here: free ports, a loopback address, small files.
        **{f"RMQPY_{name}_PORT": str(port) for name, port in ports.items()},
        "RMQPY_FAST_LISTEN_PORT": "0",
        "RMQPY_BROKER_IP1": "127.0.0.1",
        "RMQPY_MAPPED_FILE_SIZE_COMMITLOG": str(256 * 1024),
        "RMQPY_MAPPED_FILE_SIZE_CONSUME_QUEUE": str(20 * 1000),
        "RMQPY_MAX_HASH_SLOT_NUM": "1000",
        "RMQPY_MAX_INDEX_NUM": "4000",
    }
    # The same command line, with the image's files where this checkout keeps them.
    argv = [str(image.copies.get(arg, arg)) for arg in image.entrypoint]
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(ports["LISTEN"], proc)
        deadline = time.monotonic() + 30
        health = [str(image.copies.get(arg, arg)) for arg in image.healthcheck]
        while (
            check := subprocess.run(health, env=env, capture_output=True, check=False)
        ).returncode:
            assert time.monotonic() < deadline, f"the HEALTHCHECK never passed: {check.stderr!r}"
            time.sleep(0.2)

        namesrv = f"127.0.0.1:{ports['NAMESRV_LISTEN']}"
        async with Producer("docker-smoke", namesrv) as producer:
            await producer.send(Message("DockerSmoke", b"hello from the entrypoint"))
        consumer = PullConsumer("docker-smoke", namesrv, consume_from=ConsumeFrom.FIRST)
        consumer.subscribe("DockerSmoke")
        async with consumer:
            assert await drain(consumer, 1) == [b"hello from the entrypoint"]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0
    text = log_path.read_text()
    assert '"event": "broker stopped"' in text
    assert '"metrics_port": ' + str(ports["METRICS"]) in text
    assert not (tmp_path / "store" / "abort").exists()
