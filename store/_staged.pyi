from rmqpy.store.dispatch_columns import DispatchColumns
from rmqpy.store.staged import StagedSends

def place_staged(
    table: dict[str, int], staged: StagedSends, start: int, store_timestamp: int
) -> dict[str, int | None]: ...
def add_staged(work: DispatchColumns, staged: StagedSends) -> None: ...
