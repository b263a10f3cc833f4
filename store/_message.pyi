from store.message import Message, MessageTemplate

def fill(
    template: MessageTemplate,
    msg: Message,
    body: bytes,
    flag: int,
    properties: str,
    born_timestamp: int,
) -> None: ...
