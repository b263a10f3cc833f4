"""Topics deleted from the store, each with the commitlog offset it was deleted at:
`config/deletedTopics.json`, a file of ours (RocketMQ keeps none and ignores it).

A deleted topic's records stay in the commitlog until they expire. Dispatch parses records
back from the files when a restart re-dispatches what the consume queues miss (after a
crash: everything since the checkpoint; after a clean stop: whatever lies past the furthest
queue, which a deleted topic's last sends may be), and it keeps a deleted topic's records
from before its deletion out of the consume queues (their keys stay in the index, as they
did while the topic lived and as RocketMQ keeps them, until they expire). Without this the
topic came back after a restart with the messages it held when deleted; and when it had
been sent to again, the old records took the queue offsets the new ones were acknowledged
with, and the new ones were dropped as already present.
"""

from __future__ import annotations

import os

import structlog

from rmqpy.store.config_files import ConfigFileError, load_config_file, persist_config_file, reading

FILE_NAME = "deletedTopics.json"

log = structlog.get_logger(__name__)


class DeletedTopics:
    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, FILE_NAME)
        self.below: dict[str, int] = {}  # topic -> commitlog offset it was deleted at

    def load(self) -> None:
        """Read the file. One that cannot be read (nor its .bak) is logged and taken as
        empty: the store still starts, and at worst a deleted topic comes back."""
        try:
            data = load_config_file(self.path) or {}
            with reading(self.path):
                table = data.get("deletedTopics", {})
                self.below = {str(topic): int(offset) for topic, offset in table.items()}
        except ConfigFileError as exc:
            log.error("deleted topics unreadable; taken as none", path=self.path, error=str(exc))
            self.below = {}

    def add(self, topic: str, offset: int, min_offset: int) -> None:
        """`topic` was deleted when the commitlog ended at `offset`; deletions whose records
        have all expired (below `min_offset`) are forgotten on the way, so a broker that
        deletes topics all day keeps a small file."""
        self.below = {**self._unexpired(min_offset), topic: offset}
        self._persist()

    def hides(self, topic: str, phy_offset: int) -> bool:
        """Whether the record of `topic` at `phy_offset` was written before its deletion."""
        below = self.below.get(topic)
        return below is not None and phy_offset < below

    def settle(self, min_offset: int, max_offset: int) -> None:
        """After recovery: forget deletions whose records have all expired (below
        `min_offset`), and lower the rest to where the commitlog now ends (`max_offset`,
        when recovery cut it short), so records written from there on are not hidden."""
        settled = {t: min(o, max_offset) for t, o in self._unexpired(min_offset).items()}
        if settled != self.below:
            self.below = settled
            self._persist()

    def _unexpired(self, min_offset: int) -> dict[str, int]:
        """The deletions some of whose records may still be in the commitlog."""
        return {topic: offset for topic, offset in self.below.items() if offset > min_offset}

    def _persist(self) -> None:
        table = {"deletedTopics": dict(self.below)}
        persist_config_file(self.path, lambda: table)
