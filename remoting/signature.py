"""Request signatures of RocketMQ's plain ACL (`AclClientRPCHook`, `AclUtils`, `AclSigner`).

A signed request carries its account's `AccessKey` (and `SecurityToken`, when it has one) in
its extFields, and `Signature`: base64 (standard, padded) of HMAC-SHA1, keyed with the
account's secret key as UTF-8, over the extFields' values in the order of their keys
(`Signature` itself and `_UNIQUE_KEY_QUERY` left out) as UTF-8, followed by the body. The
client signs, the broker computes the same and compares; both sides use this module.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass

from rmqpy.remoting.command import RemotingCommand

# SessionCredentials' extFields names, and MixAll.UNIQUE_MSG_QUERY_FLAG.
ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
_UNSIGNED = (SIGNATURE, UNIQUE_KEY_QUERY)


def signed_content(ext_fields: Mapping[str, str], body: bytes) -> bytes:
    """The bytes a signature covers."""
    values = "".join(ext_fields[k] for k in sorted(ext_fields) if k not in _UNSIGNED)
    return values.encode("utf-8") + body


def signature(content: bytes, secret_key: str) -> str:
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True, slots=True)
class Credentials:
    """An ACL account to sign requests with (RocketMQ `SessionCredentials`)."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:  # never the secret in a log line or a traceback
        return f"Credentials(access_key={self.access_key!r})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Credentials | None:
        """`RMQPY_ACCESS_KEY`, `RMQPY_SECRET_KEY` (and `RMQPY_SECURITY_TOKEN`), when both
        keys are set."""
        env = os.environ if environ is None else environ
        access, secret = env.get("RMQPY_ACCESS_KEY"), env.get("RMQPY_SECRET_KEY")
        if not access or not secret:
            return None
        return cls(access, secret, env.get("RMQPY_SECURITY_TOKEN") or None)

    def sign(self, cmd: RemotingCommand) -> None:
        """Add the account and the signature of everything else to `cmd`'s extFields."""
        ext = cmd.ext_fields
        ext[ACCESS_KEY] = self.access_key
        if self.security_token:
            ext[SECURITY_TOKEN] = self.security_token
        ext[SIGNATURE] = signature(signed_content(ext, cmd.body), self.secret_key)
