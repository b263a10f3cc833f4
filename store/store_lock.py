"""The `lock` and `abort` files of a store directory.

`lock` holds an exclusive POSIX record lock on byte 0 (what Java's `FileChannel.tryLock(0, 1,
false)` takes, so a Java broker and rmqpy also exclude each other) and contains `lock`. POSIX
locks do not exclude the same process, so a registry of held paths refuses a second open in
this process too. `abort` exists while the store runs: found at startup, it means the last
exit was not clean and recovery must take the abnormal path.
"""

from __future__ import annotations

import fcntl
import os
import threading

from rmqpy.store.fileio import fsync_dir

_held: set[str] = set()
_held_lock = threading.Lock()


class StoreLockedError(RuntimeError):
    """Another process (or another store object here) already uses this store directory."""


class StoreLock:
    def __init__(self, root_dir: str) -> None:
        self.path = os.path.realpath(os.path.join(root_dir, "lock"))
        self.fd: int | None = None

    def acquire(self) -> None:
        with _held_lock:
            if self.path in _held:
                raise StoreLockedError(
                    f"store {os.path.dirname(self.path)} is already open in this process"
                )
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError as exc:
                os.close(fd)
                raise StoreLockedError(
                    f"store {os.path.dirname(self.path)} is locked by another process "
                    f"(lock file {self.path}): {exc.strerror}"
                ) from exc
            os.pwrite(fd, b"lock", 0)
            _held.add(self.path)
            self.fd = fd

    def release(self) -> None:
        if self.fd is None:
            return
        with _held_lock:
            os.close(self.fd)  # closing drops the POSIX lock
            self.fd = None
            _held.discard(self.path)


def abort_path(root_dir: str) -> str:
    return os.path.join(root_dir, "abort")


def last_exit_was_clean(root_dir: str) -> bool:
    return not os.path.exists(abort_path(root_dir))


def create_abort_file(root_dir: str) -> None:
    fd = os.open(abort_path(root_dir), os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    fsync_dir(root_dir)


def remove_abort_file(root_dir: str) -> None:
    if os.path.exists(abort_path(root_dir)):
        os.unlink(abort_path(root_dir))
        fsync_dir(root_dir)
