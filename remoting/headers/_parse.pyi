from collections.abc import Callable, Mapping
from typing import Any

class Field:
    def __init__(
        self,
        key: str,
        setter: Callable[[object, Any], None],
        default: Any,
        required: bool,
        kind: int,
        low: int,
        high: int,
        head: str,
        width: str,
    ) -> None: ...

class Parser:
    def __init__(self, cls: type, fields: list[Field]) -> None: ...
    def __call__(self, ext: Mapping[str, str]) -> Any: ...
