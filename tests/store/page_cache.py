"""Which pages of a file the page cache holds, asked with mincore(2) over a fresh mapping of
the file, and how many are dirty, asked with cachestat(2): independent of the store's own
ways of asking and of handing pages to the disk (`fileio`), whose declarations of the same
kernel structures these tests do not borrow."""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from collections.abc import Iterable

import pytest

from rmqpy.store import fileio
from rmqpy.store.fileio import temporary_mapping

PAGE = os.sysconf("SC_PAGE_SIZE")

_mincore = ctypes.CDLL(None, use_errno=True).mincore
_mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)


class _Range(ctypes.Structure):
    _fields_ = (("off", ctypes.c_uint64), ("len", ctypes.c_uint64))


class _Stat(ctypes.Structure):
    _fields_ = tuple(
        (name, ctypes.c_uint64)
        for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")
    )


_syscall = ctypes.CDLL(None, use_errno=True).syscall
_syscall.restype = ctypes.c_long
_CACHESTAT = 451  # x86_64 and aarch64 alike


def dirty_pages(fd: int, start: int, end: int) -> int:
    """How many pages of [start, end) of the file are dirty or being written back, asked
    with cachestat(2) (the test is skipped where the kernel has none)."""
    stat = _Stat()
    if _syscall(_CACHESTAT, fd, ctypes.byref(_Range(start, end - start)), ctypes.byref(stat), 0):
        pytest.skip(f"no cachestat(2) here: {os.strerror(ctypes.get_errno())}")
    return int(stat.dirty + stat.writeback)


def cached_pages(fd: int, start: int, end: int) -> list[bool]:
    """For each page of [start, end) of the file: is it in the page cache?"""
    start -= start % PAGE
    size = end - start
    with temporary_mapping(fd, start, size) as addr:
        vec = ctypes.create_string_buffer((size + PAGE - 1) // PAGE)
        assert _mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        return [bool(b & 1) for b in vec.raw]


def drop_pages(
    fds: Iterable[int], fd: int, end: int, tries: int = 50, mappings: Iterable[mmap.mmap] = ()
) -> bool:
    """Drop the clean pages of the files `fds` from the page cache, again (10 ms apart, at
    most `tries` times) until no page of [0, end) of `fd` is cached; False if some stay (a
    page still being read in cannot be dropped; tmpfs keeps them all). A page a process has
    mapped in stays cached: `mappings` (the store's own, which reads went through) let go of
    theirs first."""
    fds, mappings = list(fds), list(mappings)
    for _ in range(tries):
        for mapping in mappings:
            mapping.madvise(mmap.MADV_DONTNEED)  # (a shared file mapping: nothing is lost)
        for each in fds:
            os.posix_fadvise(each, 0, 0, os.POSIX_FADV_DONTNEED)
        if not any(cached_pages(fd, 0, end)):
            return True
        time.sleep(0.01)
    return False


def store_tells_pages_apart() -> None:
    """Skip unless the store asks the kernel without reading (cachestat(2), Linux 6.5+).
    Its fallback, a read with RWF_NOWAIT, starts readahead when it misses, and where the
    disk answers within the call (a virtual disk its host caches) the read succeeds: a
    page just dropped is then rightly told cached, most of the time on some hosts."""
    if fileio.PAGE_CACHE_PROBE != "cachestat":
        pytest.skip("this kernel has no cachestat(2): the store cannot ask without reading")
