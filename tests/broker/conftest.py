"""A real broker in this process on 127.0.0.1 port 0 (and its name server), with a KiB-sized
store, and clients connected to it over real sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from rmqpy.broker.controller import BrokerController
from rmqpy.config.broker_config import load_settings
from rmqpy.remoting.client import connect
from rmqpy.remoting.protocol import Connection, RequestHandler
from tests.integration.daemon import SMALL_STORE_FLAGS

BrokerFactory = Callable[..., Awaitable[BrokerController]]


@pytest.fixture
async def start_broker(tmp_path: Path) -> AsyncIterator[BrokerFactory]:
    started: list[BrokerController] = []

    async def _start(**flags: Any) -> BrokerController:
        overrides = {
            **SMALL_STORE_FLAGS,
            "storePathRootDir": str(tmp_path / "store"),
            "listenPort": "0",
            "namesrvListenPort": "0",
            **{k: str(v) for k, v in flags.items()},
        }
        settings, _ = load_settings("", environ={}, overrides=overrides)
        controller = BrokerController(settings)
        await controller.start()
        started.append(controller)
        return controller

    yield _start
    for controller in started:
        if not controller.stopped.is_set():
            await controller.shutdown()


@pytest.fixture
async def broker(start_broker: BrokerFactory) -> BrokerController:
    return await start_broker()


@pytest.fixture
async def connect_to(
    broker: BrokerController,
) -> AsyncIterator[Callable[..., Awaitable[Connection]]]:
    conns: list[Connection] = []

    async def _connect(
        port: int | None = None, on_request: RequestHandler | None = None
    ) -> Connection:
        if on_request is None:
            conn = await connect("127.0.0.1", port or broker.port)
        else:
            conn = await connect("127.0.0.1", port or broker.port, on_request)
        conns.append(conn)
        return conn

    yield _connect
    for conn in conns:
        await conn.aclose()


@pytest.fixture
async def client(connect_to: Callable[..., Awaitable[Connection]]) -> Connection:
    return await connect_to()
