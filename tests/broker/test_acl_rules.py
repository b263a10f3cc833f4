"""The plain ACL file's rules as RocketMQ 4.9 reads them: address whitelists in each form,
permission strings, and files it refuses."""

from __future__ import annotations

import pytest

from rmqpy.broker.acl import (
    DENY,
    PUB,
    SUB,
    AclError,
    address_matcher,
    parse_perm,
    parse_rules,
    permitted,
)


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("*", ["10.0.0.1", "::1"], []),
        ("192.168.1.7", ["192.168.1.7"], ["192.168.1.8"]),
        ("192.168.1.*", ["192.168.1.0", "192.168.1.255"], ["192.168.2.1", "10.0.0.1"]),
        ("192.168.*.*", ["192.168.9.9"], ["192.169.0.1"]),
        ("192.168.1.10-20", ["192.168.1.10", "192.168.1.20"], ["192.168.1.9", "192.168.1.21"]),
        ("192.168.1.{1,2}", ["192.168.1.1", "192.168.1.2"], ["192.168.1.3"]),
        ("10.0.0.1,10.0.0.5", ["10.0.0.1", "10.0.0.5"], ["10.0.0.2"]),
        ("", [], ["127.0.0.1"]),  # blank: no one
        ("2001:db8::1", ["2001:db8:0:0:0:0:0:1"], ["2001:db8::2"]),
        ("2001:db8:0:0:0:0:0:*", ["2001:db8::ffff"], ["2001:db9::1"]),
        ("2001:db8:0:0:0:0:0:a-f", ["2001:db8::c"], ["2001:db8::10"]),
        ("2001:db8::{1,2}", ["2001:db8::2"], ["2001:db8::3"]),
        ("2001:db8::*", ["2001:db8::ab"], ["2001:db8::1:0", "2001:db9::1"]),
    ],
)
def test_whitelist_forms(pattern: str, inside: list[str], outside: list[str]) -> None:
    match = address_matcher(pattern)
    assert all(match(ip) for ip in inside)
    assert not any(match(ip) for ip in outside)


@pytest.mark.parametrize("pattern", ["192.168.1.*.5", "192.168.1.20-10", "192.168.1.-5", "*.1.2.3"])
def test_malformed_ranges_are_refused(pattern: str) -> None:
    with pytest.raises(AclError):
        address_matcher(pattern)


def test_permission_strings_and_checks() -> None:
    assert parse_perm("PUB|SUB") == parse_perm("SUB|PUB") == PUB | SUB
    assert parse_perm("nonsense") == parse_perm(None) == DENY
    assert permitted(PUB, PUB | SUB) and not permitted(SUB, PUB)
    assert not permitted(PUB, PUB | DENY)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "accounts:\n  - accessKey: short\n    secretKey: 12345678\n",
            "length should longer than 6",
        ),
        ("accounts:\n  - accessKey: RocketMQ\n", "cannot be null"),
        (
            "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n"
            "    topicPerms: [topicA]\n",
            "Parse resource permission failed for topic:topicA",
        ),
        ("accounts: [", "not YAML"),
        ("- just a list", "expected a mapping"),
    ],
)
def test_files_it_refuses(text: str, message: str) -> None:
    with pytest.raises(AclError, match=message):
        parse_rules(text)


def test_rocketmqs_sample_file_loads_with_numbers_as_keys() -> None:
    rules = parse_rules(
        "globalWhiteRemoteAddresses:\n  - 10.10.103.*\naccounts:\n"
        "  - accessKey: RocketMQ\n    secretKey: 12345678\n    whiteRemoteAddress:\n"
        "    admin: false\n    defaultTopicPerm: DENY\n    defaultGroupPerm: SUB\n"
        "    topicPerms:\n      - topicB=PUB|SUB\n    groupPerms:\n      - groupA=DENY\n"
    )
    account = rules.accounts["RocketMQ"]
    assert account.secret_key == "12345678"  # YAML reads it as a number
    assert account.perms == {"topicB": PUB | SUB, "%RETRY%groupA": DENY}
    assert account.default_group_perm == SUB and not account.white_address("10.10.103.1")
    assert rules.global_white[0]("10.10.103.200")
    assert "12345678" not in repr(account)
