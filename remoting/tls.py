"""TLS for the remoting ports and for clients, with Python's `ssl` (RocketMQ's `TlsHelper`).

A server runs in one of RocketMQ's three modes (`tls.server.mode`): `disabled` (plain TCP
only), `permissive` (each connection chooses: one that opens with a TLS handshake record
gets TLS, any other stays plain, as Java tells them apart by the first byte), `enforcing`
(TLS only: a plain client's connection is closed when its handshake fails). Mutual TLS is
`tls.server.need.client.auth` `optional` or `require`, checked against
`tls.server.trustCertPath`.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

TLS_MODES = ("disabled", "permissive", "enforcing")
CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}
HANDSHAKE_RECORD = 0x16  # the first byte of a TLS ClientHello


class TlsConfigError(ValueError):
    """TLS settings that cannot make a context: the message names the setting."""


@dataclass(frozen=True)
class ServerTls:
    mode: str
    context: ssl.SSLContext | None  # None only when disabled

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"


def server_tls(
    mode: str,
    cert_path: str = "",
    key_path: str = "",
    key_password: str = "",
    need_client_auth: str = "none",
    trust_cert_path: str = "",
) -> ServerTls:
    """The server side of `tls.server.*`; TlsConfigError naming the setting at fault."""
    if mode not in TLS_MODES:
        raise TlsConfigError(f"tls.server.mode must be one of {', '.join(TLS_MODES)}, not {mode!r}")
    if mode == "disabled":
        return ServerTls(mode, None)
    if not cert_path or not key_path:
        raise TlsConfigError(
            f"tls.server.mode={mode} needs tls.server.certPath and tls.server.keyPath"
        )
    if need_client_auth not in CLIENT_AUTH:
        raise TlsConfigError(
            f"tls.server.need.client.auth must be one of {', '.join(CLIENT_AUTH)}, "
            f"not {need_client_auth!r}"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_path, key_path, password=key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(
            f"tls.server.certPath {cert_path} / tls.server.keyPath {key_path}: {_reason(exc)}"
        ) from None
    context.verify_mode = CLIENT_AUTH[need_client_auth]
    if context.verify_mode != ssl.CERT_NONE:
        if not trust_cert_path:
            raise TlsConfigError(
                f"tls.server.need.client.auth={need_client_auth} needs tls.server.trustCertPath"
            )
        try:
            context.load_verify_locations(trust_cert_path)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"tls.server.trustCertPath {trust_cert_path}: {_reason(exc)}"
            ) from None
    return ServerTls(mode, context)


def client_context(
    ca_file: str | None = None, cert_path: str | None = None, key_path: str | None = None
) -> ssl.SSLContext:
    """A client's context: the server's certificate checked against `ca_file` (else the
    system's authorities) and its address; with `cert_path`, a client certificate for
    mutual TLS."""
    context = ssl.create_default_context(cafile=ca_file)
    if cert_path:
        context.load_cert_chain(cert_path, key_path or None)
    return context


def _reason(exc: OSError | ssl.SSLError) -> str:
    return exc.strerror or getattr(exc, "reason", None) or str(exc)
