"""Plain ACL, as RocketMQ 4.9's `PlainAccessValidator` and `PlainPermissionManager` check it.

Turned on by `aclEnable=true`; the accounts come from `plain_acl.yml` (`plainAclFile`, by
default `$ROCKETMQ_HOME/conf/plain_acl.yml`), in RocketMQ's format:

    globalWhiteRemoteAddresses: [10.10.103.*]
    accounts:
      - accessKey: RocketMQ
        secretKey: 12345678
        whiteRemoteAddress: 192.168.0.*
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB]

Every request to the broker's ports goes through `check`, in Java's order: a client at a
global whitelist address passes; otherwise its AccessKey must name an account; a client at
the account's own whitelist address passes; otherwise the signature must match
(`remoting.signature`), admin codes need `admin: true`, and each resource the request needs
(a topic, or a group as `%RETRY%group`) needs the permission: the account's own for it, else
its default. A refusal answers SYSTEM_ERROR with the AclException text, as a 4.9 broker does.
Beyond 4.9, batch sends need what single sends need and lite pulls what pulls need (4.9
checks neither), and a producer's UNREGISTER_CLIENT, which names no consumer group, needs
no group permission. The file is read again when it changes; a changed file that does not load
keeps the rules in force and is logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from rmqpy.broker.clients import parse_json_body
from rmqpy.remoting.codes import RequestCode, ResponseCode
from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.protocol import Connection
from rmqpy.remoting.server import Refusals
from rmqpy.remoting.signature import ACCESS_KEY, SIGNATURE, signature, signed_content

log = structlog.get_logger(__name__)

# Permission bits (RocketMQ `Permission`).
DENY, ANY, PUB, SUB = 1, 2, 4, 8
PERM_NAMES = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}
ADMIN_CODES = frozenset(
    (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    )
)
RETRY_PREFIX = "%RETRY%"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
KEY_MIN_LENGTH = 6  # an accessKey or secretKey must be longer (AclConstants)
EXCEPTION = "org.apache.rocketmq.acl.common.AclException"


class AclError(Exception):
    """A request refused, or an ACL file that cannot be used; the message is Java's."""


def refusal_remark(error: AclError) -> str:
    """The remark of a refusal, as a 4.9 broker writes the exception its hook threw."""
    return f"{EXCEPTION}: {error}"


def parse_perm(text: Any) -> int:
    """`Permission.parsePermFromString`: anything unknown is DENY."""
    return PERM_NAMES.get(str(text).strip(), DENY) if text is not None else DENY


def permitted(needed: int, owned: int) -> bool:
    """`Permission.checkPermission`."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


# --- addresses -------------------------------------------------------------------------------
Matcher = Callable[[str], bool]


def address_matcher(pattern: str | None) -> Matcher:
    """RocketMQ's `RemoteAddressStrategyFactory`: blank matches nobody; `*` everybody;
    `a.b.c.{1,2}` and comma lists those addresses; `a.b.c.*`, `a.b.*.*` and `a.b.c.10-20`
    a range of the first wildcard part (the parts after it must be `*`); anything else one
    address. IPv6 the same way, in hexadecimal groups."""
    text = (pattern or "").strip()
    if not text:
        return lambda _ip: False
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return lambda _ip: True
    if text.endswith("}"):
        head, brace, tail = text.rpartition("{")
        if not brace or not head or head[-1] not in ".:":
            raise AclError(
                f"MultipleRemoteAddressStrategy netaddress examine scope Exception {text}"
            )
        addresses = {_canonical(head + part.strip()) for part in tail[:-1].split(",")}
        return lambda ip: _canonical(ip) in addresses
    if "," in text:
        addresses = {_canonical(part) for part in text.split(",") if part.strip()}
        return lambda ip: _canonical(ip) in addresses
    if "*" in text or "-" in text:
        return _range_matcher(text)
    one = _canonical(text)
    return lambda ip: _canonical(ip) == one


def _canonical(address: str) -> str:
    address = address.strip()
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


def _range_matcher(text: str) -> Matcher:
    v6 = ":" in text
    if v6 and "::" in text:  # 2001:db8::* - the groups `::` stands for are zeros
        left, _, right = text.partition("::")
        lead, tail = left.split(":") if left else [], right.split(":") if right else []
        parts = [*lead, *["0"] * (8 - len(lead) - len(tail)), *tail]
    else:
        parts = text.split(":" if v6 else ".")
    if len(parts) != (8 if v6 else 4):
        raise AclError(f"RangeRemoteAddressStrategy netaddress examine scope Exception {text}")
    base, top = (16, 0xFFFF) if v6 else (10, 255)
    at = next((i for i, p in enumerate(parts) if p == "*" or "-" in p), -1)
    if at < 1 or any(p != "*" for p in parts[at + 1 :]):
        raise AclError(f"RangeRemoteAddressStrategy netaddress examine scope Exception {text}")
    if parts[at] == "*":
        low, high = 0, top
    else:
        first, _, last = parts[at].partition("-")
        try:
            low, high = int(first, base), int(last, base)
        except ValueError:
            raise AclError(
                f"RangeRemoteAddressStrategy netaddress examine scope Exception value {parts[at]}"
            ) from None
        if not 0 <= low <= high <= top:
            raise AclError(
                "RangeRemoteAddressStrategy netaddress examine scope Exception "
                f"start is {low} , end is {high}"
            )
    head = [int(p, base) for p in parts[:at]]

    def match(ip: str) -> bool:
        try:
            address = ipaddress.ip_address(ip.strip())
        except ValueError:
            return False
        if (address.version == 6) != v6:
            return False
        groups = [int(g, 16) for g in address.exploded.split(":")] if v6 else list(address.packed)
        return groups[:at] == head and low <= groups[at] <= high

    return match


# --- accounts --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    white_address: Matcher
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    perms: dict[str, int] | None  # resource (topic or %RETRY%group) -> perm; None: none listed


@dataclass(frozen=True)
class AclRules:
    global_white: tuple[Matcher, ...]
    accounts: dict[str, Account] = field(default_factory=dict)


def parse_rules(text: str) -> AclRules:
    """The rules of a plain_acl.yml; AclError naming what is wrong."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise AclError(f"not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise AclError("expected a mapping with globalWhiteRemoteAddresses and accounts")
    white = tuple(address_matcher(str(a)) for a in data.get("globalWhiteRemoteAddresses") or [])
    accounts: dict[str, Account] = {}
    for entry in data.get("accounts") or []:
        if not isinstance(entry, dict):
            raise AclError(f"an account must be a mapping, not {entry!r}")
        account = _account(entry)
        accounts[account.access_key] = account
    return AclRules(white, accounts)


