"""A real broker process and a real `rmqpy console` process in front of it, per module."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqpy.bench.processes import free_port
from tests.integration.daemon import BrokerProcess

RMQPY = str(Path(sys.executable).parent / "rmqpy")


def rmqpy(*args: str, namesrv: str) -> str:
    done = subprocess.run(
        [RMQPY, *args], env={**os.environ, "RMQPY_NAMESRV": namesrv},
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("console") / "store").start()
    yield process
    assert process.stop() == 0


@pytest.fixture(scope="module")
def console(broker: BrokerProcess) -> Iterator[str]:
    """`rmqpy console` as an operator starts it, sampling every second."""
    port = free_port()
    proc = subprocess.Popen(
        [RMQPY, "console", "--port", str(port), "--interval", "1", "--namesrv", broker.namesrv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"the console did not start: {proc.communicate()}") from None
            time.sleep(0.1)
    yield url
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err.decode()
