"""Java's `String.hashCode` (h = 31*h + c over UTF-16 code units, wrapping at 32 bits).

RocketMQ hashes TAGS into the consume-queue tags code and `topic#key` into index slots with
it. `java_string_hash` does one string. `java_string_hashes` does a whole dispatch round at
once with numpy, with no Python per key. ASCII keys are joined with a separator into one
byte array `u` and hashed through prefix sums: with C[i] = sum of u[j] * 31^-j for j < i
(31 is odd, so it has an inverse modulo 2^32), the key at [s, e) hashes to
(C[e] - C[s]) * 31^(e-1). Anything else is code units times 31^(position from the end),
summed per key. Results wrap to uint32 exactly as Java's int does.
`java_concat_hashes` hashes `prefix + suffix` pairs without building the strings:
h(p + s) = h(p) * 31^len(s) + h(s).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

_MASK = 0xFFFFFFFF
_SPAN = 1 << 18  # characters hashed in one prefix-sum pass; longer rounds are split
_SEP = "\x01"  # joins keys for that pass (a property value cannot hold it: it separates them)


def _power_table(base: int) -> npt.NDArray[np.uint32]:
    """base^k mod 2^32 for k < _SPAN (uint64 products wrap mod 2^64: the low half is right)."""
    table = np.cumprod(np.full(_SPAN, base, dtype=np.uint64))
    return np.concatenate((np.ones(1, dtype=np.uint64), table[:-1])).astype(np.uint32)


# 31^k for every k a key or a pass needs (properties are < 32 KiB, topics < 128 chars),
# and 31^-k.
_POWERS = _power_table(31)
_INVERSE_POWERS = _power_table(pow(31, -1, 1 << 32))

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
    joined = _SEP.join(keys)
    if joined.isascii() and joined.count(_SEP) == count - 1:
        if len(joined) <= _SPAN:
            return _ascii_prefix_hashes(joined.encode("ascii"), count)
        if count > 1:
            half = count // 2
            first, first_lens = _hashes_and_lengths(keys[:half])
            rest, rest_lens = _hashes_and_lengths(keys[half:])
            return np.concatenate((first, rest)), np.concatenate((first_lens, rest_lens))
    lens = np.fromiter(map(len, keys), dtype=np.intp, count=count)
    joined = "".join(keys)
    if joined.isascii():
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


def _ascii_prefix_hashes(joined: bytes, count: int) -> tuple[UInt32s, npt.NDArray[np.intp]]:
    """`count` ASCII keys joined by _SEP (which none of them holds), at most _SPAN bytes."""
    size = len(joined)
    units = np.frombuffer(joined, dtype=np.uint8)
    seps = np.flatnonzero(units == ord(_SEP))
    starts = np.empty(count, dtype=np.intp)
    ends = np.empty(count, dtype=np.intp)
    starts[0], starts[1:] = 0, seps + 1
    ends[:-1], ends[-1] = seps, size
    sums = np.zeros(size + 1, dtype=np.uint32)
    np.cumsum(units * _INVERSE_POWERS[:size], dtype=np.uint32, out=sums[1:])
    # An empty key at 0 takes 31^(-1), i.e. the table's last entry, times a zero sum.
    hashes: UInt32s = (sums[ends] - sums[starts]) * _POWERS[ends - 1]
    return hashes, ends - starts


def _unit_hashes(units: UInt32s, lens: npt.NDArray[np.intp]) -> UInt32s:
    ends = np.cumsum(lens)
    exps = np.repeat(ends, lens) - np.arange(1, len(units) + 1)
    terms = units * _POWERS[exps]
    out = np.zeros(len(lens), dtype=np.uint32)
    nonempty = lens > 0
    if len(units):
        out[nonempty] = np.add.reduceat(terms, (ends - lens)[nonempty], dtype=np.uint32)
    return out
