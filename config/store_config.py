"""Settings of the message store, mirroring RocketMQ's `MessageStoreConfig`.

Every setting is declared once here with its default and help text (``setting(...)``); the
broker.conf loader (`config.properties`) maps RocketMQ's camelCase keys onto these fields, so
`mappedFileSizeCommitLog=4096` in a broker.conf sets `mapped_file_size_commitlog`.
Defaults are RocketMQ 4.9's.
"""

from __future__ import annotations

import os
import re
from dataclasses import Field, dataclass, field
from enum import Enum
from typing import Any

_DELAY_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY_LEVEL = re.compile(r"^(\d+)(ms|s|m|h|d)$")


def parse_delay_levels(text: str) -> list[int]:
    """Each level's delay in ms, from `messageDelayLevel` (RocketMQ's units s, m, h, d, and
    ms, ours, for tests); raises ValueError naming the part it cannot read."""
    levels = []
    for part in text.split():
        m = _DELAY_LEVEL.match(part)
        if m is None:
            raise ValueError(f"messageDelayLevel: {part!r} is not a number with ms, s, m, h or d")
        levels.append(int(m.group(1)) * _DELAY_UNITS_MS[m.group(2)])
    if not levels:
        raise ValueError("messageDelayLevel: no levels")
    return levels


class FlushDiskType(Enum):
    """RocketMQ's FlushDiskType: when a put is acknowledged relative to fsync."""

    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


def setting(default: Any, help: str, key: str | None = None) -> Any:
    """A dataclass field with its help text kept beside the default, and its broker.conf
    key where RocketMQ's casing is not the mechanical camelCase of the field name."""
    return field(default=default, metadata={"help": help, "key": key})


def camel_name(snake: str) -> str:
    """`mapped_file_size_consume_queue` -> `mappedFileSizeConsumeQueue`."""
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def java_key(f: Field[Any]) -> str:
    """A setting's broker.conf key."""
    key: str | None = f.metadata.get("key")
    return key or camel_name(f.name)


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"  # RocketMQ's


