"""Delayed messages (RocketMQ 4.x `ScheduleMessageService` and its delay levels).

A put whose DELAY property names a level (1..N of `messageDelayLevel`, "1s 5s 10s 30s 1m 2m
3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h" by default) is stored under `SCHEDULE_TOPIC_XXXX`,
queue level-1, with its own topic and queue kept in REAL_TOPIC and REAL_QID. Dispatch gives
such an entry the time it is due as its tags code (store time + the level's delay). The
service reads each level's queue in order from its offset in `config/delayOffset.json`, and
puts every message that is due back under its own topic and queue, without DELAY, as a new
record; a put that fails is tried again on the next round, so nothing due is skipped.
Offsets are persisted every 10 s and on shutdown (a crash delivers again from the last
persisted offset: at least once, as RocketMQ).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import structlog

from rmqpy.store.config_files import load_config_file, persist_config_file, reading
from rmqpy.store.flush import ServiceThread
from rmqpy.store.layout import CQ_PLACEHOLDER, MARK_DELAY, SCHEDULE_TOPIC, MessageConst
from rmqpy.store.message import Message, decode_record, message_from_record

if TYPE_CHECKING:
    from rmqpy.store.commitlog import PutMessageResult
    from rmqpy.store.consume_queue_store import ConsumeQueueStore

log = structlog.get_logger(__name__)

POLL_S = 0.1  # RocketMQ checks each level every 100 ms
PERSIST_EVERY_S = 10.0  # flushDelayOffsetInterval
BATCH = 32  # entries read per level per round


def delay_level(msg: Message, max_level: int) -> int:
    """The level a put asks for (0: none), capped at the last one as RocketMQ does; only for
    messages that take a queue offset (not prepared or rolled-back transaction halves)."""
    if not msg.marks & MARK_DELAY or not msg.queued or msg.topic == SCHEDULE_TOPIC:
        return 0
    text = msg.get_property(MessageConst.DELAY) or ""
    try:
        level = int(text)
    except ValueError:
        return 0
    return min(level, max_level) if level > 0 else 0


def scheduled(msg: Message, level: int) -> Message:
    """`msg` as stored while it waits: the schedule topic, queue level-1, its own topic and
    queue kept in properties."""
    props = {
        **msg.properties,
        MessageConst.DELAY: str(level),
        MessageConst.REAL_TOPIC: msg.topic,
        MessageConst.REAL_QID: str(msg.queue_id),
    }
    return Message(
        SCHEDULE_TOPIC,
        msg.body,
        level - 1,
        props,
        flag=msg.flag,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
    )


class ScheduleService(ServiceThread):
    """Delivers due messages from each level's queue (one thread for all levels)."""

    name = "schedule"

    def __init__(
        self,
        levels: Sequence[int],
        consume_queues: ConsumeQueueStore,
        read_record: Callable[[int, int], bytes | None],
        put: Callable[[Message], PutMessageResult],
        config_dir: str,
        clock_ms: Callable[[], int],
    ) -> None:
        super().__init__()
        self.levels = list(levels)
        self.consume_queues = consume_queues
        self.read_record = read_record
        self.put = put
        self.path = os.path.join(config_dir, "delayOffset.json")
        self.clock_ms = clock_ms
        self.offsets: dict[int, int] = {}  # level -> next offset in its queue
        self.delivered = 0
        self._persisted: dict[int, int] = {}
        self._last_persist = time.monotonic()

    def load(self) -> None:
        data = load_config_file(self.path) or {}
        with reading(self.path):
            table = data.get("offsetTable") or {}
            self.offsets = {int(level): int(offset) for level, offset in table.items()}
        self._persisted = dict(self.offsets)

    def persist(self) -> None:
        if self.offsets != self._persisted:
            table = {"offsetTable": dict(sorted(self.offsets.items()))}
            persist_config_file(self.path, lambda: table)
            self._persisted = dict(self.offsets)
        self._last_persist = time.monotonic()

    def run_once(self) -> None:
        self.deliver_due()
        if time.monotonic() - self._last_persist >= PERSIST_EVERY_S:
            self.persist()
        self._stopped.wait(POLL_S)

    def on_stop(self) -> None:
        self.persist()

    def pending_floor(self) -> int | None:
        """The commitlog offset of the oldest delayed message not yet delivered (None: none
        waits): expiry keeps the files from there on, or the message would be gone when due
        (a fileReservedTime shorter than the longest delay, 2 h by default)."""
        floor: int | None = None
        for level in range(1, len(self.levels) + 1):
            cq = self.consume_queues.find(SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            offset = max(self.offsets.get(level, 0), cq.min_offset_in_queue())
            for phy, size, _due in cq.get_entries(offset, BATCH):
                if size != CQ_PLACEHOLDER[1]:
                    floor = phy if floor is None else min(floor, phy)
                    break
        return floor

    def deliver_due(self) -> int:
        """Put back every message that is due, level by level; how many were."""
        delivered = 0
        for level in range(1, len(self.levels) + 1):
            delivered += self._deliver_level(level)
        self.delivered += delivered
        return delivered

    def _deliver_level(self, level: int) -> int:
        cq = self.consume_queues.find(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return 0
        offset = max(self.offsets.get(level, 0), cq.min_offset_in_queue())
        now = self.clock_ms()
        delivered = 0
        while not self.stopped:
            entries = cq.get_entries(offset, BATCH)
            if not entries:
                break
            for phy, size, due in entries:
                if due > now:
                    self.offsets[level] = offset
                    return delivered
                msg = self._restored(phy, size)
                if msg is not None:
                    if not self.put(msg).ok:
                        self.offsets[level] = offset
                        return delivered  # tried again next round
                    delivered += 1
                else:
                    log.warning("delayed message unreadable, skipped", level=level, offset=offset)
                offset += 1
        self.offsets[level] = offset
        return delivered

    def _restored(self, phy: int, size: int) -> Message | None:
        data = self.read_record(phy, size)
        if data is None:  # expired, or not there
            return None
        try:
            return restored(data)
        except ValueError:  # a damaged record (RecordError) or a REAL_QID that is no number
            return None


def restored(data: bytes) -> Message:
    """A due message as its consumers get it: its own topic and queue, without DELAY;
    REAL_TOPIC and REAL_QID stay, as RocketMQ's `ScheduleMessageService` keeps them."""
    record = decode_record(data, 0, check_crc=False)
    props = dict(record.properties)
    topic = props.get(MessageConst.REAL_TOPIC, record.topic)
    queue_id = int(props.get(MessageConst.REAL_QID, "0") or 0)
    props.pop(MessageConst.DELAY, None)
    return message_from_record(
        record,
        topic,
        queue_id,
        props,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
    )
