"""Consume queues checked against the commitlog at start: the commitlog is the truth.

A consume-queue entry (``i64 commitLogOffset | i32 size | i64 tagsCode``) must point at the
start of a whole record that says it is that entry: its PHYSICALOFFSET is the entry's offset,
its TOTALSIZE the entry's size, its MAGIC a record's, its QUEUEID the queue's and its
QUEUEOFFSET the entry's logical offset. An entry that does not is damage (flipped bits, a
file from elsewhere): without this check the queue was cut at the first entry that did not
look like one, and every message after it was never served again while new sends reused its
offsets.

Entries pointing into the window recovery validates (`verify_from` on) are checked, by whole
columns with numpy: one gather of 48-byte record heads per commitlog file. Older entries were
checked when their data was in that window. Placeholders and entries whose data expired
(below the commitlog's minimum) are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from rmqpy.store.layout import (
    CQ_ENTRY_DTYPE,
    CQ_PLACEHOLDER,
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    RECORD_HEAD_DTYPE,
)
from rmqpy.store.mapped_file import MappedFile

_HEAD_BYTES = np.arange(RECORD_HEAD_DTYPE.itemsize)


def first_disagreement(
    entries: bytes,
    first_logical: int,
    queue_id: int,
    commitlog: Sequence[MappedFile],
    verify_from: int,
) -> int | None:
    """The logical offset of the first entry in `entries` (consume-queue bytes starting at
    logical offset `first_logical`) that the commitlog does not back, or None."""
    table = np.frombuffer(entries, CQ_ENTRY_DTYPE)
    offsets = table["offset"].astype(np.int64)
    sizes = table["size"].astype(np.int64)
    logical = first_logical + np.arange(len(table), dtype=np.int64)
    real = sizes != CQ_PLACEHOLDER[1]
    if not commitlog:
        return None
    start = commitlog[0].file_from_offset
    end = commitlog[-1].file_from_offset + commitlog[-1].wrote_position
    # Outside what the commitlog holds at all: damaged, unless it merely expired.
    wild = real & ((offsets < 0) | (sizes <= 0) | (offsets + sizes > end))
    wild &= ~((offsets >= 0) & (offsets < start) & (sizes > 0))
    bad = wild.copy()
    checked = real & ~wild & (offsets >= max(verify_from, start))
    for mapped in commitlog:
        if mapped.end_offset <= verify_from:
            continue
        in_file = checked & (offsets >= mapped.file_from_offset) & (offsets < mapped.end_offset)
        if not in_file.any():
            continue
        bad[in_file] = ~_backed(
            mapped, offsets[in_file], sizes[in_file], logical[in_file], queue_id
        )
    where = np.flatnonzero(bad)
    return int(logical[where[0]]) if len(where) else None


def _backed(
    mapped: MappedFile,
    offsets: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    logical: npt.NDArray[np.int64],
    queue_id: int,
) -> npt.NDArray[np.bool_]:
    """Which of these entries point at a record head of `mapped` that names them."""
    positions = offsets - mapped.file_from_offset
    fits = positions + RECORD_HEAD_DTYPE.itemsize <= mapped.file_size
    ok = np.zeros(len(offsets), dtype=bool)
    if not fits.any():
        return ok
    raw = np.frombuffer(mapped.mapping, np.uint8)
    try:
        at = positions[fits]
        heads = raw[at[:, None] + _HEAD_BYTES].copy().view(RECORD_HEAD_DTYPE).reshape(-1)
    finally:
        del raw  # no export of the mapping may outlive this call (mmap.close would fail)
    ok[fits] = (
        (heads["phy"] == offsets[fits])
        & (heads["total"] == sizes[fits])
        & ((heads["magic"] == MESSAGE_MAGIC_V1) | (heads["magic"] == MESSAGE_MAGIC_V2))
        & (heads["queue_id"] == queue_id)
        & (heads["queue_offset"] == logical[fits])
    )
    return ok
