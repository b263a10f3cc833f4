"""Sends staged as whole records: the columnar way into the commitlog.

The broker's compiled send lane encodes a run of plain sends (of one message, or a batch
whose items each become a record) straight into one buffer,
record after record, with everything but the three fields only the put can know (QUEUEOFFSET,
PHYSICALOFFSET, STORETIMESTAMP: left zero), and one column per field the store, dispatch and
metrics need afterwards. `CommitLog.put_staged` places them (`place_staged` writes those three
fields in) and writes the buffer as it is; dispatch and metrics read the columns. No `Message`
or `PutMessageResult` is made per message.

Only what needs nothing else is staged: every message to an existing queue of a writable
topic, no delay level, no transaction flag, within the size limits, WAIT false for all or
none, a batch's items all of one message type, and the whole run fitting the current
commitlog file. Anything else goes the way of messages.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rmqpy.config.compiled import twin
from rmqpy.store.dispatch_columns import DispatchColumns
from rmqpy.store.layout import (
    HOST_V4,
    HOST_V6,
    I64,
    RECORD_HEAD,
    RECORD_HEAD_OFFSETS,
    PutMessageStatus,
)
from rmqpy.store.message import MessageTemplate

if TYPE_CHECKING:
    from rmqpy.store.commitlog import WrittenSegment
    from rmqpy.store.dispatch import ReputService

QUEUE_OFFSET_AT = RECORD_HEAD_OFFSETS["queue_offset"]
PHY_AT = RECORD_HEAD_OFFSETS["phy"]
# STORETIMESTAMP follows BORNHOST, whose width the born host's kind sets.
STORE_TS_AT = {False: RECORD_HEAD.size + HOST_V4.size, True: RECORD_HEAD.size + HOST_V6.size}
RECORD_MIN = STORE_TS_AT[True] + I64.size  # no staged record is shorter


@dataclass(slots=True, eq=False)
class StagedSends:
    """The records of a run of sends, in arrival order, and their columns.

    `data` holds the records back to back; record i is `sizes[i]` bytes long and was made
    from `templates[slots[i]]` (topic, queue, born host, flags). Send j made `counts[j]`
    records, one per message (a batch's items follow each other). The put fills `phys`,
    `queue_offsets`, `store_timestamp` and `status`."""

    data: bytearray
    templates: list[MessageTemplate]
    slots: array[int] = field(default_factory=lambda: array("i"))
    sizes: array[int] = field(default_factory=lambda: array("i"))
    body_sizes: array[int] = field(default_factory=lambda: array("i"))
    marks: array[int] = field(default_factory=lambda: array("i"))  # MARK_* (store.layout)
    tags: array[int] = field(default_factory=lambda: array("q"))  # each TAGS' hash code
    uniq_keys: list[str | None] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # KEYS as sent: space-separated
    counts: array[int] = field(default_factory=lambda: array("i"))  # records of each send
    # Set by the put.
    phys: array[int] = field(default_factory=lambda: array("q"))
    queue_offsets: array[int] = field(default_factory=lambda: array("q"))
    store_timestamp: int = 0
    status: PutMessageStatus = PutMessageStatus.PUT_OK
    remark: str = ""
    waits: bool = False  # stored, and waiting for a SYNC_FLUSH to be answered

    def __len__(self) -> int:
        return len(self.sizes)


def place_staged(
    table: dict[str, int], staged: StagedSends, start: int, store_timestamp: int
) -> dict[str, int | None]:
    """Give each record its place: the next queue offset of its queue in `table` (moved on),
    the commitlog offset from `start` on, both written into its bytes with `store_timestamp`,
    and kept in `staged`'s columns. Returns each queue's offset before (None: a new queue),
    for a rollback."""
    data = staged.data
    templates = staged.templates
    if (
        len(staged.slots) != len(staged.sizes)
        or sum(staged.sizes) != len(data)
        or not all(0 <= slot < len(templates) for slot in staged.slots)
        or min(staged.sizes, default=RECORD_MIN) < RECORD_MIN
    ):
        raise ValueError("staged records do not match their columns")
    old: dict[str, int | None] = {}
    phys, queue_offsets = array("q"), array("q")
    pos = 0
    for slot, size in zip(staged.slots, staged.sizes, strict=True):
        template = templates[slot]
        key = template.queue_key
        current = table.get(key)
        if key not in old:
            old[key] = current
        queue_offset = current or 0
        table[key] = queue_offset + 1
        phy = start + pos
        I64.pack_into(data, pos + QUEUE_OFFSET_AT, queue_offset)
        I64.pack_into(data, pos + PHY_AT, phy)
        I64.pack_into(data, pos + STORE_TS_AT[template.born_host.is_v6], store_timestamp)
        phys.append(phy)
        queue_offsets.append(queue_offset)
        pos += size
    staged.phys, staged.queue_offsets = phys, queue_offsets
    staged.store_timestamp = store_timestamp
    return old


def add_staged(work: DispatchColumns, staged: StagedSends) -> None:
    """A staged put's consume-queue entries and index keys, into a dispatch round: every
    record is queued and indexed, none is due later."""
    templates = staged.templates
    columns = (staged.sizes, staged.tags, staged.phys, staged.queue_offsets, staged.uniq_keys,
               staged.keys)  # fmt: skip
    if any(len(column) != len(staged.slots) for column in columns):
        raise ValueError("zip() arguments differ in length")
    queues = [work.queue(t.queue_key, t.topic, t.queue_id) for t in templates]
    stamp = staged.store_timestamp
    for i, slot in enumerate(staged.slots):
        phy = staged.phys[i]
        queues[slot].add(staged.queue_offsets[i], phy, staged.sizes[i], staged.tags[i])
        work.add_keys(templates[slot].topic, phy, stamp, staged.uniq_keys[i], staged.keys[i])
    work.records += len(staged)
    work.last_store_timestamp = stamp


def dispatch_staged(reput: ReputService, segments: Sequence[WrittenSegment]) -> int:
    """A dispatch round of staged puts only (segments the commitlog handed over, back to
    back from where dispatch is, all written): their consume-queue entries and index keys
    written, dispatch moved to the last one's end and the listeners told, as
    `ReputService.finish_round` does. Returns how many records."""
    work = DispatchColumns(last_store_timestamp=reput.last_store_timestamp)
    for segment in segments:
        assert segment.staged is not None
        add_staged(work, segment.staged)
    reput.finish_round(work, segments[-1].end)
    return work.records


# The pure-Python functions, kept as the reference the compiled twins are tested against.
reference_place_staged, reference_add_staged = place_staged, add_staged
reference_dispatch_staged = dispatch_staged
_compiled = twin("rmqpy.store._staged")
# `ReputService._rounds` as the compiled core runs it (its reference is that method's loop).
run_rounds: Callable[[ReputService, int], int] | None = None
if _compiled is not None:
    place_staged = _compiled.place_staged
    add_staged = _compiled.add_staged
    dispatch_staged = _compiled.dispatch_staged
    run_rounds = _compiled.run_rounds
