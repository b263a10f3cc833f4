"""A real `python -m rmqpy.broker` process on free ports with a temporary, KiB-sized store, and a
standalone `rmqpy namesrv` for it to register with."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rmqpy.bench.processes import free_port, wait_for_log, wait_for_port
from rmqpy.remoting.protocol import Connection
from tests.broker.rpc import RC, call, json_of

SMALL_STORE_FLAGS = {
    "mappedFileSizeCommitLog": str(256 * 1024),
    "mappedFileSizeConsumeQueue": str(20 * 1000),
    "maxHashSlotNum": "1000",
    "maxIndexNum": "4000",
    "fastListenPort": "0",
    "brokerIP1": "127.0.0.1",
    "metricsPort": "0",  # many brokers run side by side; tests that scrape pick a free port
    "messageDelayLevel": "100ms 200ms 300ms 400ms 500ms",  # retries come back within a second
}


START_ATTEMPTS = 3
START_TIMEOUT_S = 60.0


@dataclass
class BrokerProcess:
    """Ports left at 0 are picked free, and picked again when another process took one
    between the pick and the broker's bind (a client's ephemeral port can be any of them)."""

    store_dir: Path
    port: int = 0
    namesrv_port: int = 0
    extra: dict[str, str] = field(default_factory=dict)
    conf: Path | None = None
    prefix: list[str] = field(default_factory=list)  # e.g. setpriv, to run it with fewer rights
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    picked_ports: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.picked_ports = self.port == 0 and self.namesrv_port == 0
        self.port = self.port or free_port()
        self.namesrv_port = self.namesrv_port or free_port()

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def command(self) -> list[str]:
        flags = {
            **SMALL_STORE_FLAGS,
            "storePathRootDir": str(self.store_dir),
            "listenPort": str(self.port),
            "namesrvListenPort": str(self.namesrv_port),
            **self.extra,
        }
        args = [*self.prefix, sys.executable, "-m", "rmqpy.broker"]
        if self.conf is not None:
            args += ["-c", str(self.conf)]
        for key, value in flags.items():
            args += [f"--{key}", value]
        return args

    def start(self) -> BrokerProcess:
        attempt = 1
        while True:
            try:
                return self._launch()
            except RuntimeError as exc:  # it exited before listening
                text = self.log_text()
                if not (self.picked_ports and "cannot listen" in text) or attempt == START_ATTEMPTS:
                    raise RuntimeError(f"{exc}; its log ends with:\n{text[-3000:]}") from exc
            attempt += 1
            self.port, self.namesrv_port = free_port(), free_port()

    def _launch(self) -> BrokerProcess:
        self.log_path = self.store_dir.parent / f"broker-{self.port}.log"
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env={**os.environ}
        )
        log.close()
        wait_for_port(self.port, self.proc)
        if self.extra.get("namesrvListenPort") != "0":
            wait_for_port(self.namesrv_port, self.proc)
        # The ports accept connections as soon as they are bound, before the store is open
        # and the metrics endpoint serves: ready is when the broker says it started.
        wait_for_log(self.log_path, self.proc, START_TIMEOUT_S)
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout_s)
        return code

    def started_again(self) -> BrokerProcess:
        """A broker on this one's store, ports and settings, started (after this one stopped)."""
        return BrokerProcess(
            self.store_dir, port=self.port, namesrv_port=self.namesrv_port, extra=self.extra
        ).start()

    def kill_if_running(self) -> None:
        """SIGKILL the broker if it still runs: a test's cleanup when a check failed."""
        if self.proc is not None and self.proc.poll() is None:
            self.stop(signal.SIGKILL)

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path else ""


@contextmanager
def standalone_namesrv(*flags: str) -> Iterator[int]:
    """`rmqpy namesrv` on a free port with `flags` (`--key value` settings); its port. It
    must stop cleanly on SIGTERM."""
    port = free_port()
    rmqpy = Path(sys.executable).parent / "rmqpy"
    proc = subprocess.Popen(
        [str(rmqpy), "namesrv", "--port", str(port), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield port
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


async def registered(ns: Connection, broker: BrokerProcess, timeout_s: float = 10.0) -> None:
    """Wait until the name server behind `ns` routes to `broker` (broker-a, id 0)."""
    wanted = {"0": f"127.0.0.1:{broker.port}"}
    async with asyncio.timeout(timeout_s):
        while broker_addrs(json_of(await call(ns, RC.GET_BROKER_CLUSTER_INFO))) != wanted:
            await asyncio.sleep(0.2)


def broker_addrs(cluster: dict[str, object]) -> dict[str, str]:
    """broker-a's addresses in a GET_BROKER_CLUSTER_INFO answer (none: {})."""
    table = cluster.get("brokerAddrTable")
    entry = table.get("broker-a") if isinstance(table, dict) else None
    return dict(entry.get("brokerAddrs", {})) if isinstance(entry, dict) else {}
