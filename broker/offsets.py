"""Committed consumer offsets (RocketMQ `ConsumerOffsetManager`), persisted to
`config/consumerOffset.json` every `flushConsumerOffsetInterval` and at shutdown.

The file keeps fastjson's shape, `{"offsetTable":{"topic@group":{0:12,1:7}}}` (bare integer
keys when Java wrote it; we write them quoted, which fastjson reads too).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import structlog

from rmqpy.store.config_files import load_config_file, persist_config_file, reading

log = structlog.get_logger(__name__)

TOPIC_GROUP_SEPARATOR = "@"
FIRST_OFFSET_PERSIST_S = 0.05


class ConsumerOffsetManager:
    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self._lock = threading.Lock()
        self.table: dict[str, dict[int, int]] = {}
        self._dirty = False
        self._soon: threading.Timer | None = None  # a write of new first offsets, pending

    def load(self) -> None:
        data = load_config_file(self.path)
        if data is None:
            return
        with reading(self.path):
            for key, queues in (data.get("offsetTable") or {}).items():
                self.table[key] = {int(q): int(o) for q, o in queues.items()}
        log.info("consumer offsets loaded", path=self.path, entries=len(self.table))

    def persist(self) -> None:
        try:
            persist_config_file(self.path, self._file_json)
        except OSError:
            with self._lock:
                self._dirty = True  # not written: the next persist tries again
            raise

    def _file_json(self) -> dict[str, Any] | None:
        """The table to write, None when it is unchanged since the last write."""
        with self._lock:
            if not self._dirty and os.path.exists(self.path):
                return None
            self._dirty = False
            return {
                "offsetTable": {
                    key: {str(q): o for q, o in sorted(queues.items())}
                    for key, queues in sorted(self.table.items())
                }
            }

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Keep `offset`; written to the file with the next periodic persist, except a
        group's first offset for a queue, which is written within FIRST_OFFSET_PERSIST_S
        (one write for all the first offsets of that moment: a new group with many queues
        makes one write, not one per queue, and no commit waits for it). After a crash an
        offset some seconds old only repeats messages, but no offset at all makes the
        queue's next owner start where its consumeFromWhere says, CONSUME_FROM_LAST by
        default: at the queue's end, skipping everything the group had not consumed."""
        key = topic + TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            queues = self.table.setdefault(key, {})
            first = queue_id not in queues
            if queues.get(queue_id) != offset:
                queues[queue_id] = offset
                self._dirty = True
            if first and self._soon is None:
                self._soon = threading.Timer(FIRST_OFFSET_PERSIST_S, self._persist_soon)
                self._soon.daemon = True
                self._soon.start()

    def _persist_soon(self) -> None:
        with self._lock:
            self._soon = None
        try:
            self.persist()
        except OSError as exc:  # (the periodic persist tries again)
            log.error("cannot save consumer offsets", path=self.path, error=str(exc))

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, -1 when there is none."""
        queues = self.table.get(topic + TOPIC_GROUP_SEPARATOR + group)
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def all_json(self) -> dict[str, Any]:
        """GET_ALL_CONSUMER_OFFSET's body (`ConsumerOffsetSerializeWrapper`)."""
        with self._lock:
            return {
                "offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self.table.items()}
            }

    def committed(self) -> dict[tuple[str, str], dict[int, int]]:
        """A copy of every committed offset: (group, topic) -> queue id -> offset."""
        with self._lock:
            out: dict[tuple[str, str], dict[int, int]] = {}
            for key, queues in self.table.items():
                topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
                out[(group, topic)] = dict(queues)
            return out

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            for key in [k for k in self.table if k.rpartition(TOPIC_GROUP_SEPARATOR)[0] == topic]:
                del self.table[key]
                self._dirty = True

    def remove_group(self, group: str) -> None:
        with self._lock:
            for key in [k for k in self.table if k.rpartition(TOPIC_GROUP_SEPARATOR)[2] == group]:
                del self.table[key]
                self._dirty = True

    def topics_of(self, group: str) -> set[str]:
        """The topics `group` has committed offsets for (Java's `whichTopicByConsumer`)."""
        with self._lock:
            keys = list(self.table)
        return {
            topic
            for topic, _, g in (k.rpartition(TOPIC_GROUP_SEPARATOR) for k in keys)
            if g == group
        }

    def groups_of(self, topic: str) -> set[str]:
        """The groups with committed offsets for `topic` (Java's `whichGroupByTopic`)."""
        with self._lock:
            keys = list(self.table)
        return {g for t, _, g in (k.rpartition(TOPIC_GROUP_SEPARATOR) for k in keys) if t == topic}
