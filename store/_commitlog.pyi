from collections.abc import Sequence

from rmqpy.store.commitlog import CommitLog, PutMessageResult, _Segment
from rmqpy.store.message import Message

def place_singles(
    commitlog: CommitLog,
    groups: Sequence[Sequence[Message]],
    index: int,
    results: list[PutMessageResult | None],
    seg: _Segment,
    store_ts: int,
    sync: bool,
) -> int: ...
def validate_groups(
    commitlog: CommitLog, groups: Sequence[Sequence[Message]]
) -> list[PutMessageResult | None]: ...
