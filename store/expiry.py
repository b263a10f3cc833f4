"""Expiry: delete old commitlog files, then the consume-queue and index files that only point
at deleted data (RocketMQ `CleanCommitLogService` / `CleanConsumeQueueService`).

A commitlog file (never the last one, nor one dispatch has not finished with, nor one that
holds a delayed message not yet delivered) is deleted once its mtime is older than
`fileReservedTime`, at a `deleteWhen` hour or at once when the disk is fuller than
`diskMaxUsedSpaceRatio`. Past `diskSpaceWarningLevelRatio` the store refuses puts until
space returns. Only with `cleanFileForciblyEnable` (off; RocketMQ's default is on) do the
oldest files go past `diskSpaceCleanForciblyRatio` before they expire, or while they hold
delayed messages, each logged as lost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from rmqpy.config.store_config import MessageStoreConfig
from rmqpy.store.commitlog import CommitLog
from rmqpy.store.consume_queue_store import ConsumeQueueStore
from rmqpy.store.flush import ServiceThread
from rmqpy.store.index_file import IndexService
from rmqpy.store.mapped_file import MappedFile

log = structlog.get_logger(__name__)


def disk_used_ratio(path: str) -> float:
    """How full the file system under `path` is, in percent, as `df` reports it: blocks in
    use against the blocks in use plus those this process may still write. Blocks reserved
    for root count as neither, so a large reservation is not taken for data (used/total
    counted them as used, and reported 80% where df said 42%), and 100% is exactly when a
    write would fail with ENOSPC."""
    st = os.statvfs(path)
    return used_percent(st.f_blocks, st.f_bfree, st.f_bavail)


def used_percent(blocks: int, free: int, available: int) -> float:
    """df's Use%: used / (used + available), used = blocks - free (`statvfs` fields)."""
    used = blocks - free
    room = used + available
    return 100.0 * used / room if room > 0 else 0.0


@dataclass(frozen=True, slots=True)
class ExpiryRound:
    commitlog_files_deleted: int
    consume_queue_files_deleted: int
    index_files_deleted: int


class ExpiryService(ServiceThread):
    name = "expiry"

    def __init__(
        self,
        config: MessageStoreConfig,
        commitlog: CommitLog,
        consume_queues: ConsumeQueueStore,
        index: IndexService | None,
        clock_s: Callable[[], float] = time.time,
        disk_ratio: Callable[[str], float] = disk_used_ratio,
        pending_floor: Callable[[], int | None] = lambda: None,
    ) -> None:
        super().__init__()
        self.pending_floor = pending_floor  # oldest delayed message still waiting
        self.config = config
        self.commitlog = commitlog
        self.consume_queues = consume_queues
        self.index = index
        self.clock_s = clock_s
        self.disk_ratio = disk_ratio
        self.disk_full = False
        self.last_ratio = 0.0
        self._manual_deletes = 0

    def run_once(self) -> None:
        self._stopped.wait(self.config.clean_resource_interval_ms / 1000)
        if not self._stopped.is_set():
            self.clean()

    def delete_expired_now(self) -> None:
        """Delete expired files on the next round regardless of the hour (admin request)."""
        self._manual_deletes += 1

    def is_delete_hour(self) -> bool:
        hour = time.localtime(self.clock_s()).tm_hour
        return any(int(h) == hour for h in self.config.delete_when.split(";"))

    def refusal(self) -> str | None:
        """Why puts are refused (disk past the warning level), for CommitLog.writable_check."""
        if self.disk_full:
            return (
                f"disk usage is over diskSpaceWarningLevelRatio "
                f"({self.config.disk_space_warning_level_ratio}%): puts are refused"
            )
        return None

    def clean(self) -> ExpiryRound:
        cfg = self.config
        ratio = self.disk_ratio(cfg.store_path_root_dir)
        full = ratio > cfg.disk_space_warning_level_ratio
        if full and not self.disk_full:
            log.error("disk past diskSpaceWarningLevelRatio: puts are refused until space "
                      "returns", ratio=round(ratio, 1),
                      warning_level=cfg.disk_space_warning_level_ratio)  # fmt: skip
        elif self.disk_full and not full:
            log.warning("disk back under diskSpaceWarningLevelRatio: puts are taken again",
                        ratio=round(ratio, 1))  # fmt: skip
        self.disk_full = full
        self.last_ratio = ratio
        if not full:
            self.commitlog.retry_file_creation()
        space_to_delete = ratio > cfg.disk_max_used_space_ratio
        # Deleting files not yet expired loses acknowledged messages: only when asked for.
        clean_at_once = (
            cfg.clean_file_forcibly_enable and ratio > cfg.disk_space_clean_forcibly_ratio
        )
        manual = self._manual_deletes > 0
        deleted = 0
        if self.is_delete_hour() or space_to_delete or manual:
            if manual:
                self._manual_deletes -= 1
            deleted = self.delete_commitlog_files(clean_at_once)
        commitlog_min = self.commitlog.min_offset()
        cq_deleted = self.consume_queues.delete_expired_files(commitlog_min)
        index_deleted = self.index.delete_expired_files(commitlog_min) if self.index else 0
        if deleted or cq_deleted or index_deleted:
            log.info(
                "expired files deleted",
                commitlog=deleted,
                consume_queue=cq_deleted,
                index=index_deleted,
                disk_ratio=round(ratio, 1),
            )
        return ExpiryRound(deleted, cq_deleted, index_deleted)

    def delete_commitlog_files(self, clean_at_once: bool) -> int:
        reserved_s = self.config.file_reserved_time_hours * 3600
        now = self.clock_s()
        doomed: list[MappedFile] = []
        dispatched = self.commitlog.dispatched_offset
        waiting = self.pending_floor()
        for mapped in self.commitlog.queue.files[:-1]:
            if len(doomed) >= self.config.delete_files_batch_max:
                break
            if mapped.end_offset > dispatched:
                break  # not all in the consume queues yet: its messages would never be served
            if waiting is not None and mapped.end_offset > waiting:
                if not clean_at_once:
                    break  # holds a delayed message not yet due
                log.error("disk nearly full: deleting a file that holds delayed messages "
                          "not yet due; they are lost", file=mapped.path)  # fmt: skip
            if now - mapped.mtime() >= reserved_s:
                doomed.append(mapped)
            elif clean_at_once:
                log.error("cleanFileForciblyEnable: deleting a commitlog file before its "
                          "fileReservedTime; the messages in it are lost", file=mapped.path,
                          disk_ratio=round(self.last_ratio, 1))  # fmt: skip
                doomed.append(mapped)
            else:
                break  # files are in age order: the rest are younger
        if doomed:
            self.commitlog.queue.delete_files(doomed)
        return len(doomed)
