"""Topic configs (RocketMQ `TopicConfigManager`), kept in `config/topics.json`.

The file is fastjson's form, so a Java broker's file loads here and ours loads there:
`{"dataVersion":{...},"topicConfigTable":{"T":{"topicName":"T","readQueueNums":8,...}}}`.
Topics are auto-created on first send (`autoCreateTopicEnable`) and retry/DLQ topics on first
send-back; every change is persisted at once and bumps the data version.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from rmqpy.broker.context import ResourceRefusal
from rmqpy.remoting.codes import DEFAULT_TOPIC, PERM_INHERIT, PERM_READ, PERM_WRITE
from rmqpy.store.config_files import TableText, load_config_file, persist_config_text, reading
from rmqpy.store.layout import SCHEDULE_TOPIC
from rmqpy.store.message import validate_topic

log = structlog.get_logger(__name__)

SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
# RocketMQ's TopicValidator.SYSTEM_TOPIC_SET, less BenchmarkTest (`rmqpy bench` creates it):
# admin requests may not create, change or delete these, nor the cluster's and broker's own.
SYSTEM_TOPICS = frozenset(
    {DEFAULT_TOPIC, SCHEDULE_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT, "RMQ_SYS_TRACE_TOPIC",
     "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"}
)  # fmt: skip
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """RocketMQ `TopicConfig`, field names as fastjson writes them."""

    topicName: str  # noqa: N815 - the JSON name
    readQueueNums: int = 8  # noqa: N815
    writeQueueNums: int = 8  # noqa: N815
    perm: int = PERM_READ | PERM_WRITE
    topicFilterType: str = "SINGLE_TAG"  # noqa: N815
    topicSysFlag: int = 0  # noqa: N815
    order: bool = False

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> TopicConfig:
        return cls(
            topicName=str(value["topicName"]),
            readQueueNums=int(value.get("readQueueNums", 8)),
            writeQueueNums=int(value.get("writeQueueNums", 8)),
            perm=int(value.get("perm", 6)),
            topicFilterType=str(value.get("topicFilterType", "SINGLE_TAG")),
            topicSysFlag=int(value.get("topicSysFlag", 0)),
            order=bool(value.get("order", False)),
        )

    def to_json(self) -> dict[str, Any]:
        # Spelled out: `dataclasses.asdict` copies recursively, and made a topic create on
        # a broker of 2,000 topics spend half its 40 ms here (the file and the route table
        # take every topic's dict on each change).
        return {
            "topicName": self.topicName,
            "readQueueNums": self.readQueueNums,
            "writeQueueNums": self.writeQueueNums,
            "perm": self.perm,
            "topicFilterType": self.topicFilterType,
            "topicSysFlag": self.topicSysFlag,
            "order": self.order,
        }

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)


class DataVersion:
    """RocketMQ `DataVersion`: bumped on every change, compared by the name server."""

    def __init__(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter = 0

    def next(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "stateVersion": 0, "timestamp": self.timestamp}

    def load(self, value: dict[str, Any]) -> None:
        self.counter = int(value.get("counter", 0))
        self.timestamp = int(value.get("timestamp", self.timestamp))


class TopicConfigManager:
    def __init__(
        self,
        config_dir: str,
        cluster_name: str,
        broker_name: str,
        default_queue_nums: int,
    ) -> None:
        self.path = os.path.join(config_dir, "topics.json")
        self.default_queue_nums = default_queue_nums
        self.own_topics = (cluster_name, broker_name)
        self.data_version = DataVersion()
        self._lock = threading.Lock()
        self.table: dict[str, TopicConfig] = {}
        self._text = TableText("topicConfigTable", TopicConfig.to_json)
        self.on_change: list[Callable[[], None]] = []  # run after a change (route registration)
        # Why a new topic (new queue files) may not be made now, or None (open files).
        self.room_for_new_files: Callable[[], str | None] = lambda: None
        system = [
            # Its queue count caps a topic a send creates (defaultTopicQueueNums, as in Java).
            TopicConfig(
                DEFAULT_TOPIC,
                default_queue_nums,
                default_queue_nums,
                PERM_READ | PERM_WRITE | PERM_INHERIT,
            ),
            TopicConfig(SELF_TEST_TOPIC, 1, 1),
            TopicConfig(OFFSET_MOVED_EVENT, 1, 1),
            TopicConfig(cluster_name, 16, 16, PERM_READ | PERM_WRITE | PERM_INHERIT),
            TopicConfig(broker_name, 1, 1, PERM_READ | PERM_WRITE | PERM_INHERIT),
        ]
        for config in system:
            self.table[config.topicName] = config

    def load(self) -> None:
        data = load_config_file(self.path)
        if data is None:
            return
        with reading(self.path):
            for name, value in (data.get("topicConfigTable") or {}).items():
                self.table[name] = TopicConfig.from_json({"topicName": name, **value})
            self.data_version.load(data.get("dataVersion") or {})
        log.info("topics loaded", path=self.path, topics=len(self.table))

    def persist(self) -> None:
        persist_config_text(self.path, self._file_text)

    def _file_text(self) -> str:
        with self._lock:
            return self._text.render({"dataVersion": self.data_version.to_json()}, self.table)

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def is_system(self, topic: str) -> bool:
        """A topic the broker itself keeps (RocketMQ `TopicValidator.isSystemTopic`)."""
        return (
            topic in SYSTEM_TOPICS
            or topic.startswith(SYSTEM_TOPIC_PREFIX)
            or topic in self.own_topics
        )

    def put(self, config: TopicConfig) -> TopicConfig:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC); persisted at once."""
        problem = validate_topic(config.topicName)
        if problem is not None:
            raise ValueError(problem)
        if config.topicName not in self.table:
            self._check_room(config.topicName)
        with self._lock:
            before = self.table.get(config.topicName)
            self.table[config.topicName] = config
            self.data_version.next()
        self._changed_or_undo(config.topicName, before)
        return config

    def create_if_absent(
        self, topic: str, queue_nums: int | None = None, perm: int = PERM_READ | PERM_WRITE
    ) -> tuple[TopicConfig, bool]:
        """The topic's config, creating it with `queue_nums` queues when it is missing;
        returns (config, created)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing, False
        problem = validate_topic(topic)
        if problem is not None:
            raise ValueError(problem)
        nums = queue_nums or self.default_queue_nums
        self._check_room(topic)
        with self._lock:
            existing = self.table.get(topic)
            if existing is not None:
                return existing, False
            config = TopicConfig(topic, nums, nums, perm)
            self.table[topic] = config
            self.data_version.next()
        self._changed_or_undo(topic, None)
        log.info("topic created", topic=topic, queues=nums)
        return config, True

    def _check_room(self, topic: str) -> None:
        problem = self.room_for_new_files()
        if problem is not None:
            raise ResourceRefusal(f"topic {topic} not created: {problem}")

    def _changed_or_undo(self, topic: str, before: TopicConfig | None) -> None:
        """Persist a change to one topic; if that fails (no space, no descriptor), the table
        goes back to what the file holds and the error is raised: a topic is never served
        that a restart would forget."""
        try:
            self.persist()
        except OSError:
            with self._lock:
                if before is None:
                    self.table.pop(topic, None)
                else:
                    self.table[topic] = before
            raise
        for callback in self.on_change:
            callback()

    def create_for_send(
        self, topic: str, default_topic: str, client_queue_nums: int
    ) -> TopicConfig | None:
        """The topic's config, creating it for a send when it is missing (RocketMQ
        `createTopicInSendMessageMethod`): min(the client's defaultTopicQueueNums, the
        default topic's write queues) queues, the default topic's permission less INHERIT.
        None when the default topic the send names is missing or not inheritable."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        default = self.table.get(default_topic or DEFAULT_TOPIC)
        if default is None or not default.perm & PERM_INHERIT:
            log.warning("topic not created: its default topic is missing or not inheritable",
                        topic=topic, default_topic=default_topic)  # fmt: skip
            return None
        queues = max(1, min(client_queue_nums, default.writeQueueNums))
        config, _ = self.create_if_absent(topic, queues, default.perm & ~PERM_INHERIT)
        return config

    def delete(self, topic: str) -> bool:
        with self._lock:
            removed = self.table.pop(topic, None) is not None
            if removed:
                self.data_version.next()
        if removed:
            log.info("topic deleted", topic=topic)
            self._changed()
        return removed

    def _changed(self) -> None:
        self.persist()
        for callback in self.on_change:
            callback()

    def snapshot(self) -> dict[str, TopicConfig]:
        with self._lock:
            return dict(self.table)

    def wrapper_json(self) -> dict[str, Any]:
        """`TopicConfigSerializeWrapper`: GET_ALL_TOPIC_CONFIG's body and REGISTER_BROKER's."""
        table = self.snapshot()
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {n: c.to_json() for n, c in sorted(table.items())},
        }
