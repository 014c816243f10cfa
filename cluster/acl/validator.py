"""Plain ACL decisions (RocketMQ ``PlainAccessValidator.parse`` + ``PlainPermissionManager``).

``check(rules, request, remote)`` returns None when the request may proceed, else the
``AclDenied`` reason. Order, as RocketMQ's:

1. the peer matches a global white-list pattern -> allowed;
2. no AccessKey -> "No accessKey is configured"; unknown AccessKey -> "No acl config for ...";
3. the peer matches the account's whiteRemoteAddress -> allowed (no signature needed);
4. the signature must match -> "Check signature failed for accessKey=...";
5. admin-only codes need ``admin: true``; every resource the request touches (topic: PUB/SUB,
   group: SUB on its ``%RETRY%`` topic) needs a permission (explicit, else the account's default).

Pure: no I/O.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Final

import attrs

from rmq_cluster.cluster.acl.address import peer_ip
from rmq_cluster.cluster.acl.permission import ADMIN_CODES, PUB, SUB, check_permission
from rmq_cluster.cluster.acl.rules import RETRY_PREFIX, PlainAclConfig, retry_topic
from rmq_cluster.cluster.acl.signing import ACCESS_KEY, SIGNATURE, SigningKey, request_content
from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode

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


def _send_resource(out: dict[str, int], topic: str | None, group: str | None) -> None:
    if topic is not None and topic.startswith(RETRY_PREFIX):
        _add(out, None if group is None else retry_topic(group), SUB)
    else:
        _add(out, topic, PUB)


def _heartbeat_resources(out: dict[str, int], body: bytes | bytearray | memoryview) -> None:
    try:
        data = fastjson.loads(bytes(body).strip(b"\x00 \r\n\t") or b"{}")
    except ValueError as exc:
        raise AclDenied(f"heartbeat body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AclDenied("heartbeat body is not a JSON object")
    consumers = data.get("consumerDataSet") or []
    if not isinstance(consumers, list):
        raise AclDenied("consumerDataSet is not a list")
    for consumer in consumers:
        if not isinstance(consumer, dict):
            continue
        group = consumer.get("groupName")
        if isinstance(group, str):
            _add(out, retry_topic(group), SUB)
        subs = consumer.get("subscriptionDataSet") or []
        for sub in subs if isinstance(subs, list) else []:
            if isinstance(sub, dict) and isinstance(sub.get("topic"), str):
                _add(out, sub["topic"], SUB)


def parse_request(request: RemotingCommand, remote: str) -> AccessRequest:
    """What ``request`` from ``remote`` (``ip:port``) needs. ``AclDenied`` if unreadable."""
    ext: Mapping[str, str] = request.ext_fields
    code = request.code
    out: dict[str, int] = {}
    get = ext.get
    if code == _RC.SEND_MESSAGE:
        _send_resource(out, get("topic"), get("group"))
    elif code in (_RC.SEND_MESSAGE_V2, _RC.SEND_BATCH_MESSAGE):
        # SEND_BATCH_MESSAGE: RocketMQ 4.9 maps no resource for it (only the signature is
        # checked); we check it like SEND_MESSAGE_V2 so a batch cannot reach a denied topic.
        if "b" in ext or "topic" not in ext:
            _send_resource(out, get("b"), get("a"))
        else:
            _send_resource(out, get("topic"), get("producerGroup"))
    elif code == _RC.CONSUMER_SEND_MSG_BACK:
        _add(out, None if get("group") is None else retry_topic(ext["group"]), SUB)
        _add(out, get("originTopic"), PUB)
    elif code == _RC.PULL_MESSAGE:
        _add(out, get("topic"), SUB)
        _add(out, None if get("consumerGroup") is None else retry_topic(ext["consumerGroup"]), SUB)
    elif code == _RC.QUERY_MESSAGE:
        _add(out, get("topic"), SUB)
    elif code == _RC.HEART_BEAT:
        _heartbeat_resources(out, request.body)
    elif code in (_RC.UNREGISTER_CLIENT, _RC.GET_CONSUMER_LIST_BY_GROUP):
        group = get("consumerGroup")
        _add(out, None if group is None else retry_topic(group), SUB)
    elif code == _RC.UPDATE_CONSUMER_OFFSET:
        group = get("consumerGroup")
        if group is None:
            raise AclDenied("consumerGroup is missing")  # a NullPointerException in RocketMQ
        _add(out, retry_topic(group), SUB)
        _add(out, get("topic"), SUB)
    return AccessRequest(
        code=code,
        remote_ip=peer_ip(remote),
        access_key=get(ACCESS_KEY),
        signature=get(SIGNATURE),
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
        expected = signer.sign(request_content(ext, request.body))
        signature = ext.get(SIGNATURE)
        if signature is None or not _equal(expected, signature):
            raise AclDenied(f"Check signature failed for accessKey={access_key}")
        code = request.code
        if code in self.admin_codes and not account.admin:
            raise AclDenied(
                f"Need admin permission for request code={code}, "
                f"but accessKey={access_key} is not"
            )
        owned = account.resource_perms
        if owned is None and account.admin:
            return
        for resource, needed in parse_request(request, remote).resources:
            is_group = resource.startswith(RETRY_PREFIX)
            perm = None if owned is None else owned.get(resource)
            if perm is None:
                perm = account.default_group_perm if is_group else account.default_topic_perm
            if not check_permission(needed, perm):
                raise AclDenied(f"No default permission for {_describe(resource, is_group)}")

    def check(self, request: RemotingCommand, remote: str) -> AclDenied | None:
        """None if ``request`` from ``remote`` may proceed, else why not."""
        try:
            self.validate(request, remote)
        except AclDenied as denied:
            return denied
        return None


def _equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def check(
    rules: PlainAclConfig,
    request: RemotingCommand,
    remote: str,
    admin_codes: frozenset[int] = ADMIN_CODES,
) -> AclDenied | None:
    """None if ``request`` from ``remote`` may proceed, else why not (no caching)."""
    return AclDecider(rules, admin_codes).check(request, remote)
