"""Plain ACL decisions (RocketMQ ``PlainAccessValidator.parse`` + ``PlainPermissionManager``).

``check(rules, request, remote)`` returns None when the request may proceed, else the
``AclDenied`` reason. Order, as RocketMQ's:

1. the peer matches a global white-list pattern -> allowed;
2. no AccessKey -> "No accessKey is configured"; unknown AccessKey -> "No acl config for ...";
3. the peer matches the account's whiteRemoteAddress -> allowed (no signature needed);
4. the signature must match -> "Check signature failed for accessKey=...";
5. admin-only codes need ``admin: true``; every resource the request touches (topic: PUB/SUB,
   group: SUB on its ``%RETRY%`` topic) needs a permission (explicit, else the account's default).

Which names a request carries comes from ``names.names_in`` (the table the broker's and the
NameServer's name gates read too): every header field and body that names a topic or group, on
every code. A ``%RETRY%<g>``/``%DLQ%<g>`` topic needs SUB on group ``g`` whatever other field
names a group. ``AclDecider.check_topics`` answers for the topic of a message a processor read
by offset or id (the processor is handed a small callable, see ``AclGuard.topic_access``).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from ..protocol.names import (
    Access,
    Kind,
    Name,
    UnreadableBody,
    group_of_topic,
    names_in,
)
from ..remoting.codec import RemotingCommand
from ..remoting.codes import RequestCode
from .address import peer_ip
from .permission import ADMIN_CODES, PUB, SUB, check_permission
from .rules import RETRY_PREFIX, Account, PlainAclConfig, retry_topic
from .signing import (
    ACCESS_KEY,
    SIGNATURE,
    SigningKey,
    signature_holds,
)

#: Peers (and account x peer pairs) whose white-list verdicts a decider remembers.
MAX_CACHED_PEERS: Final = 4096
#: The class name RocketMQ puts in the remark of a denial (exception.toString()).
ACL_EXCEPTION: Final = "org.apache.rocketmq.acl.common.AclException"

_RC = RequestCode


class AclDenied(Exception):
    """A request the rules refuse; ``str()`` is RocketMQ's message."""

    @property
    def remark(self) -> str:
        return f"{ACL_EXCEPTION}: {self}"


@attrs.frozen
class AccessRequest:
    code: int
    remote_ip: str
    access_key: str | None
    signature: str | None
    #: resource (topic or ``%RETRY%group``) -> needed permission, in request order
    resources: tuple[tuple[str, int], ...]


def _add(out: dict[str, int], resource: str | None, perm: int) -> None:
    if resource is None:
        return
    out[resource] = out.get(resource, 0) | perm


def topic_resource(topic: str, needed: int) -> tuple[str, int]:
    """The resource a topic maps to: a ``%RETRY%<g>`` or ``%DLQ%<g>`` topic is its group's
    (SUB on ``%RETRY%<g>``, as RocketMQ asks for sends to retry topics), any other topic is
    itself with ``needed``."""
    group = group_of_topic(topic)
    if group is not None:
        return retry_topic(group), SUB
    return topic, needed


def _resource(name: Name) -> tuple[str, int] | None:
    """The (resource, permission) a name needs, or None (validated only / admin-only code)."""
    if name.kind is Kind.QUEUE_ID or name.access in (Access.NONE, Access.ADMIN):
        return None
    value = name.value
    if not isinstance(value, str):
        raise AclDenied(f"{name.field} is not a name")
    if name.kind is Kind.GROUP:
        return retry_topic(value), SUB
    return topic_resource(value, PUB if name.access is Access.PUB else SUB)


def parse_request(request: RemotingCommand, remote: str) -> AccessRequest:
    """What ``request`` from ``remote`` (``ip:port``) needs: every topic and group it names,
    wherever it carries them (``names.names_in``, the table the name gates use too).
    ``AclDenied`` if unreadable."""
    ext: Mapping[str, str] = request.ext_fields
    code = request.code
    if code == _RC.UPDATE_CONSUMER_OFFSET and ext.get("consumerGroup") is None:
        raise AclDenied("consumerGroup is missing")  # a NullPointerException in RocketMQ
    try:
        carried = names_in(request)
    except UnreadableBody as exc:
        raise AclDenied(str(exc)) from None
    out: dict[str, int] = {}
    for name in carried:
        needed = _resource(name)
        if needed is not None:
            _add(out, *needed)
    return AccessRequest(
        code=code,
        remote_ip=peer_ip(remote),
        access_key=ext.get(ACCESS_KEY),
        signature=ext.get(SIGNATURE),
        resources=tuple(out.items()),
    )


def _describe(resource: str, is_group: bool) -> str:
    if is_group:
        return f"group:{resource[len(RETRY_PREFIX):]}"
    return f"topic:{resource}"


