from collections.abc import Sequence

from rmqpy.broker.context import RequestContext
from rmqpy.broker.metrics import BrokerMetrics, Histogram, InKey, RpcKey
from rmqpy.remoting.command import RemotingCommand
from rmqpy.store.commitlog import PutMessageResult
from rmqpy.store.message import Message
from rmqpy.store.staged import StagedSends

def tally_sizes(
    sizes: dict[InKey, Histogram],
    groups: Sequence[Sequence[Message]],
    results: Sequence[PutMessageResult],
) -> None: ...
def tally_latencies(
    rpc: dict[RpcKey, Histogram],
    answers: Sequence[tuple[RequestContext, RemotingCommand]],
    now: float,
) -> None: ...
def tally_staged(sizes: dict[InKey, Histogram], staged: StagedSends) -> None: ...
def tally_pull(
    metrics: BrokerMetrics,
    key: RpcKey,
    latency: float,
    group: str,
    topic: str,
    queue_id: int,
    next_offset: int,
    messages: int,
    size: int,
) -> None: ...
def tally_answered(
    metrics: BrokerMetrics,
    request_code: int,
    count: int,
    response_code: int,
    latency: float,
    staged: StagedSends,
) -> None: ...
