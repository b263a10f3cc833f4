"""A pull's hot records gathered in one call (the common pull): consume-queue entries walked
from the front, those whose tags code the subscription does not want skipped, and the
records the others point at copied out of one commitlog file's mapping, back to back, as a
pull response's body. It stops at the first entry it cannot take that way (a record on the
disk side, in another file, removed, not a v1 record of the entry's size), for the caller
to read from there the slow way, one record at a time. Compiled where built
(`store._hot_read.gather`), one call per pull.

`read_hot` is a get's common answer whole, around `gather`: the queue's end, or the hot
records from an offset inside it. Compiled where built (`store._hot_read.read_hot`): the
broker's pull lane answers a consumer keeping up with one call into the store."""

from __future__ import annotations

import mmap
import struct
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Literal

from rmqpy.config.compiled import twin
from rmqpy.store.layout import (
    BLANK,
    CQ_ENTRY,
    CQ_PLACEHOLDER,
    CQ_STORE_UNIT_SIZE,
    MESSAGE_MAGIC_V1,
    GetMessageStatus,
)
from rmqpy.store.mapped_file import StoreFileError

if TYPE_CHECKING:
    from rmqpy.store.commitlog import CommitLog
    from rmqpy.store.consume_queue import ConsumeQueue

Gathered = tuple[bytes, list[int], int]  # (records back to back, their sizes, entries scanned)
# (status, next queue offset, min offset, max offset, records back to back, their sizes)
HotRead = tuple[int, int, int, int, bytes, list[int]]
FOUND = int(GetMessageStatus.FOUND)
AT_END = int(GetMessageStatus.OFFSET_OVERFLOW_ONE)


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


def read_hot(
    cq: ConsumeQueue,
    commitlog: CommitLog,
    offset: int,
    entries_max: int,
    tag_codes: AbstractSet[int] | None,
    max_count: int,
    max_bytes: int,
    memory_only: bool,
) -> HotRead | Literal[False] | None:
    """`MessageStore.get_message`'s answer from queue offset `offset` of `cq` when it is one
    of the two every consumer keeping up meets: the queue's end (OFFSET_OVERFLOW_ONE, no
    record), or records found (FOUND): `gather` over up to `entries_max` entries of one
    consume-queue file, the records hot (within `commitlog.hot_bytes` of its end) in the
    commitlog file the first entry points at. None for anything else, which `get_message`
    answers its full way: an empty queue, an offset outside it, nothing taken this way. With
    `memory_only`, False where the entry or its first record would be read from the disk
    (`MappedFile.in_memory`): the caller is on the event loop, and hands the get to a thread
    without asking again (where the kernel was asked with a read, the miss started its
    readahead: asked again, the page may well be cached, and the loop would wait for the
    rest)."""
    files = cq.queue.files
    if not files:
        return None
    last = files[-1]
    max_off = (last.file_from_offset + last.wrote_position) // CQ_STORE_UNIT_SIZE
    min_off = cq.min_logic_offset // CQ_STORE_UNIT_SIZE
    if max_off == 0 or not min_off <= offset <= max_off:
        return None
    if offset == max_off:
        return AT_END, offset, min_off, max_off, b"", []
    position = offset * CQ_STORE_UNIT_SIZE
    cq_file = cq.queue.find_mapped_file_by_offset(position)
    if cq_file is None:
        return None
    local = position - cq_file.file_from_offset
    count = min(entries_max, (cq_file.wrote_position - local) // CQ_STORE_UNIT_SIZE)
    if count <= 0:
        return None
    if memory_only and not cq_file.in_memory(local):
        return False
    log_files = commitlog.queue.files
    try:
        entries = cq_file.read(local, count * CQ_STORE_UNIT_SIZE)
        if len(entries) < count * CQ_STORE_UNIT_SIZE:
            return None
        log_last = log_files[-1]
        first = CQ_ENTRY.unpack_from(entries)[0]
        mapped = commitlog.queue.find_mapped_file_by_offset(first)
        if mapped is None:
            return None
        if memory_only and not mapped.in_memory(first - mapped.file_from_offset):
            return False
        mapping = mapped.mapping
    except (IndexError, ValueError, StoreFileError):  # no commitlog file, or one closed
        return None
    log_end = log_last.file_from_offset + log_last.wrote_position
    low = max(log_end - commitlog.hot_bytes, log_files[0].file_from_offset)
    body, sizes, scanned = gather(
        mapping,
        mapped.file_from_offset,
        mapped.wrote_position,
        entries,
        tag_codes,
        low,
        max_count,
        max_bytes,
    )
    if not sizes:
        return None
    return FOUND, offset + scanned, min_off, max_off, body, sizes


reference_gather, reference_read_hot = gather, read_hot
_compiled = twin("rmqpy.store._hot_read")
if _compiled is not None:
    gather = _compiled.gather
    read_hot = _compiled.read_hot
