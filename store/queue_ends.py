"""Where each consume queue ended at the last clean stop: `config/consumeQueueEnds.json`, a
file of ours (RocketMQ keeps none and ignores it).

A queue's newest entries zeroed or cut short while the broker was stopped (or its files gone)
look like a queue that simply ended earlier: nothing in the queue itself tells. After a clean
stop the dispatch does not read the commitlog again, so those messages were never served and
new sends took their queue offsets. This record says where each queue ended; a start finding
a queue shorter has it rebuilt from the commitlog. It is read once and removed at start: after
a crash there is none, and recovery re-dispatches from the checkpoint anyway.
"""

from __future__ import annotations

import contextlib
import os

import structlog

from rmqpy.store.config_files import ConfigFileError, load_config_file, persist_config_file

FILE_NAME = "consumeQueueEnds.json"

log = structlog.get_logger(__name__)


def save_queue_ends(config_dir: str, ends: dict[str, int]) -> None:
    """Record each queue's max offset (`topic-queueId` -> offset) at a clean stop."""
    os.makedirs(config_dir, exist_ok=True)
    persist_config_file(os.path.join(config_dir, FILE_NAME), lambda: {"queueEnds": ends})


def take_queue_ends(config_dir: str) -> dict[str, int]:
    """The ends the last clean stop recorded, removing the record; empty when there is
    none or it cannot be read (logged: then nothing is checked, as before)."""
    path = os.path.join(config_dir, FILE_NAME)
    try:
        data = load_config_file(path) or {}
        ends = {str(k): int(v) for k, v in (data.get("queueEnds") or {}).items()}
    except (ConfigFileError, ValueError, TypeError, AttributeError) as exc:
        log.warning("consume queue ends unreadable; queues not checked for lost tails",
                    path=path, error=str(exc))  # fmt: skip
        ends = {}
    for candidate in (path, path + ".bak"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(candidate)
    return ends
