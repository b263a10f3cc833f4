"""Failing closed: a broker asked for protection it cannot give does not start.

A broker.conf written for Apache RocketMQ may turn on plain ACL (`aclEnable=true`) or TLS
(`tls.server.mode=enforcing`, `useTLS=true`), or carry keys of a newer release's
authentication. Started anyway, with those keys ignored as unknown, the broker would serve
everyone who reaches its ports while its operator believes otherwise. So a setting that asks
for access control this broker does not have, and any security setting it does not know,
stop the start with one line naming the key. Other unknown settings stay warnings.
"""

from __future__ import annotations

from collections.abc import Mapping

from config.broker_config import Settings
from config.properties import ConfigError

# Unknown keys holding any of these (case ignored) are security settings: RocketMQ 4.x ACL
# (aclEnable, plainAclFile, accessKey, secretKey), TLS (useTLS, tls.server.mode,
# tls.server.certPath, ...), 5.x authentication (authenticationEnabled, ...), and the like.
SECURITY_WORDS = ("acl", "tls", "ssl", "auth", "secret", "accesskey", "password", "token",
                  "cert", "credential")  # fmt: skip


def is_security_key(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in SECURITY_WORDS)


def refuse_unprotected(settings: Settings, unknown: Mapping[str, str]) -> None:
    """ConfigError, naming the key, for a security setting this broker cannot honour."""
    if settings.broker.acl_enable:
        raise ConfigError(
            "aclEnable=true: this broker has no access control, and will not start "
            "unprotected; restrict who reaches its ports (bindAddress, a firewall) and remove "
            "aclEnable"
        )
    for key in unknown:
        if is_security_key(key):
            raise ConfigError(
                f"unknown security setting {key}: the broker does not start with a security "
                "setting it cannot honour"
            )
