"""Durable file primitives: fsync a directory, write a small file atomically, preallocate.

Metadata files are written tmp -> fsync -> rename -> fsync(dir), the pattern nats-server's
filestore uses, so a crash leaves either the old or the new content, never a torn mix.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager

import structlog

log = structlog.get_logger(__name__)


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


_MADV_POPULATE_READ = 22  # Linux 5.14+: fault the pages in as a read would, without reading
_WARM_CHUNK = 1024 * 1024
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long
)  # fmt: skip
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_SYNC_FILE_RANGE_WRITE = 2
_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
_MAP_FAILED = ctypes.c_void_p(-1).value
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)
# cachestat(2), Linux 6.5+: the page-cache state of a file range, without reading it (its
# number is the same on every architecture, as all are from 424 on).
_SYS_CACHESTAT = 451 if os.uname().machine in ("x86_64", "aarch64") else 0
_libc.syscall.restype = ctypes.c_long


class _CachestatRange(ctypes.Structure):
    _fields_ = (("off", ctypes.c_uint64), ("len", ctypes.c_uint64))


class _Cachestat(ctypes.Structure):
    _fields_ = tuple(
        (name, ctypes.c_uint64)
        for name in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")
    )


def _cached_by_cachestat(fd: int, position: int) -> bool | None:
    """Whether the page of `position` is in the page cache, None if cachestat(2) failed."""
    stat = _Cachestat()
    range_ = _CachestatRange(position, 1)
    if _libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(range_), ctypes.byref(stat), 0) != 0:
        return None
    return bool(stat.nr_cache > 0)


def _cachestat_works() -> bool:
    """Whether this kernel answers cachestat(2) (asked once, of a memory file of our own)."""
    if not _SYS_CACHESTAT:
        return False
    fd = os.memfd_create("rmqpy-cachestat")
    try:
        return _cached_by_cachestat(fd, 0) is not None
    finally:
        os.close(fd)


# How `in_page_cache` asks the kernel: "cachestat", "nowait" (a read with RWF_NOWAIT) or
# None (it cannot ask: every page counts as on the disk).
PAGE_CACHE_PROBE = "cachestat" if _cachestat_works() else ("nowait" if _RWF_NOWAIT else None)


def in_page_cache(fd: int, position: int) -> bool:
    """Whether reading the byte at `position` would not wait for the disk, asked without
    reading it: cachestat(2) says whether the kernel caches its page. Where the kernel lacks
    cachestat (before Linux 6.5), a one-byte `preadv` with RWF_NOWAIT, which fails with
    EAGAIN instead of reading from the disk; a miss then starts the kernel's readahead of
    the page, and a disk that answers at once makes the read succeed, having waited for
    it (so too for a file cachestat refuses). False where neither can tell, and for a file
    closed by expiry (EBADF)."""
    if PAGE_CACHE_PROBE == "cachestat":
        cached = _cached_by_cachestat(fd, position)
        if cached is not None or ctypes.get_errno() == errno.EBADF:
            return bool(cached)
    if not _RWF_NOWAIT:
        return False
    try:
        return os.preadv(fd, [bytearray(1)], position, _RWF_NOWAIT) == 1
    except OSError:  # EAGAIN: not cached; EOPNOTSUPP; EBADF: closed by expiry
        return False


def start_writeback(fd: int, offset: int, length: int) -> bool:
    """Start writing the file's dirty pages in [offset, offset + length) to the disk, without
    waiting for them or making anything durable (sync_file_range(2) with
    SYNC_FILE_RANGE_WRITE; the GIL is released meanwhile): a flush after it finds less to
    do. False where the system cannot (no such call, a closed file)."""
    if _sync_file_range is None or length <= 0:
        return False
    return bool(_sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE) == 0)


def warm_page_cache(fd: int, offset: int, length: int) -> None:
    """Bring the file's pages in [offset, offset + length) into the page cache as clean
    pages, so a later `pwrite` there finds them instead of allocating them (a preallocated
    file's fresh pages made a 38 KiB pwrite take twice as long here). Nothing is written,
    dirtied or locked; the kernel may evict the pages again. Slow, and meant for a
    background thread: it releases the GIL throughout (ctypes calls, `os.preadv`).

    MADV_POPULATE_READ on a temporary mapping of the range; where the kernel lacks it
    (before 5.14), reading the range through."""
    start = offset - offset % mmap.PAGESIZE
    size = offset + length - start
    if size > 0 and not _populate(fd, start, size):
        read_through(fd, start, size)


def _populate(fd: int, start: int, size: int) -> bool:
    with temporary_mapping(fd, start, size) as addr:
        return bool(_libc.madvise(addr, size, _MADV_POPULATE_READ) == 0)


@contextmanager
def temporary_mapping(fd: int, start: int, size: int) -> Iterator[int]:
    """The address of a read-only shared mapping of [start, start + size) of the file
    (`start` page-aligned), unmapped on exit. Made through ctypes, so no Python object
    exports it and the calls on it release the GIL; faults none of its pages in."""
    addr = _map_shared(fd, start, size, mmap.PROT_READ)
    if addr is None:
        raise OSError(ctypes.get_errno(), f"cannot map {size} bytes at {start}")
    try:
        yield addr
    finally:
        _libc.munmap(addr, size)


def map_for_writes(fd: int, size: int) -> int | None:
    """The address of a shared read-write mapping of the file's first `size` bytes, made
    through libc (no descriptor of its own, unlike Python's mmap), once every block of them
    is reserved: a store through the mapping must not meet a full disk, which would fault
    (SIGBUS) instead of failing a call. None when either cannot be done (a file system
    without fallocate, a full disk): the caller writes with `pwrite` instead. Undone with
    `unmap`."""
    try:
        os.posix_fallocate(fd, 0, size)  # (nothing to do where all are reserved already)
    except OSError:
        return None
    return _map_shared(fd, 0, size, mmap.PROT_READ | mmap.PROT_WRITE)


def _map_shared(fd: int, start: int, size: int, prot: int) -> int | None:
    """The address of a shared mapping of [start, start + size) of the file made through
    libc (no Python object exports it), None when mmap(2) fails (its errno kept)."""
    addr = _libc.mmap(None, size, prot, mmap.MAP_SHARED, fd, start)
    return None if addr is None or addr == _MAP_FAILED else int(addr)


def unmap(addr: int, size: int) -> None:
    """Undo `map_for_writes` (or any mapping made through libc)."""
    _libc.munmap(addr, size)


def read_through(fd: int, start: int, size: int) -> None:
    """Read [start, start + size) in 1 MiB chunks and drop the bytes (`warm_page_cache`
    where MADV_POPULATE_READ is missing)."""
    buf = bytearray(_WARM_CHUNK)
    for at in range(start, start + size, _WARM_CHUNK):
        if os.preadv(fd, [memoryview(buf)[: min(_WARM_CHUNK, start + size - at)]], at) <= 0:
            break


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
    except BaseException:
        os.close(fd)
        os.unlink(tmp)  # a full disk must not also keep a partial copy taking space
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


class NoSpaceError(OSError):
    """Disk space could not be reserved for a write; nothing was written."""


def reserve_step(file_size: int) -> int:
    """How far ahead of the writer a sparse store file has its blocks reserved."""
    return min(64 * 1024 * 1024, max(64 * 1024, file_size // 16))


def reserve(fd: int, start: int, end: int) -> None:
    """Reserve the blocks of [start, end) (posix_fallocate: they read as zeros), so writes
    there cannot meet a full disk; NoSpaceError when the disk has no room for them."""
    try:
        os.posix_fallocate(fd, start, end - start)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            return  # a file system without it: writes find out themselves
        raise NoSpaceError(exc.errno, f"cannot reserve disk space: {exc.strerror}") from exc


class BlockReserve:
    """The disk blocks of one store file reserved so far: all of them (a file reserved
    whole when it was created, `step` 0), or, for a sparse file, those of [0, `reserved`),
    grown `step` at a time ahead of the writer. Writes into reserved blocks cannot meet a
    full disk; `headroom` is disk a reservation must leave free for others' writes."""

    def __init__(
        self, fd: int, file_size: int, step: int, reserved: int, headroom: int = 0
    ) -> None:
        self.fd = fd
        self.file_size = file_size
        self.step = step
        self.reserved = reserved
        self.headroom = headroom

    def cover(self, written: int, end: int) -> None:
        """Reserve blocks for writes up to `end`, at least `step` past `written`, where the
        writer is (what lies before it was written, so has its blocks: a file opened again
        knows no more); NoSpaceError, with nothing changed, when the disk has no room."""
        end = min(self.file_size, end)
        if end <= self.reserved:
            return
        start = max(self.reserved, written)
        upto = min(self.file_size, max(end, written + self.step))
        if start >= upto:  # all written already
            self.reserved = upto
            return
        if self.headroom:
            disk = os.fstatvfs(self.fd)
            if disk.f_bavail * disk.f_frsize < upto - start + self.headroom:
                raise NoSpaceError(
                    errno.ENOSPC,
                    f"No space left on device for {upto - start} more bytes besides the "
                    f"{self.headroom} kept for consume queues and the index",
                )
        reserve(self.fd, start, upto)
        self.reserved = upto


def create_preallocated(
    path: str, size: int, reserved: int | None = None, sync_dir: bool = True
) -> int:
    """Create `path` at its full size and return an O_RDWR fd: with its blocks reserved
    (`reserved` None), or sparse with only the first `reserved` bytes' blocks reserved, as
    RocketMQ's files are sparse until written. The file is built under a `.tmp` name and
    renamed into place, so a crash mid-creation never leaves a short file where a store file
    is expected (loaders delete stray `.tmp` files). Without `sync_dir` the caller makes the
    new name durable itself (`fsync_dir`), before anything written to the file is."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if reserved is None:
            preallocate(fd, size)
        else:
            os.ftruncate(fd, size)
            if reserved > 0:
                reserve(fd, 0, min(reserved, size))
        if os.path.exists(path):
            raise FileExistsError(errno.EEXIST, "store file exists already", path)
        os.rename(tmp, path)
        if sync_dir:
            fsync_dir(os.path.dirname(os.path.abspath(path)))
    except BaseException:
        os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return fd


def drop_derived_files(directory: str, names: list[str], reason: str) -> int:
    """Delete `names` in `directory`: the files of a derived store structure (consume
    queue, index) from a damaged one on, which re-dispatch rebuilds from the commitlog.
    Logged with `reason`; returns how many went."""
    log.warning("store files dropped, to be rebuilt from the commitlog",
                directory=directory, reason=reason, files=len(names))  # fmt: skip
    for name in names:
        os.unlink(os.path.join(directory, name))
    return len(names)


def remove_stray_tmp_files(directory: str) -> list[str]:
    """Delete `*.tmp` leftovers of a creation a crash interrupted; returns their names."""
    if not os.path.isdir(directory):
        return []
    stray = [n for n in os.listdir(directory) if n.endswith(".tmp")]
    for name in stray:
        os.unlink(os.path.join(directory, name))
    return stray


_libc.syncfs.argtypes = (ctypes.c_int,)


def no_sync(_fd: int) -> None:
    """For `MappedFile.flush` when `sync_file_system` follows."""


def sync_file_system(path: str) -> None:
    """Make everything written to the file system holding `path` durable, in one syscall
    (syncfs(2); its errors are reported since Linux 5.8). Thousands of files each with a
    little written are synced at once instead of one fdatasync, and one GIL handoff, each."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}", path)
    finally:
        os.close(fd)
