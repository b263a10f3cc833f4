"""Which pages of a file the page cache holds, asked with mincore(2) over a fresh mapping of
the file. Unlike a read with RWF_NOWAIT, asking changes nothing: such a read that misses
starts readahead before it fails, so the page it asked about is often cached a moment later."""

from __future__ import annotations

import ctypes
import mmap
import os

PAGE = os.sysconf("SC_PAGE_SIZE")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long
)  # fmt: skip
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)


def cached_pages(fd: int, start: int, end: int) -> list[bool]:
    """For each page of [start, end) of the file: is it in the page cache?"""
    start -= start % PAGE
    size = end - start
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    try:
        vec = ctypes.create_string_buffer((size + PAGE - 1) // PAGE)
        assert _libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        return [bool(b & 1) for b in vec.raw]
    finally:
        _libc.munmap(addr, size)
