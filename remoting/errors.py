"""Protocol errors, split the h11 way: who broke the protocol decides what happens next.

`RemoteProtocolError`: the peer sent bytes that are not a valid frame or header; the
connection is closed (Java's `NettyDecoder` closes the channel too). `LocalProtocolError`:
our own code tried to send something the protocol cannot carry; that is a bug here.
`RemotingConnectionError` / `RemotingTimeoutError`: what a caller of `invoke` sees when the
connection goes away or no response comes in time.
"""

from __future__ import annotations


class RemotingError(Exception):
    """Base of every remoting error."""


class RemoteProtocolError(RemotingError):
    """The peer violated the protocol; close its connection."""


class ForeignProtocolError(RemoteProtocolError):
    """The peer speaks another protocol (HTTP, gRPC, TLS) on this port; `reply` is what to
    write back before closing, in that protocol, when there is something useful to say."""

    def __init__(self, message: str, reply: bytes = b"") -> None:
        super().__init__(message)
        self.reply = reply


class LocalProtocolError(RemotingError):
    """We were about to send something the protocol cannot carry."""


class RemotingConnectionError(RemotingError):
    """The connection closed (or never opened) before the response came."""


class RemotingTimeoutError(RemotingError):
    """No response within the timeout."""