@dataclass(frozen=True, slots=True)
class MessageStoreConfig:
    """RocketMQ `MessageStoreConfig`: sizes, flush policy, cleanup and recovery settings."""

    store_path_root_dir: str = setting(
        os.path.join(".", "data", "store"),
        "Root of the store: commitlog/, consumequeue/, index/, checkpoint, abort, lock, config/.",
        key="storePathRootDir",
    )
    mapped_file_size_commitlog: int = setting(
        1024 * 1024 * 1024,
        "Size of each commitlog file in bytes (RocketMQ: 1 GiB).",
        key="mappedFileSizeCommitLog",
    )
    mapped_file_size_consume_queue: int = setting(
        300_000 * 20, "Size of each consume-queue file in bytes; a multiple of 20."
    )
    max_message_size: int = setting(4 * 1024 * 1024, "Largest message body accepted, in bytes.")
    flush_disk_type: FlushDiskType = setting(
        FlushDiskType.ASYNC_FLUSH,
        "SYNC_FLUSH acknowledges a put after fsync (group commit); ASYNC_FLUSH after the write.",
    )
    sync_flush_timeout_ms: int = setting(
        5000,
        "How long a SYNC_FLUSH put waits for its fsync before FLUSH_DISK_TIMEOUT.",
        key="syncFlushTimeout",
    )
    flush_interval_commitlog_ms: int = setting(
        500, "ASYNC_FLUSH: how often the commitlog flushes.", key="flushIntervalCommitLog"
    )
    flush_commitlog_least_pages: int = setting(
        4,
        "ASYNC_FLUSH: flush only when at least this many 4 KiB pages are dirty.",
        key="flushCommitLogLeastPages",
    )
    flush_commitlog_thorough_interval_ms: int = setting(
        10_000,
        "ASYNC_FLUSH: flush whatever is dirty at least this often.",
        key="flushCommitLogThoroughInterval",
    )
    commitlog_writeback_kb: int = setting(
        1024,
        "ASYNC_FLUSH: between flushes, start writing the commitlog to the disk every time "
        "this many KiB more are written (sync_file_range, Linux; nothing waits for it), so "
        "each flush finds little left to do. A flush of everything written in its interval "
        "held a core in the kernel for milliseconds at a time, and on a busy machine every "
        "message in flight waited for it. 0: only the flushes write.",
        key="commitLogWritebackKB",
    )
    flush_interval_consume_queue_ms: int = setting(
        1000, "How often consume queues flush.", key="flushIntervalConsumeQueue"
    )
    flush_consume_queue_least_pages: int = setting(2, "Consume-queue dirty pages before a flush.")
    flush_consume_queue_thorough_interval_ms: int = setting(
        5_000,
        "Consume queues: flush everything and write the checkpoint at least this often; a "
        "restart after a crash re-dispatches from about this long before it (RocketMQ: 60000, "
        "a minute of writes re-read).",
        key="flushConsumeQueueThoroughInterval",
    )
    file_reserved_time_hours: float = setting(
        72.0,
        "Commitlog files older than this many hours are deleted (once dispatched, and once the "
        "delayed messages they hold are delivered); fractions allowed (0.25 = 15 minutes).",
        key="fileReservedTime",
    )
    delete_when: str = setting("04", "Hours (';'-separated, 00-23) when expired files are deleted.")
    disk_max_used_space_ratio: int = setting(
        75, "Percent of disk used past which expired files are deleted at once."
    )
    disk_space_clean_forcibly_ratio: int = setting(
        85,
        "Percent of disk used past which, with cleanFileForciblyEnable, the oldest files are "
        "deleted even if not expired.",
    )
    clean_file_forcibly_enable: bool = setting(
        False,
        "LOSES DATA: past diskSpaceCleanForciblyRatio, delete the oldest commitlog files before "
        "their fileReservedTime, acknowledged messages no consumer has read among them. Off, a "
        "full disk refuses new puts instead (RocketMQ's default is on).",
    )
    disk_space_warning_level_ratio: int = setting(
        90, "Percent of disk used past which puts are refused (SERVICE_NOT_AVAILABLE)."
    )
    clean_resource_interval_ms: int = setting(
        10_000, "How often the expiry service runs.", key="cleanResourceInterval"
    )
    delete_files_batch_max: int = setting(10, "Most commitlog files deleted in one expiry round.")
    check_crc_on_recover: bool = setting(
        True, "Verify body CRCs while recovering the commitlog.", key="checkCRCOnRecover"
    )
    message_index_enable: bool = setting(True, "Build the key index (index/ files).")
    max_hash_slot_num: int = setting(5_000_000, "Hash slots per index file.")
    max_index_num: int = setting(20_000_000, "Entries per index file.")
    max_msgs_num_batch: int = setting(64, "Most results of one query by key.")
    default_query_max_num: int = setting(32, "Results of a query by key when none is asked.")
    max_transfer_bytes_on_message_in_memory: int = setting(
        256 * 1024, "Pull byte limit when the data is hot (in page cache)."
    )
    max_transfer_count_on_message_in_memory: int = setting(32, "Pull count limit for hot data.")
    max_transfer_bytes_on_message_in_disk: int = setting(64 * 1024, "Pull byte limit, cold data.")
    max_transfer_count_on_message_in_disk: int = setting(8, "Pull count limit, cold data.")
    access_message_in_memory_max_ratio: int = setting(
        40,
        "Data within this percent of memory (RAM, or the cgroup's limit when lower, as in "
        "a container) behind the write position counts as hot.",
    )
    store_host: str = setting(
        "127.0.0.1:10911",
        "ip:port written as STOREHOST in every record; the broker sets it to brokerIP1:listenPort.",
    )
    preallocate_next_file: bool = setting(
        True, "Create the next commitlog file in the background before it is needed."
    )
    warm_mapped_file_enable: bool = setting(
        False,
        "Reserve each new commitlog and index file's disk blocks whole when it is created "
        "(RocketMQ's warmMapedFileEnable writes the whole file instead). Off: those files are "
        "sparse, as RocketMQ's are, with blocks reserved in steps ahead of the writer (1/16 of "
        "the file, at most 64 MiB), so a fresh store takes little disk; a put is refused when "
        "the disk has no more room for it beside what consume queues, the index and config "
        "files may still need (it goes through again once there is room), and the index "
        "leaves records unindexed when it cannot grow (logged). Consume-queue files are "
        "always reserved whole, so that every stored message can be dispatched.",
        key="warmMapedFileEnable",
    )
    warm_commitlog_files: bool = setting(
        True,
        "Read commitlog pages into the page cache on a background thread, up to 64 MiB ahead "
        "of the writer (clean pages: nothing is written or locked), so appends do not pay for "
        "allocating them. Off trades publish throughput on machines slow to make new pages "
        "for lower latency tails on small, busy machines.",
        key="warmCommitLogFiles",
    )
    warm_commitlog_min_mb_per_s: int = setting(
        192,
        "With warmCommitLogFiles, warm only while the commitlog is written at least this many "
        "MiB a second (measured over half-second windows; 0: always). A slower writer makes "
        "its own pages at little cost, and warming for it costs latency and CPU: its "
        "page-cache work came with clusters of messages late by up to 20 ms on a small, busy "
        "machine, and a flow of 115,000-150,000 msg/s produced and consumed there fell behind "
        "with it and kept up without.",
        key="warmCommitLogMinMBPerSecond",
    )
    message_delay_level: str = setting(
        DEFAULT_DELAY_LEVELS,
        "Delay of each level a message's DELAY property or a consumer's send-back can ask for, "
        "level 1 first (units s, m, h, d; and ms).",
    )

    def __post_init__(self) -> None:
        if self.mapped_file_size_consume_queue % 20:
            raise ValueError("mappedFileSizeConsumeQueue must be a multiple of 20")
        if self.mapped_file_size_commitlog < 4096:
            raise ValueError("mappedFileSizeCommitLog must be at least 4096 bytes")
        if self.max_message_size <= 0:
            raise ValueError("maxMessageSize must be positive")
        if self.warm_commitlog_min_mb_per_s < 0:
            raise ValueError("warmCommitLogMinMBPerSecond must be 0 or more")
        if self.commitlog_writeback_kb < 0:
            raise ValueError("commitLogWritebackKB must be 0 or more")
        for hour in self.delete_when.split(";"):
            if not hour.strip().isdigit() or not 0 <= int(hour) <= 23:
                raise ValueError(f"deleteWhen: {self.delete_when!r} is not ';'-separated hours")
        parse_delay_levels(self.message_delay_level)

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)

    @property
    def commitlog_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def config_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "config")
