"""One real `python -m rmqpy.broker` process per test module (KiB-sized store, free ports); each
test uses its own topics and groups."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from rmqpy.client.admin import Admin
from rmqpy.client.producer import Producer
from rmqpy.client.pull_consumer import PullConsumer
from tests.integration.daemon import BrokerProcess

_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("sdk") / "store").start()
    yield process
    assert process.stop() == 0


@pytest.fixture
def namesrv(broker: BrokerProcess) -> str:
    return broker.namesrv


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name of this test's own."""
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", request.node.name)[:60]
    return f"{name}-{next(_names)}"


@pytest.fixture
async def admin(namesrv: str) -> AsyncIterator[Admin]:
    async with Admin(namesrv) as a:
        yield a


@pytest.fixture
async def producer(namesrv: str) -> AsyncIterator[Producer]:
    async with Producer("sdk-producer", namesrv) as p:
        yield p


async def drain(consumer: PullConsumer, count: int, timeout_s: float = 15.0) -> list[bytes]:
    """Poll until `count` messages came (or the timeout); their bodies in arrival order."""
    bodies: list[bytes] = []
    async with asyncio.timeout(timeout_s):
        while len(bodies) < count:
            bodies += [m.body for m in await consumer.poll(0.5)]
    return bodies


async def until(predicate: Callable[[], bool], timeout_s: float = 15.0, what: str = "") -> None:
    """Wait until `predicate()` is true."""
    try:
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what or predicate}") from None
