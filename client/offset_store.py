"""Where a consumer keeps its progress: on the broker (clustering, RocketMQ
`RemoteBrokerOffsetStore`) or in a local file (broadcasting, `LocalFileOffsetStore`).

Offsets are "next message to consume" consume-queue indexes. `update` only records; `persist`
writes (to the broker with UPDATE_CONSUMER_OFFSET, or the file atomically)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from rmqpy.client.errors import ClientError
from rmqpy.client.instance import ClientInstance
from rmqpy.client.message import MessageQueue
from rmqpy.client.transport import check
from rmqpy.remoting.codes import RequestCode, ResponseCode
from rmqpy.remoting.headers.offsets import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)


class OffsetStore(Protocol):
    async def read(self, mq: MessageQueue) -> int | None: ...
    def update(self, mq: MessageQueue, offset: int) -> None: ...
    async def persist(self, mqs: Iterable[MessageQueue]) -> None: ...
    def remove(self, mq: MessageQueue) -> None: ...


class RemoteOffsetStore:
    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self.table: dict[MessageQueue, int] = {}
        self._persisted: dict[MessageQueue, int] = {}

    async def read(self, mq: MessageQueue) -> int | None:
        """The broker's committed offset, None when it has none. We ask with
        setZeroIfNotFound=false (as RocketMQ 5 clients do): a 4.x broker answers 0 for a new
        group whose queue still starts at 0, which would defeat CONSUME_FROM_LAST."""
        addr = await self.instance.broker_addr_of(mq.topic, mq.broker_name)
        header = QueryConsumerOffsetRequestHeader(
            self.group, mq.topic, mq.queue_id, set_zero_if_not_found=False
        )
        response = await self.instance.remoting.invoke(
            addr, RequestCode.QUERY_CONSUMER_OFFSET, header, timeout_s=self.instance.timeout_s
        )
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        check(response, addr)
        offset = OffsetResponseHeader.from_ext(response.ext_fields).offset
        self._persisted[mq] = offset
        return offset

    def update(self, mq: MessageQueue, offset: int) -> None:
        self.table[mq] = offset

    async def persist(self, mqs: Iterable[MessageQueue]) -> None:
        for mq in list(mqs):
            offset = self.table.get(mq)
            if offset is None or self._persisted.get(mq) == offset:
                continue
            addr = await self.instance.broker_addr_of(mq.topic, mq.broker_name)
            header = UpdateConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id, offset)
            response = await self.instance.remoting.invoke(
                addr, RequestCode.UPDATE_CONSUMER_OFFSET, header, timeout_s=self.instance.timeout_s
            )
            check(response, addr)
            self._persisted[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)
        self._persisted.pop(mq, None)


def _key(mq: MessageQueue) -> str:
    return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"


class LocalOffsetStore:
    """`<dir>/<group>/offsets.json`: `{"offsetTable": {"topic@broker@queueId": offset}}`."""

    def __init__(self, directory: str | Path, group: str) -> None:
        self.path = Path(directory).expanduser() / group / "offsets.json"
        self.table: dict[MessageQueue, int] = {}
        self._stored: dict[str, int] = {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self._stored = {str(k): int(v) for k, v in data.get("offsetTable", {}).items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError) as exc:
            raise ClientError(f"unreadable offsets file {self.path}: {exc}") from exc

    async def read(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq, self._stored.get(_key(mq)))

    def update(self, mq: MessageQueue, offset: int) -> None:
        self.table[mq] = offset

    async def persist(self, mqs: Iterable[MessageQueue]) -> None:
        for mq in mqs:
            if mq in self.table:
                self._stored[_key(mq)] = self.table[mq]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"offsetTable": self._stored}, fh, indent=2, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)
