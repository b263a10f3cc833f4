"""After a crash the broker re-dispatches only the last seconds of writes: the checkpoint is
written with every thorough consume-queue flush (5 s), not once a minute, so a broker killed
after running for less than a minute no longer re-reads its whole commitlog."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import pytest

from rmqpy.client.message import Message
from rmqpy.client.producer import Producer
from rmqpy.store.message_id import decode_offset_msg_id
from tests.integration.daemon import BrokerProcess

pytestmark = pytest.mark.slow


async def send_for(broker: BrokerProcess, seconds: float) -> list[tuple[float, int]]:
    """(when, commitlog offset) of each message sent, for `seconds`."""
    sent: list[tuple[float, int]] = []
    body = b"x" * 1024
    async with Producer("crash-window", broker.namesrv) as producer:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            result = await producer.send_batch([Message("Window", body)] * 16)
            _host, offset = decode_offset_msg_id(result.offset_msg_id.split(",")[0])
            sent.append((time.monotonic(), offset))
            await asyncio.sleep(0.002)
    return sent


def test_recovery_after_a_crash_re_reads_seconds_not_the_whole_commitlog(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store").start()
    sent = asyncio.run(send_for(broker, 12.0))
    killed_at = time.monotonic()
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
    broker = BrokerProcess(tmp_path / "store").start()
    assert broker.stop() == 0
    started = [
        json.loads(line)
        for line in broker.log_text().splitlines()
        if line.startswith("{") and '"store started"' in line
    ]
    report = started[-1]
    assert report["abnormal_exit"] is True
    reput_from = report["reput_from_offset"]
    assert reput_from > 0, "the whole commitlog was dispatched again"
    # The first message at or after where dispatch started again was sent at most the
    # thorough interval, the 3 s recovery margin and a file's worth of writes before the kill.
    sent_at = next(when for when, offset in sent if offset >= reput_from)
    assert killed_at - sent_at < 10.0, f"re-read from {killed_at - sent_at:.1f} s before the kill"