class AclDecider:
    """``check`` for one set of rules, with the per-peer parts cached.

    A connection's peer address never changes, so its IP and its white-list verdicts (global,
    and per account) are computed once per rules version, not per request; resources are
    parsed only once the signature holds. Caches are bounded (``MAX_CACHED_PEERS``).
    """

    def __init__(self, rules: PlainAclConfig, admin_codes: frozenset[int] = ADMIN_CODES) -> None:
        self.rules = rules
        self.admin_codes = admin_codes
        self._ips: dict[str, tuple[str, bool]] = {}
        self._account_white: dict[tuple[str, str], bool] = {}
        self._keys: dict[str, SigningKey] = {}  # bounded by the accounts in the rules

    def _peer(self, remote: str) -> tuple[str, bool]:
        cached = self._ips.get(remote)
        if cached is None:
            ip = peer_ip(remote)
            cached = (ip, any(p.match(ip) for p in self.rules.global_white))
            if len(self._ips) >= MAX_CACHED_PEERS:
                self._ips.clear()
            self._ips[remote] = cached
        return cached

    def validate(self, request: RemotingCommand, remote: str) -> None:
        """Raise ``AclDenied`` unless the rules allow ``request`` from ``remote``."""
        ip, white = self._peer(remote)
        if white:
            return
        ext = request.ext_fields
        access_key = ext.get(ACCESS_KEY)
        if access_key is None:
            raise AclDenied("No accessKey is configured")
        account = self.rules.accounts.get(access_key)
        if account is None:
            raise AclDenied(f"No acl config for {access_key}")
        key = (access_key, ip)
        own_white = self._account_white.get(key)
        if own_white is None:
            own_white = account.white_remote_address.match(ip)
            if len(self._account_white) >= MAX_CACHED_PEERS:
                self._account_white.clear()
            self._account_white[key] = own_white
        if own_white:
            return
        signer = self._keys.get(access_key)
        if signer is None:
            signer = self._keys[access_key] = SigningKey(account.secret_key)
        if not signature_holds(signer, ext, request.body, ext.get(SIGNATURE)):
            raise AclDenied(f"Check signature failed for accessKey={access_key}")
        code = request.code
        if code in self.admin_codes and not account.admin:
            raise AclDenied(
                f"Need admin permission for request code={code}, "
                f"but accessKey={access_key} is not"
            )
        if account.resource_perms is None and account.admin:
            return
        _check_resources(account, parse_request(request, remote).resources)

    def check_topics(
        self, request: RemotingCommand, remote: str, topics: Iterable[str], needed: int
    ) -> AclDenied | None:
        """After a processor read a message by offset or id: may the sender of ``request``
        (already admitted by ``check``) have ``needed`` on each of ``topics``, the topics the
        message belongs to? None if so, else why not."""
        return self.account_topics(request.ext_fields.get(ACCESS_KEY), remote, topics, needed)

    def account_topics(
        self, access_key: str | None, remote: str, topics: Iterable[str], needed: int
    ) -> AclDenied | None:
        """Has the account ``access_key``, whose requests from ``remote`` were admitted, ``needed``
        on each of ``topics`` (under the rules as they are now)? None if so, else why not."""
        try:
            ip, white = self._peer(remote)
            if white:
                return None
            if access_key is None:
                raise AclDenied("No accessKey is configured")
            account = self.rules.accounts.get(access_key)
            if account is None:
                raise AclDenied(f"No acl config for {access_key}")
            if account.white_remote_address.match(ip):
                return None
            if account.resource_perms is None and account.admin:
                return None
            out: dict[str, int] = {}
            for topic in topics:
                _add(out, *topic_resource(topic, needed))
            _check_resources(account, tuple(out.items()))
        except AclDenied as denied:
            return denied
        return None

    def check(self, request: RemotingCommand, remote: str) -> AclDenied | None:
        """None if ``request`` from ``remote`` may proceed, else why not."""
        try:
            self.validate(request, remote)
        except AclDenied as denied:
            return denied
        return None


def _check_resources(account: Account, resources: Iterable[tuple[str, int]]) -> None:
    owned = account.resource_perms
    for resource, needed in resources:
        is_group = resource.startswith(RETRY_PREFIX)
        perm = None if owned is None else owned.get(resource)
        if perm is None:
            perm = account.default_group_perm if is_group else account.default_topic_perm
        if not check_permission(needed, perm):
            raise AclDenied(f"No default permission for {_describe(resource, is_group)}")


def check_account(account: Account, resources: Iterable[tuple[str, int]]) -> AclDenied | None:
    """None if ``account`` holds every (resource, permission) in ``resources`` (an admin
    account without resource rules holds all), else why not: for a caller that authenticated
    the account itself (the gRPC proxy, ``proxy/auth.py``)."""
    if account.resource_perms is None and account.admin:
        return None
    try:
        _check_resources(account, resources)
    except AclDenied as denied:
        return denied
    return None


def check(
    rules: PlainAclConfig,
    request: RemotingCommand,
    remote: str,
    admin_codes: frozenset[int] = ADMIN_CODES,
) -> AclDenied | None:
    """None if ``request`` from ``remote`` may proceed, else why not (no caching)."""
    return AclDecider(rules, admin_codes).check(request, remote)
