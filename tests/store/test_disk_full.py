"""A full file system: puts fail with a clear status, stored data stays readable and intact,
and puts work again once space is freed. Uses a real 512 KiB tmpfs (needs root to mount)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqpy.store.config_files import persist_config_file
from rmqpy.store.layout import PutMessageStatus
from rmqpy.store.message import Message, decode_record
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config, small_file_system


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with small_file_system(tmp_path / "small", "512k") as mnt:
        yield mnt


def test_full_disk_refuses_puts_and_damages_nothing(small_fs: Path) -> None:
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"\1" * 128 * 1024)
    config = small_config(small_fs / "store", mapped_file_size_commitlog=32 * 1024)
    store = MessageStore(config)
    store.start()
    acked: list[tuple[int, int]] = []
    failure = None
    for i in range(5000):
        result = store.put_message(Message("Full", f"{i:06d}".encode() * 40, 0, {"KEYS": f"k{i}"}))
        if not result.ok:
            failure = result
            break
        acked.append((i, result.wrote_offset))
    assert failure is not None, "the file system never filled"
    assert failure.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert "No space left on device" in failure.remark
    assert len(acked) > 100
    # Health says why every put fails, whatever the disk ratio reads.
    [failing] = [p for p in store.write_problems() if p.startswith("puts are failing")]
    assert "cannot create a commitlog file" in failing and "No space left" in failing
    # Reads still work and every stored message is intact.
    for i, phy in acked:
        raw = store.look_message_by_offset(phy)
        assert raw is not None and decode_record(raw).body == f"{i:06d}".encode() * 40
    store.shutdown()
    # Restart on the still-full disk: recovery finds everything, reads work.
    store = MessageStore(config)
    report = store.start()
    try:
        assert report.damage is None and report.process_offset > acked[-1][1]
        for i, phy in acked:
            raw = store.look_message_by_offset(phy)
            assert raw is not None and decode_record(raw).body == f"{i:06d}".encode() * 40
        # Still full: refused, either for want of a file or because dispatch is behind.
        refused = store.put_message(Message("Full", b"while full", 0))
        assert refused.status in (
            PutMessageStatus.SERVICE_NOT_AVAILABLE,
            PutMessageStatus.CREATE_MAPPED_FILE_FAILED,
        )
        assert "No space left" in refused.remark or "dispatch has not caught up" in refused.remark
        # A config file that cannot be written leaves no partial copy taking space.
        table = small_fs / "store" / "config" / "big.json"
        with pytest.raises(OSError):
            persist_config_file(str(table), lambda: {"t": "x" * 1024 * 1024})
        assert not list(table.parent.glob("*.tmp"))
        ballast.unlink()  # space comes back: dispatch catches up, puts work, offsets continue
        assert store.wait_dispatched(timeout=30)
        assert store.get_max_offset_in_queue("Full", 0) == len(acked)
        result = store.put_message(Message("Full", b"after", 0))
        assert result.ok and result.queue_offset == len(acked)
        for i in range(40):  # into a new 32 KiB file: creating one works again
            assert store.put_message(Message("Full", b"%d" % i * 400, 0)).ok
        assert not [p for p in store.write_problems() if p.startswith("puts are failing")]
    finally:
        store.shutdown()


def test_health_clears_once_a_file_can_be_created_again_without_a_put(small_fs: Path) -> None:
    """A put that could not create a commitlog file leaves health failing; once space is
    freed the store's periodic space check creates the next file itself, so health clears
    before any producer tries again (a broker waiting for health before taking traffic
    would otherwise never see it clear)."""
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"\1" * 128 * 1024)
    config = small_config(
        small_fs / "store",
        mapped_file_size_commitlog=32 * 1024,
        disk_space_warning_level_ratio=99,  # so the file creation is what fails
    )
    store = MessageStore(config)
    store.start()
    try:
        for i in range(5000):
            result = store.put_message(Message("Full", b"%06d" % i * 40, 0))
            if not result.ok:
                break
        assert result.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
        store.expiry.clean()  # still full: still failing
        assert [p for p in store.write_problems() if p.startswith("puts are failing")]
        ballast.unlink()
        store.expiry.clean()
        assert not [p for p in store.write_problems() if p.startswith("puts are failing")]
        assert store.put_message(Message("Full", b"after" * 2000, 0)).ok
    finally:
        store.shutdown()
