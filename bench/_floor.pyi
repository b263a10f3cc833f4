from typing import Any

class FloorState:
    data: dict[int, bytearray]
    starts: dict[int, list[int]]
    first: dict[int, int]
    parked: dict[int, tuple[Any, int, int, int, float]]
    phy: int
    def max_offset(self, queue_id: int) -> int: ...
    def serve_read(self, transport: Any, buf: bytearray) -> int: ...
    def expired(self, now: float) -> list[tuple[Any, int]]: ...
