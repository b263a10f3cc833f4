"""Durable file primitives: fsync a directory, write a small file atomically, preallocate.

Metadata files are written tmp -> fsync -> rename -> fsync(dir), the pattern nats-server's
filestore uses, so a crash leaves either the old or the new content, never a torn mix.
"""

from __future__ import annotations

import errno
import mmap
import os


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def preallocate(fd: int, size: int) -> None:
    """Reserve `size` zeroed bytes so later writes cannot hit ENOSPC (sparse where unsupported)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        os.ftruncate(fd, size)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def map_read_only(path: str | os.PathLike[str]) -> memoryview:
    """The whole file mapped read-only (a commitlog file is up to 1 GiB; nothing is copied)."""
    size = os.stat(path).st_size
    if size == 0:
        return memoryview(b"")
    with open(path, "rb") as fh:
        return memoryview(mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ))


def unwritable(paths: list[str]) -> list[str]:
    """Why files could not be created in these directories: a read-only filesystem, or
    permissions. Missing directories are skipped (the store creates them when needed)."""
    problems: list[str] = []
    for path in paths:
        try:
            read_only = os.statvfs(path).f_flag & os.ST_RDONLY
        except FileNotFoundError:
            continue
        if read_only:
            problems.append(f"{path} is on a read-only filesystem")
        elif not os.access(path, os.W_OK | os.X_OK):
            problems.append(f"{path} is not writable")
    return problems


def atomic_write(path: str, data: bytes) -> None:
    """Replace `path` with `data`: tmp file, fsync, rename over, fsync the directory."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def create_preallocated(path: str, size: int) -> int:
    """Create `path` at its full size and return an O_RDWR fd. The file is built under a
    `.tmp` name and renamed into place, so a crash mid-creation never leaves a short file
    where a store file is expected (loaders delete stray `.tmp` files)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        preallocate(fd, size)
        if os.path.exists(path):
            raise FileExistsError(errno.EEXIST, "store file exists already", path)
        os.rename(tmp, path)
        fsync_dir(os.path.dirname(os.path.abspath(path)))
    except BaseException:
        os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return fd


def remove_stray_tmp_files(directory: str) -> list[str]:
    """Delete `*.tmp` leftovers of a creation a crash interrupted; returns their names."""
    if not os.path.isdir(directory):
        return []
    stray = [n for n in os.listdir(directory) if n.endswith(".tmp")]
    for name in stray:
        os.unlink(os.path.join(directory, name))
    return stray
