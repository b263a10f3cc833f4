"""Java's `String.hashCode` (h = 31*h + c over UTF-16 code units, wrapping at 32 bits).

RocketMQ hashes TAGS into the consume-queue tags code and `topic#key` into index slots with
it. `java_string_hash` does one string; `java_string_hashes` does a whole dispatch batch at
once with numpy (each code unit times 31^(position from the end) mod 2^32, summed per key),
which is what keeps index building off the critical path.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

_MASK = 0xFFFFFFFF
# 31^k mod 2^32 for every k a key can need (properties are < 32 KiB, topics < 128 chars):
# uint64 products wrap mod 2^64, and 2^32 divides 2^64, so masking afterwards is exact.
_POWERS = np.cumprod(np.full(1 << 16, 31, dtype=np.uint64)) & np.uint64(_MASK)
_POWERS = np.concatenate((np.ones(1, dtype=np.uint64), _POWERS[:-1]))


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
    count = len(keys)
    out = np.zeros(count, dtype=np.int64)
    if not count:
        return out
    joined = "".join(keys)
    units = np.frombuffer(joined.encode("utf-16-be"), dtype=">u2").astype(np.uint64)
    if len(units) == len(joined):
        lens = np.fromiter(map(len, keys), dtype=np.int64, count=count)
    else:  # characters outside the BMP take two code units
        lens = np.array([len(k.encode("utf-16-be")) // 2 for k in keys], dtype=np.int64)
    ends = np.cumsum(lens)
    exps = np.repeat(ends, lens) - 1 - np.arange(len(units), dtype=np.int64)
    if int(lens.max()) >= len(_POWERS):
        out[:] = [java_string_hash(k) for k in keys]
        return out
    terms = units * _POWERS[exps]  # < 2^48 each: sums cannot overflow
    nonempty = lens > 0
    sums = np.add.reduceat(terms, (ends - lens)[nonempty]) if len(units) else terms
    out[nonempty] = (sums & np.uint64(_MASK)).astype(np.uint32).view(np.int32)
    return out
