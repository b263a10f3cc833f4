"""A pull's hot records gathered in one call (the common pull): consume-queue entries walked
from the front, those whose tags code the subscription does not want skipped, and the
records the others point at copied out of one commitlog file's mapping, back to back, as a
pull response's body. It stops at the first entry it cannot take that way (a record on the
disk side, in another file, removed, not a v1 record of the entry's size), for the caller
to read from there the slow way, one record at a time. Compiled where built
(`store._hot_read.gather`), one call per pull."""

from __future__ import annotations

import mmap
import struct
from collections.abc import Set as AbstractSet

from rmqpy.config.compiled import twin
from rmqpy.store.layout import BLANK, CQ_ENTRY, CQ_PLACEHOLDER, MESSAGE_MAGIC_V1

Gathered = tuple[bytes, list[int], int]  # (records back to back, their sizes, entries scanned)


def gather(
    mapping: mmap.mmap,
    base: int,
    written: int,
    entries: bytes,
    tag_codes: AbstractSet[int] | None,
    low: int,
    max_count: int,
    max_bytes: int,
) -> Gathered:
    """The records of the consume-queue `entries` (as stored, 20 bytes each) that lie in
    [max(low, base), base + written) of the commitlog file starting at `base` and mapped at
    `mapping`: up to `max_count` records and `max_bytes` (the first is taken whatever its
    size, as RocketMQ's `isTheBatchFull` does). An entry skipped for its tags code counts as
    scanned: the next pull starts after it."""
    parts: list[bytes] = []
    sizes: list[int] = []
    total = scanned = 0
    low = max(low, base)
    end = base + written
    head = BLANK.unpack_from
    for phy, size, tags in CQ_ENTRY.iter_unpack(entries):
        if sizes and (len(sizes) >= max_count or total + size > max_bytes):
            break
        if phy < low or phy + size > end or size == CQ_PLACEHOLDER[1] or size < BLANK.size:
            break
        if tag_codes is not None and tags not in tag_codes:
            scanned += 1
            continue
        at = phy - base
        try:
            if head(mapping, at) != (size, MESSAGE_MAGIC_V1):
                break
            parts.append(mapping[at : at + size])
        except (ValueError, struct.error):  # the file was closed by expiry while we looked
            break
        sizes.append(size)
        total += size
        scanned += 1
        if len(sizes) >= max_count:
            break
    return b"".join(parts), sizes, scanned


reference_gather = gather
_compiled = twin("rmqpy.store._hot_read")
if _compiled is not None:
    gather = _compiled.gather
