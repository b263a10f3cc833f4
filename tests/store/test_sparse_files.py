"""Commitlog files are sparse, as RocketMQ's are unless `warmMapedFileEnable`: a fresh store
takes disk for what it holds (plus a reserve ahead of the writer), not for whole files. A
full disk refuses the puts that need more room, before writing anything, and takes them
again once there is room."""

from __future__ import annotations

import os
from pathlib import Path

from rmqpy.store.layout import PutMessageStatus
from rmqpy.store.message import Message, decode_record
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config, small_file_system

MiB = 1024 * 1024
# Warming reads a new file's pages into the page cache (no blocks on a disk's file system),
# but on tmpfs, where the page cache is the storage, reading a hole allocates it.
NO_PAGE_CACHE_WARMING = {"warm_commitlog_files": False}


def allocated(directory: Path) -> int:
    """Bytes of disk the directory's files take (their blocks, not their sizes)."""
    return sum(f.stat().st_blocks * 512 for f in directory.iterdir() if f.is_file())


def test_a_fresh_store_takes_disk_for_what_it_holds(tmp_path: Path) -> None:
    for warm in (False, True):
        config = small_config(tmp_path / f"warm-{warm}", mapped_file_size_commitlog=4 * MiB,
                              max_hash_slot_num=10_000, max_index_num=100_000,
                              warm_mapped_file_enable=warm, **NO_PAGE_CACHE_WARMING)  # fmt: skip
        store = MessageStore(config)
        store.start()
        try:
            for i in range(10):
                assert store.put_message(Message("Sparse", b"x" * 1024, 0, {"KEYS": f"k{i}"})).ok
            assert store.wait_dispatched(timeout=10)  # and indexed
            commitlog, index = Path(config.commitlog_dir), Path(config.index_dir)
            files = sorted(commitlog.iterdir())
            assert all(f.stat().st_size == 4 * MiB for f in files)  # every file its full size
            [index_file] = index.iterdir()  # 40 B + 10,000 slots + 100,000 entries: 2 MB
            assert index_file.stat().st_size == 40 + 10_000 * 4 + 100_000 * 20
            if warm:
                assert allocated(commitlog) >= 4 * MiB * len(files)
                assert allocated(index) >= index_file.stat().st_size
            else:  # the 1/16 reserved ahead in each file made so far, not 4 MiB each
                assert allocated(commitlog) <= len(files) * (256 * 1024 + 64 * 1024)
                # the header and slots, and 1/16 ahead of the entries written
                assert allocated(index) <= 40_040 + 2_040_040 // 16 + 64 * 1024
            found = store.query_message("Sparse", "k7", 10, 0, 2**62)
            assert len(found.messages) == 1
        finally:
            store.shutdown()


def test_a_full_disk_refuses_puts_until_space_returns(tmp_path: Path) -> None:
    with small_file_system(tmp_path / "fs", "2m") as fs:
        config = small_config(fs / "store", mapped_file_size_commitlog=4 * MiB,
                              preallocate_next_file=False, **NO_PAGE_CACHE_WARMING)  # fmt: skip
        store = MessageStore(config)
        store.start()
        ballast = fs / "ballast"  # all but 100 KiB: less than the next reservation (256 KiB)
        free = os.statvfs(fs).f_bavail * os.statvfs(fs).f_frsize
        ballast.write_bytes(b"\1" * (free - 100 * 1024))
        try:
            acked: list[tuple[int, int]] = []
            refused = None
            for i in range(200):
                result = store.put_message(Message("Full", f"{i:08d}".encode() * 1024, 0))
                if not result.ok:
                    refused = result
                    break
                acked.append((i, result.wrote_offset))
            assert refused is not None, "the file system never filled"
            assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            assert refused.remark.startswith("disk full") and "No space left" in refused.remark
            assert len(acked) >= 20
            for i, phy in acked:  # all there, intact
                raw = store.look_message_by_offset(phy)
                assert raw is not None and decode_record(raw).body == f"{i:08d}".encode() * 1024
            ballast.unlink()  # room again: puts are taken, offsets carry on
            result = store.put_message(Message("Full", b"after", 0))
            assert result.ok and result.queue_offset == len(acked)
            for i in range(60):  # past several more reservations
                assert store.put_message(Message("Full", b"%d" % i * 4096, 0)).ok
        finally:
            store.shutdown()


def test_a_store_opened_again_asks_the_disk_only_for_what_it_has_not_written(
    tmp_path: Path,
) -> None:
    """After a restart the file's written part is not counted again: a put needs room for
    what comes after it only (here 1.2 MB written, 1.6 MB free)."""
    with small_file_system(tmp_path / "fs", "4m") as fs:
        config = small_config(fs / "store", mapped_file_size_commitlog=2 * MiB,
                              preallocate_next_file=False, **NO_PAGE_CACHE_WARMING)  # fmt: skip
        store = MessageStore(config)
        store.start()
        for i in range(150):
            assert store.put_message(Message("Again", b"%07d" % i * 1170, 0)).ok
        store.shutdown()
        store = MessageStore(config)
        store.start()
        try:
            disk = os.statvfs(fs)
            free = disk.f_bavail * disk.f_frsize
            (fs / "ballast").write_bytes(b"\1" * (free - 1600 * 1024))
            result = store.put_message(Message("Again", b"after a restart", 0))
            assert result.ok, result.remark
        finally:
            store.shutdown()
