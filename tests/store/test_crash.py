"""SIGKILL a real writer process at random moments; every acknowledged message survives.

SYNC_FLUSH: acknowledged means fsynced. ASYNC_FLUSH: acknowledged means in the page cache,
which a killed process cannot lose either; and what survives of a single writer is a prefix.
Consume queues and the index must agree with the commitlog after each recovery.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rmqpy.config.store_config import FlushDiskType
from rmqpy.store.layout import GetMessageStatus
from rmqpy.store.message import decode_record
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def run_and_kill(root: Path, mode: str, threads: int, tag: str, seconds: float) -> list[str]:
    lines: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-m", "tests.store.crash_writer", str(root), mode, str(threads), tag],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        out = proc.stdout
        reader = threading.Thread(target=lambda: lines.extend(out), daemon=True)
        reader.start()
        time.sleep(seconds)  # the random kill moment is the point, not a synchronisation
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=30)
    return [ln for ln in lines if ln.endswith("\n")]  # a torn last line was never acknowledged


def all_messages(store: MessageStore) -> dict[str, tuple[int, int, bytes]]:
    """key -> (queue, queue offset, body), read through the consume queues."""
    found = {}
    for q in range(4):
        offset = store.get_min_offset_in_queue("Crash", q)
        while True:
            got = store.get_message("Crash", q, offset, 32)
            if got.status is not GetMessageStatus.FOUND:
                break
            for raw in got.messages:
                record = decode_record(raw)
                assert record.queue_id == q
                found[record.keys[0]] = (q, record.queue_offset, record.body)
            offset = got.next_begin_offset
    return found


def check_consistent(store: MessageStore) -> None:
    """Every consume-queue entry points at a record with its queue id and offset."""
    for cq in store.consume_queues:
        for index in range(cq.min_offset_in_queue(), cq.max_offset_in_queue()):
            entry = cq.get_entry(index)
            assert entry is not None
            raw = store.look_message_by_offset(entry[0])
            assert raw is not None and len(raw) == entry[1]
            record = decode_record(raw)
            assert (record.topic, record.queue_id, record.queue_offset) == (
                cq.topic,
                cq.queue_id,
                index,
            )


@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_acknowledged_messages_survive_sigkill(tmp_path: Path, mode: str) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    threads = 4 if mode == "SYNC_FLUSH" else 1
    root = tmp_path / "store"
    acked: dict[str, tuple[int, int]] = {}
    for round_no in range(4):
        tag = f"r{round_no}"
        for line in run_and_kill(root, mode, threads, tag, rng.uniform(0.4, 1.5)):
            t, seq, q, q_off, _phy = line.split()
            acked[f"{tag}-{t}-{seq}"] = (int(q), int(q_off))
        store = MessageStore(small_config(root, flush_disk_type=FlushDiskType[mode]))
        report = store.start()
        try:
            assert report.abnormal
            found = all_messages(store)
            missing = [k for k in acked if k not in found]
            assert not missing, f"round {round_no}: {len(missing)} acknowledged lost: {missing[:5]}"
            for key, where in acked.items():
                assert found[key][:2] == where
                assert found[key][2] == key.encode() * 8
            if mode == "ASYNC_FLUSH":  # one writer: the survivors of a round are a prefix
                seqs = sorted(int(k.split("-")[2]) for k in found if k.startswith(f"{tag}-"))
                assert seqs == list(range(len(seqs)))
            check_consistent(store)
            sample = rng.sample(sorted(acked), min(20, len(acked)))
            for key in sample:
                hits = store.query_message("Crash", key, 4)
                assert [decode_record(m).keys for m in hits.messages] == [[key]]
        finally:
            store.shutdown()
    assert len(acked) > 100
