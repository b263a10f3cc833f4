"""Java's `String.hashCode` (h = 31*h + c over UTF-16 code units, wrapping at 32 bits).

RocketMQ hashes TAGS into the consume-queue tags code and `topic#key` into index slots with
it. `java_string_hash` does one string. `java_string_hashes` does a whole dispatch round at
once with numpy: short ASCII keys as a right-aligned byte matrix times the powers of 31 in
one matrix product (leading zeros leave a Java hash unchanged), anything else as code units
times 31^(position from the end), summed per key. Results wrap to uint32 exactly as Java's
int does.
`java_concat_hashes` hashes `prefix + suffix` pairs without building the strings:
h(p + s) = h(p) * 31^len(s) + h(s).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

_MASK = 0xFFFFFFFF
# 31^k mod 2^32 for every k a key can need (properties are < 32 KiB, topics < 128 chars).
_POWERS = np.cumprod(np.full(1 << 16, 31, dtype=np.uint64)) & np.uint64(_MASK)
_POWERS = np.concatenate((np.ones(1, dtype=np.uint64), _POWERS[:-1])).astype(np.uint32)
_POWERS_U64 = _POWERS.astype(np.uint64)
_MASK_U64 = np.uint64(_MASK)
_MATRIX_MAX_LEN = 96  # longer keys take the per-unit path (the matrix would be mostly padding)

UInt32s = npt.NDArray[np.uint32]


def java_string_hash(s: str) -> int:
    if s.isascii():
        units: bytes | tuple[int, ...] = s.encode("ascii")
    else:
        data = s.encode("utf-16-be")
        units = struct.unpack(f">{len(data) // 2}H", data)
    h = 0
    for c in units:
        h = (h * 31 + c) & _MASK
    return h - 0x100000000 if h & 0x80000000 else h


def java_string_hashes(keys: Sequence[str]) -> npt.NDArray[np.int64]:
    """`java_string_hash` of every key, as int64 holding the signed 32-bit values."""
    hashes, _ = _hashes_and_lengths(keys)
    return hashes.view(np.int32).astype(np.int64)


def java_concat_hashes(
    prefixes: Sequence[str], suffixes: Sequence[str], joint: str = ""
) -> npt.NDArray[np.int64]:
    """`java_string_hash(prefixes[i] + joint + suffixes[i])` for every i; meant for few
    distinct prefixes (topics), each hashed once."""
    suffix_hashes, suffix_lens = _hashes_and_lengths(suffixes)
    distinct = {p: np.uint32(java_string_hash(p + joint) & _MASK) for p in set(prefixes)}
    if len(distinct) == 1:
        prefix_hashes: UInt32s | np.uint32 = next(iter(distinct.values()))
    else:
        prefix_hashes = np.fromiter(
            (distinct[p] for p in prefixes), dtype=np.uint32, count=len(prefixes)
        )
    if int(suffix_lens.max(initial=0)) >= len(_POWERS):
        return np.array(
            [java_string_hash(p + joint + s) for p, s in zip(prefixes, suffixes, strict=True)],
            dtype=np.int64,
        )
    combined = prefix_hashes * _POWERS[suffix_lens] + suffix_hashes
    return combined.view(np.int32).astype(np.int64)


def _hashes_and_lengths(keys: Sequence[str]) -> tuple[UInt32s, npt.NDArray[np.intp]]:
    """(hash as uint32, length in UTF-16 code units) of every key."""
    count = len(keys)
    if not count:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.intp)
    lens = np.fromiter(map(len, keys), dtype=np.intp, count=count)
    longest = int(lens.max())
    joined = "".join(keys)
    if joined.isascii():
        if longest <= _MATRIX_MAX_LEN:
            return _ascii_matrix_hashes(keys, longest), lens
        units: npt.NDArray[np.uint32] = np.frombuffer(joined.encode("ascii"), np.uint8).astype(
            np.uint32
        )
    else:
        units = np.frombuffer(joined.encode("utf-16-be"), dtype=">u2").astype(np.uint32)
        if len(units) != len(joined):  # characters outside the BMP take two code units
            lens = np.array([len(k.encode("utf-16-be")) // 2 for k in keys], dtype=np.intp)
    if int(lens.max()) >= len(_POWERS):
        hashes = [java_string_hash(k) & _MASK for k in keys]
        return np.array(hashes, dtype=np.uint32), lens
    return _unit_hashes(units, lens), lens


def _ascii_matrix_hashes(keys: Sequence[str], width: int) -> UInt32s:
    """Right-aligned in a zero-padded byte matrix, each row times 31^(width-1-column) in one
    matrix product (at most 255 * 2^32 * 96 per row, no overflow in uint64), then wrapped."""
    count = len(keys)
    if width == 0:
        return np.zeros(count, dtype=np.uint32)
    padded = "".join([k.rjust(width, "\0") for k in keys]).encode("ascii")
    matrix = np.frombuffer(padded, dtype=np.uint8).reshape(count, width)
    wrapped: UInt32s = ((matrix @ _POWERS_U64[width - 1 :: -1]) & _MASK_U64).astype(np.uint32)
    return wrapped


def _unit_hashes(units: UInt32s, lens: npt.NDArray[np.intp]) -> UInt32s:
    ends = np.cumsum(lens)
    exps = np.repeat(ends, lens) - np.arange(1, len(units) + 1)
    terms = units * _POWERS[exps]
    out = np.zeros(len(lens), dtype=np.uint32)
    nonempty = lens > 0
    if len(units):
        out[nonempty] = np.add.reduceat(terms, (ends - lens)[nonempty], dtype=np.uint32)
    return out
