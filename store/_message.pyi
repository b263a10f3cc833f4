from collections.abc import Sequence

from rmqpy.store.message import Message, MessageTemplate, RecordEncoder

def fill(
    template: MessageTemplate,
    msg: Message,
    body: bytes,
    flag: int,
    properties: str,
    born_timestamp: int,
) -> None: ...
def encode(
    encoder: RecordEncoder,
    parts: list[bytes],
    records: Sequence[Message],
    queue_offsets: Sequence[int],
    phys: Sequence[int],
    store_timestamp: int,
) -> None: ...
