"""The 4096-byte checkpoint file (RocketMQ `StoreCheckpoint`).

``i64 physicMsgTimestamp@0 | i64 logicsMsgTimestamp@8 | i64 indexMsgTimestamp@16 |
i64 masterFlushedOffset@24 | i64 confirmPhyOffset@32``, the rest zero. physic = store time of
the newest flushed commitlog data, logics = of the newest flushed consume-queue entry,
index = end time of the newest full (flushed) index file. Abnormal recovery starts from the
last commitlog file older than min(physic, logics) - 3 s.
"""

from __future__ import annotations

import os
import threading

from rmqpy.store.fileio import fsync_dir, preallocate, pwrite_all
from rmqpy.store.layout import CHECKPOINT, CHECKPOINT_FILE_SIZE


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        exists = os.path.exists(path)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        if not exists:
            preallocate(self.fd, CHECKPOINT_FILE_SIZE)
            fsync_dir(os.path.dirname(os.path.abspath(path)))
        data = os.pread(self.fd, CHECKPOINT.size, 0)
        if len(data) < CHECKPOINT.size:
            data = data.ljust(CHECKPOINT.size, b"\0")
        (
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        ) = CHECKPOINT.unpack(data)

    def encode(self) -> bytes:
        head = CHECKPOINT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )
        return head.ljust(CHECKPOINT_FILE_SIZE, b"\0")

    def min_timestamp(self) -> int:
        """min(physic, logics) - 3 s, the safe point abnormal recovery starts from."""
        return int(max(min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000, 0))

    def flush(self) -> None:
        with self._lock:
            pwrite_all(self.fd, self.encode(), 0)
            os.fdatasync(self.fd)

    def close(self) -> None:
        os.close(self.fd)
