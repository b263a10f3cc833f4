"""Shared fixtures: real stores on real files in a temporary directory, with KiB-sized files."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import uvloop

from rmqpy.config.logging_setup import configure_logging
from rmqpy.config.store_config import FlushDiskType, MessageStoreConfig
from rmqpy.store.message_store import MessageStore

# Stores in this process log as the broker's do: tracebacks formatted as text. structlog's
# unconfigured default renders every frame's locals, and walking a store's deque while its
# writer threads append to it raised inside the dispatch thread's log call.
configure_logging()

# Real store files written by Java RocketMQ 4.x and rocketmq-rust, kept in the repository
# (provenance in tests/fixtures/PROVENANCE.md), so a bare clone has
# them; RMQPY_FIXTURES points elsewhere.
FIXTURES = Path(
    os.environ.get("RMQPY_FIXTURES", Path(__file__).resolve().parent / "fixtures")
).resolve()


@contextlib.contextmanager
def small_file_system(mnt: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `mnt` for the block (skips the test where it cannot be
    mounted: not root, or no mount in this container)."""
    mnt.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def small_config(root: Path, **changes: Any) -> MessageStoreConfig:
    """A store config with files small enough that tests roll them often."""
    base: dict[str, Any] = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commitlog": 16 * 1024,
        "mapped_file_size_consume_queue": 20 * 64,
        "max_hash_slot_num": 64,
        "max_index_num": 256,
        "flush_interval_commitlog_ms": 50,
        "flush_interval_consume_queue_ms": 50,
        "clean_resource_interval_ms": 3_600_000,
    }
    base.update(changes)
    return MessageStoreConfig(**base)


@pytest.fixture(params=[FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH], ids=["async", "sync"])
def flush_type(request: pytest.FixtureRequest) -> FlushDiskType:
    mode: FlushDiskType = request.param
    return mode


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """Start a store under tmp_path/store (same directory each call); closes what is open."""
    opened: list[MessageStore] = []

    def _open(**changes: Any) -> MessageStore:
        store = MessageStore(small_config(tmp_path / "store", **changes))
        store.start()
        opened.append(store)
        return store

    yield _open
    for store in opened:
        if store.running:
            store.shutdown()


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Async tests run on plain asyncio and on uvloop (what the broker uses). Where the test's
    loop is incidental they run on uvloop only: the process-level tests, whose broker is a
    process of its own, and the pure-Python rerun, which the compiled run already covers on
    both loops."""
    if "integration" in item.path.parts or os.environ.get("RMQPY_PURE_PYTHON"):
        return {"uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
