import mmap
from collections.abc import Set as AbstractSet

def gather(
    mapping: mmap.mmap,
    base: int,
    written: int,
    entries: bytes,
    tag_codes: AbstractSet[int] | None,
    low: int,
    max_count: int,
    max_bytes: int,
) -> tuple[bytes, list[int], int]: ...
