"""What a dispatch round writes, as columns: consume-queue entries per queue and index keys.

Dispatch fills one from what the commitlog hands over (the messages of each write and where
they landed: `add_written`, column by column, since the fields are in hand), or record by
record when it parses the files instead; either way the round is then written with one
vectorised encode per queue and one for the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from rmqpy.store.layout import SCHEDULE_TOPIC, due_time

if TYPE_CHECKING:
    from rmqpy.store.commitlog import PutMessageResult
    from rmqpy.store.message import Message

T = TypeVar("T")


@dataclass(slots=True)
class QueueColumns:
    """One queue's new entries, in queue-offset order."""

    topic: str
    queue_id: int
    queue_offsets: list[int] = field(default_factory=list)
    phys: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    tags: list[int] = field(default_factory=list)

    def add(self, queue_offset: int, phy: int, size: int, tags_code: int) -> None:
        self.queue_offsets.append(queue_offset)
        self.phys.append(phy)
        self.sizes.append(size)
        self.tags.append(tags_code)


@dataclass(slots=True)
class DispatchColumns:
    queues: dict[str, QueueColumns] = field(default_factory=dict)  # by `topic-queueId`
    # Index keys: `topic#name` for each, with its record's offset and store time.
    key_topics: list[str] = field(default_factory=list)
    key_names: list[str] = field(default_factory=list)
    key_phys: list[int] = field(default_factory=list)
    key_stamps: list[int] = field(default_factory=list)
    records: int = 0
    last_store_timestamp: int = 0

    def queue(self, queue_key: str, topic: str, queue_id: int) -> QueueColumns:
        cols = self.queues.get(queue_key)
        if cols is None:
            cols = self.queues[queue_key] = QueueColumns(topic, queue_id)
        return cols

    def add_keys(self, topic: str, phy: int, stamp: int, uniq_key: str | None, keys: str) -> None:
        """The UNIQ_KEY and each of the space-separated KEYS of one record."""
        names = [uniq_key] if uniq_key else []
        if keys:
            names += [key for key in keys.split(" ") if key]
        count = len(names)
        self.key_names += names
        self.key_topics += [topic] * count
        self.key_phys += [phy] * count
        self.key_stamps += [stamp] * count

    def add_written(
        self,
        groups: Sequence[Sequence[Message]],
        results: Sequence[PutMessageResult],
        store_timestamp: int,
        store_v6: bool,
        delay_levels_ms: Sequence[int],
    ) -> None:
        """The entries and keys of one commitlog write: each group with the result that says
        where it landed (its records' offsets, its first queue offset). A schedule-topic
        entry's tags code is the time it is due (from `delay_levels_ms`), not its TAGS."""
        key_msgs: list[Message] = []
        key_phys: list[int] = []
        queues = self.queues
        for group, result in zip(groups, results, strict=True):
            first = group[0]
            due = (
                due_time(store_timestamp, first.queue_id, delay_levels_ms)
                if first.topic == SCHEDULE_TOPIC
                else None
            )
            if len(group) == 1:  # the common case, spelled out: a send of one message
                phy = result.wrote_offset
                if first.queued:
                    cols = queues.get(first.queue_key)
                    if cols is None:
                        cols = self.queue(first.queue_key, first.topic, first.queue_id)
                    cols.queue_offsets.append(result.queue_offset)
                    cols.phys.append(phy)
                    cols.sizes.append(result.wrote_bytes)
                    cols.tags.append(first.tags_code if due is None else due)
                if first.indexed:
                    key_msgs.append(first)
                    key_phys.append(phy)
                continue
            cols = self.queue(first.queue_key, first.topic, first.queue_id)
            offsets = result.record_offsets
            if all([m.queued for m in group]):  # and so indexed too
                cols.queue_offsets += range(result.queue_offset, result.queue_offset + len(group))
                cols.phys += offsets
                cols.sizes += [m.lengths[store_v6] for m in group]
                cols.tags += [m.tags_code for m in group] if due is None else [due] * len(group)
                key_msgs += group
                key_phys += offsets
            else:
                queue_offset = result.queue_offset
                for msg, phy in zip(group, offsets, strict=True):
                    if msg.queued:
                        tags = msg.tags_code if due is None else due
                        cols.add(queue_offset, phy, msg.lengths[store_v6], tags)
                        queue_offset += 1
                    if msg.indexed:
                        key_msgs.append(msg)
                        key_phys.append(phy)
        self.records += sum(map(len, groups))
        self.last_store_timestamp = store_timestamp
        if key_msgs:
            self._add_message_keys(key_msgs, key_phys, store_timestamp)

    def _add_message_keys(self, msgs: list[Message], phys: list[int], stamp: int) -> None:
        """`add_keys` for many records stored at one time, by whole columns in the usual
        shapes: every record with a UNIQ_KEY and either one key or none in KEYS."""
        if len(msgs) == 1:  # a write of one single send: the shapes cost more than they save
            msg = msgs[0]
            self.add_keys(msg.topic, phys[0], stamp, msg.uniq_key, msg.keys)
            return
        uniqs = [m.uniq_key for m in msgs]
        keys = [m.keys for m in msgs]
        if all(uniqs):
            count = len(msgs)
            if not any(keys):
                self.key_names += uniqs  # type: ignore[arg-type]  # all set, just checked
                self.key_topics += [m.topic for m in msgs]
                self.key_phys += phys
                self.key_stamps += [stamp] * count
                return
            if all(keys) and " " not in "".join(keys):
                topics = [m.topic for m in msgs]
                self.key_names += _interleave(uniqs, keys)  # type: ignore[arg-type]
                self.key_topics += _interleave(topics, topics)
                self.key_phys += _interleave(phys, phys)
                self.key_stamps += [stamp] * (2 * count)
                return
        for msg, phy in zip(msgs, phys, strict=True):
            self.add_keys(msg.topic, phy, stamp, msg.uniq_key, msg.keys)


def _interleave(evens: list[T], odds: list[T]) -> list[T]:
    out: list[T] = [*evens, *odds]
    out[0::2] = evens
    out[1::2] = odds
    return out
