from array import array
from collections.abc import Callable

from rmqpy.bench.load import Patchable

def render(
    patchable: Patchable, opaque: int, born: bytes, key_base: int, stamp: bytes
) -> bytes: ...
def split_responses(
    buf: bytearray, on_response: Callable[[int, int, bytes], None], frames: bool = True
) -> None: ...
def tally_answers(
    buf: bytearray,
    sent_at: dict[int, float],
    samples: array[float],
    ok_codes: frozenset[int] | None,
    now: float,
) -> tuple[int, int]: ...
def count_records(frame: bytes, stamp: bool, e2e: array[float]) -> tuple[int, int]: ...
