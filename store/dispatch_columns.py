"""What a dispatch round writes, as columns: consume-queue entries per queue and index keys.

The commitlog fills one per write while it encodes (it has every field in hand), and dispatch
fills one when it parses records from the files instead; either way the round is then written
with one vectorised encode per queue and one for the index.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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

    def extend(self, other: QueueColumns) -> None:
        self.queue_offsets += other.queue_offsets
        self.phys += other.phys
        self.sizes += other.sizes
        self.tags += other.tags


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

    def extend(self, other: DispatchColumns) -> None:
        """Append a later write's columns."""
        for where, cols in other.queues.items():
            mine = self.queues.get(where)
            if mine is None:
                self.queues[where] = cols
            else:
                mine.extend(cols)
        self.key_topics += other.key_topics
        self.key_names += other.key_names
        self.key_phys += other.key_phys
        self.key_stamps += other.key_stamps
        self.records += other.records
        self.last_store_timestamp = other.last_store_timestamp or self.last_store_timestamp
