"""Subscription groups (RocketMQ `SubscriptionGroupManager`), kept in
`config/subscriptionGroup.json`, auto-created on first use when `autoCreateSubscriptionGroup`."""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass, fields
from typing import Any

import structlog

from rmqpy.store.config_files import TableText, load_config_file, persist_config_text, reading

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """RocketMQ `SubscriptionGroupConfig`, field names as fastjson writes them."""

    groupName: str  # noqa: N815 - the JSON name
    consumeEnable: bool = True  # noqa: N815
    consumeFromMinEnable: bool = True  # noqa: N815
    consumeBroadcastEnable: bool = True  # noqa: N815
    retryQueueNums: int = 1  # noqa: N815
    retryMaxTimes: int = 16  # noqa: N815
    brokerId: int = 0  # noqa: N815
    whichBrokerWhenConsumeSlowly: int = 1  # noqa: N815
    notifyConsumerIdsChangedEnable: bool = True  # noqa: N815

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> SubscriptionGroupConfig:
        """The known fields, each of its declared type (ValueError when one is not: a
        retryMaxTimes of "x" would fail the first send-back that compared it)."""
        known: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in value:
                known[f.name] = _of_type(f.name, value[f.name], str(f.type))
        return cls(**known)


def _of_type(name: str, value: Any, kind: str) -> Any:
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{name} {value!r} is not true or false")
        return value
    if kind == "int":
        if isinstance(value, bool):
            raise ValueError(f"{name} {value!r} is not a number")
        return int(value)
    return str(value)


class SubscriptionGroupManager:
    def __init__(self, config_dir: str, auto_create: bool, retry_max_times: int) -> None:
        self.path = os.path.join(config_dir, "subscriptionGroup.json")
        self.auto_create = auto_create
        self.retry_max_times = retry_max_times
        self._lock = threading.Lock()
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self._text: TableText[SubscriptionGroupConfig] = TableText("subscriptionGroupTable", asdict)

    def load(self) -> None:
        data = load_config_file(self.path)
        if data is None:
            return
        with reading(self.path):
            for name, value in (data.get("subscriptionGroupTable") or {}).items():
                self.table[name] = SubscriptionGroupConfig.from_json({"groupName": name, **value})

    def persist(self) -> None:
        persist_config_text(self.path, self._file_text)

    def _file_text(self) -> str:
        with self._lock:
            return self._text.render({}, self.table)

    def wrapper_text(self) -> str:
        """Every group's config, as subscriptionGroup.json holds them and a Java broker
        answers GET_ALL_SUBSCRIPTIONGROUP_CONFIG (`SubscriptionGroupManager.encode`)."""
        return self._file_text()

    def count(self) -> int:
        return len(self.table)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; auto-created (and persisted) when allowed."""
        config = self.table.get(group)
        if config is not None or not self.auto_create:
            return config
        with self._lock:
            config = self.table.setdefault(
                group, SubscriptionGroupConfig(group, retryMaxTimes=self.retry_max_times)
            )
        log.info("subscription group created", group=group)
        try:
            self.persist()
        except OSError as exc:  # a full disk: the group works, and is saved with a later change
            log.error("cannot save subscription groups", path=self.path, error=str(exc))
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        """Create or replace a group's config (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)."""
        with self._lock:
            known = config.groupName in self.table
            self.table[config.groupName] = config
        log.info(
            "subscription group " + ("updated" if known else "created"), group=config.groupName
        )
        self.persist()

    def delete(self, group: str) -> bool:
        """Forget a group's config; False when there was none."""
        with self._lock:
            gone = self.table.pop(group, None)
        if gone is None:
            return False
        log.info("subscription group deleted", group=group)
        self.persist()
        return True
