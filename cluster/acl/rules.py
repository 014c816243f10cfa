"""plain_acl.yml (RocketMQ's schema) as frozen values.

    globalWhiteRemoteAddresses: ["10.10.103.*", "192.168.0.*"]
    accounts:
      - accessKey: RocketMQ
        secretKey: 12345678
        whiteRemoteAddress: 192.168.0.*
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: ["topicA=DENY", "topicB=PUB|SUB"]
        groupPerms: ["groupA=DENY", "groupB=PUB|SUB"]

Group permissions are kept under the group's retry topic (``%RETRY%groupB``), as RocketMQ does.
accessKey and secretKey must be longer than 6 characters. Pure: parsing text, no file access.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs
import yaml

from .address import AclConfigError, AddressPattern, compile_pattern
from .permission import DENY, parse_perm

#: RocketMQ ``AclConstants.ACCESS_KEY_MIN_LENGTH`` / ``SECRET_KEY_MIN_LENGTH``: keys must be longer.
ACCESS_KEY_MIN_LENGTH: Final = 6
SECRET_KEY_MIN_LENGTH: Final = 6
RETRY_PREFIX: Final = "%RETRY%"

__all__ = [
    "ACCESS_KEY_MIN_LENGTH",
    "Account",
    "AclConfigError",
    "PlainAclConfig",
    "parse_plain_acl",
    "render_plain_acl",
    "retry_topic",
]


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


@attrs.frozen
class Account:
    access_key: str
    secret_key: str
    white_remote_address: AddressPattern = attrs.field(factory=lambda: compile_pattern(None))
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    #: topic -> perm and ``%RETRY%group`` -> perm; None when the file lists neither
    #: (RocketMQ then lets an admin account do anything).
    resource_perms: Mapping[str, int] | None = None


@attrs.frozen
class PlainAclConfig:
    global_white: tuple[AddressPattern, ...] = ()
    accounts: Mapping[str, Account] = attrs.field(factory=dict)


def _str_list(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise AclConfigError(f"{key} must be a list")
    return [str(v) for v in value if v is not None]


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() == "true"


def _resource_perms(items: list[str], *, topic: bool, into: dict[str, int]) -> None:
    for item in items:
        parts = [p for p in item.split("=") if p != ""]
        if len(parts) != 2:
            kind = "topic" if topic else "group"
            raise AclConfigError(f"Parse resource permission failed for {kind}:{item}")
        name = parts[0].strip()
        into[name if topic else retry_topic(name)] = parse_perm(parts[1])


def _account(raw: Any) -> Account:
    if not isinstance(raw, dict):
        raise AclConfigError("each account must be a mapping")
    ak = raw.get("accessKey")
    sk = raw.get("secretKey")
    ak = None if ak is None else str(ak)
    sk = None if sk is None else str(sk)
    if (
        ak is None
        or sk is None
        or len(ak) <= ACCESS_KEY_MIN_LENGTH
        or len(sk) <= SECRET_KEY_MIN_LENGTH
    ):
        raise AclConfigError(
            f"The accessKey={ak} and secretKey={sk} cannot be null and length should longer than 6"
        )
    perms: dict[str, int] = {}
    group_items = _str_list(raw.get("groupPerms"), "groupPerms")
    topic_items = _str_list(raw.get("topicPerms"), "topicPerms")
    _resource_perms(group_items, topic=False, into=perms)
    _resource_perms(topic_items, topic=True, into=perms)
    white = raw.get("whiteRemoteAddress")
    return Account(
        access_key=ak,
        secret_key=sk,
        white_remote_address=compile_pattern(None if white is None else str(white)),
        admin=_bool(raw.get("admin", False)),
        default_topic_perm=parse_perm(raw.get("defaultTopicPerm")),
        default_group_perm=parse_perm(raw.get("defaultGroupPerm")),
        resource_perms=perms if (group_items or topic_items) else None,
    )


def parse_plain_acl(text: str | bytes, *, source: str = "plain_acl.yml") -> PlainAclConfig:
    """The rules in ``text``; ``AclConfigError`` (one line, naming ``source``) when unusable."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise AclConfigError(f"{source}: not YAML: {first}") from None
    if not data:
        raise AclConfigError(f"{source} file  is not data")
    if not isinstance(data, dict):
        raise AclConfigError(f"{source}: top level must be a mapping")
    try:
        white = tuple(
            compile_pattern(p)
            for p in _str_list(data.get("globalWhiteRemoteAddresses"), "globalWhiteRemoteAddresses")
        )
        accounts: dict[str, Account] = {}
        raw_accounts = data.get("accounts") or []
        if not isinstance(raw_accounts, list):
            raise AclConfigError("accounts must be a list")
        for raw in raw_accounts:
            account = _account(raw)
            accounts[account.access_key] = account
    except AclConfigError as exc:
        raise AclConfigError(f"{source}: {exc}") from None
    return PlainAclConfig(white, accounts)


def render_plain_acl(
    accounts: list[Mapping[str, Any]], global_white: list[str] | None = None
) -> str:
    """A plain_acl.yml text (what ``rmq-cluster up --acl`` writes)."""
    doc: dict[str, Any] = {
        "globalWhiteRemoteAddresses": list(global_white or []),
        "accounts": [dict(a) for a in accounts],
    }
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
