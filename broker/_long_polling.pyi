from collections.abc import Sequence

# The compiled class has the reference dataclass's fields, and is typed as it.
from rmqpy.broker.long_polling import ParkedPull as ParkedPull
from rmqpy.broker.long_polling import PullRequestHoldService
from rmqpy.store.dispatch import Arrival

def park(hold: PullRequestHoldService, pull: ParkedPull) -> None: ...
def on_arrivals(hold: PullRequestHoldService, arrivals: Sequence[Arrival]) -> None: ...