def _account(entry: Mapping[str, Any]) -> Account:
    access, secret = entry.get("accessKey"), entry.get("secretKey")
    if (
        access is None
        or secret is None
        or len(str(access)) <= KEY_MIN_LENGTH
        or len(str(secret)) <= KEY_MIN_LENGTH
    ):
        raise AclError(
            f"The accessKey={access} and secretKey=**** cannot be null and length should "
            "longer than 6"
        )
    perms: dict[str, int] = {}
    for key, group in (("topicPerms", False), ("groupPerms", True)):
        for item in entry.get(key) or []:
            name, eq, perm = str(item).partition("=")
            if not eq or "=" in perm:
                kind = "group" if group else "topic"
                raise AclError(f"Parse resource permission failed for {kind}:{item}")
            resource = retry_topic(name.strip()) if group else name.strip()
            perms[resource] = parse_perm(perm)
    return Account(
        str(access),
        str(secret),
        address_matcher(None if entry.get("whiteRemoteAddress") is None
                        else str(entry.get("whiteRemoteAddress"))),
        _truthy(entry.get("admin")),
        parse_perm(entry.get("defaultTopicPerm")),
        parse_perm(entry.get("defaultGroupPerm")),
        perms or None,
    )  # fmt: skip


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() == "true"


# --- requests --------------------------------------------------------------------------------
def needed_resources(request: RemotingCommand) -> dict[str, int]:
    """What a request needs, by code (`PlainAccessValidator.parse`)."""
    ext = request.ext_fields
    code = request.code
    needs: dict[str, int] = {}
    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                RequestCode.SEND_BATCH_MESSAGE):  # fmt: skip
        v1 = code == RequestCode.SEND_MESSAGE
        topic = ext.get("topic" if v1 else "b", "")
        if topic.startswith(RETRY_PREFIX):
            needs[retry_topic(ext.get("producerGroup" if v1 else "a", ""))] = SUB
        else:
            needs[topic] = PUB
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        needs[retry_topic(ext.get("group", ""))] = SUB
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        needs[ext.get("topic", "")] = SUB
        needs[retry_topic(ext.get("consumerGroup", ""))] = SUB
    elif code == RequestCode.QUERY_MESSAGE:
        needs[ext.get("topic", "")] = SUB
    elif code == RequestCode.HEART_BEAT:
        try:
            heartbeat = parse_json_body(request.body or b"{}")  # as the heartbeat reads it
            for consumer in heartbeat.get("consumerDataSet") or []:
                needs[retry_topic(consumer["groupName"])] = SUB
                for sub in consumer.get("subscriptionDataSet") or []:
                    needs[sub["topic"]] = SUB
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise AclError(f"heartbeat body does not parse: {exc}") from None
    elif code == RequestCode.UNREGISTER_CLIENT:
        # A producer leaving names no consumer group: nothing to check (4.9 checks the
        # group "null", which refuses every producer's shutdown under defaultGroupPerm DENY).
        if ext.get("consumerGroup"):
            needs[retry_topic(ext["consumerGroup"])] = SUB
    elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
        needs[retry_topic(ext.get("consumerGroup", ""))] = SUB
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        needs[retry_topic(ext.get("consumerGroup", ""))] = SUB
        needs[ext.get("topic", "")] = SUB
    return needs


