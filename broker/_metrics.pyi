from collections.abc import Sequence

from broker.context import RequestContext
from broker.metrics import Histogram, InKey, RpcKey
from remoting.command import RemotingCommand
from store.commitlog import PutMessageResult
from store.message import Message
from store.staged import StagedSends

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
