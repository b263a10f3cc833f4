"""What client calls raise. Every error is one clear line naming what failed and where."""

from __future__ import annotations


class ClientError(Exception):
    """An operation failed; `code` is the broker's response code when it answered."""

    def __init__(self, message: str, code: int | None = None, addr: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.addr = addr


class BrokerUnreachableError(ClientError):
    """No connection to `addr` after the bounded retries."""


class RequestTimeoutError(ClientError):
    """No answer within the timeout."""


class MessageRefusedError(ClientError):
    """The client refused the message before sending it (size, topic name, empty body), with
    the message the broker would have given."""
