from collections.abc import Sequence

from rmqpy.broker.clients import Subscription
from rmqpy.broker.context import RequestContext
from rmqpy.broker.long_polling import ParkedPull as ReferenceParkedPull
from rmqpy.broker.long_polling import PullRequestHoldService
from rmqpy.remoting.headers.pull import PullMessageRequestHeader
from rmqpy.store.dispatch import Arrival

class ParkedPull:
    ctx: RequestContext
    topic: str
    queue_id: int
    offset: int
    subscription: Subscription
    deadline_s: float
    header: PullMessageRequestHeader
    def __init__(
        self,
        ctx: RequestContext,
        topic: str,
        queue_id: int,
        offset: int,
        subscription: Subscription,
        deadline_s: float,
        header: PullMessageRequestHeader,
    ) -> None: ...

def park(hold: PullRequestHoldService, pull: ReferenceParkedPull | ParkedPull) -> None: ...
def on_arrivals(hold: PullRequestHoldService, arrivals: Sequence[Arrival]) -> None: ...