def validate(
    rules: AclRules,
    request: RemotingCommand,
    remote_ip: str,
    admin_codes: frozenset[int] = ADMIN_CODES,
) -> None:
    """Pass, or raise AclError with Java's message (`PlainPermissionManager.validate`)."""
    if any(match(remote_ip) for match in rules.global_white):
        return
    ext = request.ext_fields
    access_key = ext.get(ACCESS_KEY)
    if access_key is None:
        raise AclError("No accessKey is configured")
    account = rules.accounts.get(access_key)
    if account is None:
        raise AclError(f"No acl config for {access_key}")
    if account.white_address(remote_ip):
        return
    needs = needed_resources(request)
    expected = signature(signed_content(ext, request.body), account.secret_key)
    if not _same(expected, ext.get(SIGNATURE)):
        raise AclError(f"Check signature failed for accessKey={access_key}")
    if needs.get(TRACE_TOPIC) == PUB:
        return
    if request.code in admin_codes and not account.admin:
        raise AclError(
            f"Need admin permission for request code={request.code}, but "
            f"accessKey={access_key} is not"
        )
    owned = account.perms
    if owned is None and account.admin:
        return
    for resource, needed in needs.items():
        group = resource.startswith(RETRY_PREFIX)
        if owned is not None and resource in owned:
            perm = owned[resource]
        else:
            perm = account.default_group_perm if group else account.default_topic_perm
        if not permitted(needed, perm):
            name = f"group={resource[len(RETRY_PREFIX) :]}" if group else f"topic={resource}"
            raise AclError(f"No default permission for {name}")


def _same(expected: str, given: str | None) -> bool:
    """compare_digest: the time a comparison takes says nothing of the secret."""
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


# --- the file --------------------------------------------------------------------------------
def default_acl_file(environ: Mapping[str, str] | None = None) -> str:
    """Where Java reads it: `$ROCKETMQ_HOME/conf/plain_acl.yml`."""
    env = os.environ if environ is None else environ
    return os.path.join(env.get("ROCKETMQ_HOME", ""), "conf", "plain_acl.yml")


class PlainAcl:
    """The rules of one plain_acl.yml, read again when the file changes (`reload`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self.rules = self._load()  # raises at start: a broker does not run on a bad file

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _load(self) -> AclRules:
        try:
            text = Path(self.path).read_text(encoding="utf-8")
        except OSError as exc:
            raise AclError(f"cannot read the ACL file {self.path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise AclError(f"the ACL file {self.path} is not UTF-8 text") from None
        try:
            return parse_rules(text)
        except AclError as exc:
            raise AclError(f"the ACL file {self.path}: {exc}") from None

    def reload(self) -> bool:
        """Read the file again if it changed; True when new rules took effect. A file that
        no longer loads leaves the rules in force (and is logged, once per change)."""
        stamp = self._file_stamp()
        with self._lock:
            if stamp == self._stamp:
                return False
            self._stamp = stamp
        try:
            rules = self._load()
        except AclError as exc:
            log.error("ACL file not reloaded: the rules in force stay", error=str(exc))
            return False
        self.rules = rules
        log.info("ACL file reloaded", path=self.path, accounts=len(rules.accounts))
        return True

    def check(
        self, request: RemotingCommand, peer: str, admin_codes: frozenset[int] = ADMIN_CODES
    ) -> AclError | None:
        """None when the request may go on, else why not."""
        host = peer.rpartition(":")[0] if ":" in peer else peer
        try:
            validate(self.rules, request, host.strip("[]"), admin_codes)
        except AclError as exc:
            return exc
        return None


class RequestGuard:
    """Before a server's requests reach their processors (RocketMQ's RPC hook): those the
    ACL refuses are answered SYSTEM_ERROR with the reason, logged at most every 10 s; the
    codes in `closed` are refused to everyone (the embedded name server's broker
    registrations: its own broker registers in-process)."""

    @classmethod
    def for_namesrv(cls, acl: PlainAcl) -> RequestGuard:
        """A standalone name server's: broker registrations need a signed admin account;
        route queries stay open, as RocketMQ's are."""
        codes = frozenset((RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER))
        return cls(acl, only=codes, admin_codes=codes)

    def __init__(
        self,
        acl: PlainAcl | None,
        closed: Mapping[int, str] | None = None,
        only: frozenset[int] | None = None,
        admin_codes: frozenset[int] = ADMIN_CODES,
    ) -> None:
        """`only`: the codes the ACL checks (None: all); `admin_codes`: those of them that
        need an admin account."""
        self.acl = acl
        self.closed = dict(closed or {})
        self.only = only
        self.admin_codes = admin_codes
        self.refusals = Refusals("request refused by the ACL")

    def __call__(self, conn: Connection, requests: list[RemotingCommand]) -> list[RemotingCommand]:
        """The requests that may go on; the others are answered here."""
        allowed: list[RemotingCommand] = []
        for request in requests:
            reason = self.closed.get(request.code)
            error = AclError(reason) if reason is not None else None
            if (
                error is None
                and self.acl is not None
                and (self.only is None or request.code in self.only)
            ):
                error = self.acl.check(request, conn.peer, self.admin_codes)
            if error is None:
                allowed.append(request)
                continue
            self.refusals.note(conn.peer, f"code {request.code}: {error}")
            conn.respond(
                request, request.response(ResponseCode.SYSTEM_ERROR, refusal_remark(error))
            )
        return allowed
