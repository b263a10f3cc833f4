"""Which queues a group member takes (RocketMQ `AllocateMessageQueueAveragely`): queues and
client ids sorted, each client a contiguous block, the first `len(queues) % len(cids)` clients
one queue more."""

from __future__ import annotations

from collections.abc import Sequence

from rmqpy.client.message import MessageQueue


def allocate_averagely(
    client_id: str, cids: Sequence[str], queues: Sequence[MessageQueue]
) -> list[MessageQueue]:
    all_cids = sorted(cids)
    all_queues = sorted(queues)  # topic, broker name, queue id: MessageQueue.compareTo
    if client_id not in all_cids or not all_queues:
        return []
    index = all_cids.index(client_id)
    n, m = len(all_queues), len(all_cids)
    mod = n % m
    if n <= m:
        size = 1
    elif mod > 0 and index < mod:
        size = n // m + 1
    else:
        size = n // m
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [all_queues[(start + i) % n] for i in range(min(size, n - start))] if start < n else []
