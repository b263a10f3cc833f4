"""Failing closed: a broker given security settings it does not know does not start.

A broker.conf written for Apache RocketMQ may turn on TLS (`tls.server.mode=enforcing`,
`useTLS=true`), or carry keys of a newer release's authentication. Started anyway, with
those keys ignored as unknown, the broker would serve everyone who reaches its ports while
its operator believes otherwise. So any security setting it does not know stops the start
with one line naming the key. Other unknown settings stay warnings. (`aclEnable` is known:
the broker checks every request then, or does not start without its ACL file.)
"""

from __future__ import annotations

from collections.abc import Mapping

from rmqpy.config.properties import ConfigError

# Unknown keys holding any of these (case ignored) are security settings: RocketMQ 4.x ACL
# (aclEnable, plainAclFile, accessKey, secretKey), TLS (useTLS, tls.server.mode,
# tls.server.certPath, ...), 5.x authentication (authenticationEnabled, ...), and the like.
SECURITY_WORDS = ("acl", "tls", "ssl", "auth", "secret", "accesskey", "password", "token",
                  "cert", "credential")  # fmt: skip


def is_security_key(key: str) -> bool:
    lowered = key.lower()
    return any(word in lowered for word in SECURITY_WORDS)


def refuse_unknown_security(unknown: Mapping[str, str]) -> None:
    """ConfigError, naming the key, for a security setting this broker does not know."""
    for key in unknown:
        if is_security_key(key):
            raise ConfigError(
                f"unknown security setting {key}: the broker does not start with a security "
                "setting it cannot honour"
            )


SECRET_WORDS = ("secret", "password", "token")


def redacted(settings: Mapping[str, str]) -> dict[str, str]:
    """Settings to show to someone else (GET_BROKER_CONFIG): the value of every key naming a
    secret, a password or a token replaced by asterisks when it is set."""
    return {
        key: "******" if value and any(w in key.lower() for w in SECRET_WORDS) else value
        for key, value in settings.items()
    }
