from collections.abc import Sequence

from rmqpy.store.commitlog import WrittenSegment
from rmqpy.store.dispatch import ReputService
from rmqpy.store.dispatch_columns import DispatchColumns
from rmqpy.store.staged import StagedSends

def place_staged(
    table: dict[str, int], staged: StagedSends, start: int, store_timestamp: int
) -> dict[str, int | None]: ...
def add_staged(work: DispatchColumns, staged: StagedSends) -> None: ...
def dispatch_staged(reput: ReputService, segments: Sequence[WrittenSegment]) -> int: ...
