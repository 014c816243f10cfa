"""RocketMQ 5's credentials on the gRPC port, decided against the cluster's plain ACL (the
accounts of ``plain_acl.yml``, the rules the remoting port applies).

What the SDKs send with every call (Apache's Java and Python 5.x clients alike):

    x-mq-date-time: 20261129T151000Z           (the client's wall clock, yyyyMMdd'T'HHmmss'Z')
    authorization:  MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time,
                    Signature=<hex of HMAC-SHA1(secretKey, the x-mq-date-time value)>

Both SDKs format their *local* wall time with a literal ``Z`` (neither converts to UTC), so
the date is accepted when it lies within ``max_skew_s`` of the proxy's clock read in UTC or in
the proxy's own local time (``utc_offsets``). The hex may be either case.

``admit`` answers, in this order (the remoting port's order, ``cluster/acl/validator.py``):

1. the peer matches a global white-list pattern: allowed, nothing else checked;
2. no or unreadable ``authorization``, unknown access key: refused;
3. the peer matches the account's ``whiteRemoteAddress``: no signature needed;
4. the date must be present, well formed and within the skew; the signature must hold;
5. every resource the call names needs its permission (``resources``): PUB on each message's
   topic for SendMessage, SUB on topic and group for the consuming calls, ...

A refusal is ``AuthDenied``; the service answers it in the call's own response, with the v2
``Code`` Apache's proxy answers for an authentication or an authorization failure alike:
UNAUTHORIZED (40100). Pure: no I/O, no trio; the secret never leaves ``_signature_holds``.
"""

from __future__ import annotations

import calendar
import datetime
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from ..cluster.acl.address import peer_ip
from ..cluster.acl.permission import ANY, PUB, SUB
from ..cluster.acl.rules import PlainAclConfig, retry_topic
from ..cluster.acl.validator import check_account, topic_resource

AUTHORIZATION: Final = "authorization"
DATE_TIME: Final = "x-mq-date-time"
ALGORITHM: Final = "MQv2-HMAC-SHA1"
CREDENTIAL: Final = "Credential"
SIGNATURE: Final = "Signature"
DATE_FORMAT: Final = "%Y%m%dT%H%M%SZ"
DATE_CHARS: Final = len("20260101T000000Z")
#: an ``authorization`` value longer than this is refused unread
MAX_AUTHORIZATION_CHARS: Final = 1024
#: HMAC-SHA1 in hex
SIGNATURE_HEX_CHARS: Final = 40

#: client types whose Heartbeat names a consumer group (Apache checks SUB on it)
CONSUMER_CLIENT_TYPES: Final = frozenset({2, 3, 4, 5, 6})


class AuthDenied(Exception):
    """A call the rules refuse; ``str()`` says why (never a secret)."""


@attrs.frozen
class Signed:
    access_key: str
    signature: str


def parse_authorization(value: str | None) -> Signed:
    """``MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=HEX``."""
    if not value:
        raise AuthDenied("authentication header is null")
    if len(value) > MAX_AUTHORIZATION_CHARS:
        raise AuthDenied("authentication header is too long")
    algorithm, _, rest = value.partition(" ")
    if algorithm != ALGORITHM:
        raise AuthDenied("authentication header is incorrect")
    fields: dict[str, str] = {}
    for item in rest.split(","):
        key, eq, val = item.strip().partition("=")
        if not eq:
            raise AuthDenied("authentication header is incorrect")
        fields[key] = val
    access_key = fields.get(CREDENTIAL, "").split("/")[0]
    signature = fields.get(SIGNATURE, "")
    if not access_key:
        raise AuthDenied("No accessKey is configured")
    if len(signature) != SIGNATURE_HEX_CHARS:
        raise AuthDenied(f"Check signature failed for accessKey={access_key}")
    return Signed(access_key, signature)


def parse_date_time(text: str | None) -> int | None:
    """Seconds since the epoch of ``yyyyMMddTHHmmssZ`` read as UTC; None when malformed.
    (By hand: ``time.strptime`` costs about 100 us a call, more than the rest of ``admit``.)"""
    if not text or len(text) != DATE_CHARS or text[8] != "T" or text[15] != "Z":
        return None
    digits = text[:8] + text[9:15]
    if not (digits.isascii() and digits.isdigit()):
        return None
    try:
        when = datetime.datetime(int(digits[:4]), int(digits[4:6]), int(digits[6:8]),
                                 int(digits[8:10]), int(digits[10:12]), int(digits[12:14]))
    except ValueError:  # month 13, hour 24, ...
        return None
    return calendar.timegm(when.timetuple())


def date_fresh(text: str | None, now: float, max_skew_s: float,
               utc_offsets: Iterable[float] = (0.0,)) -> bool:
    """Whether the date lies within ``max_skew_s`` of ``now`` read at one of ``utc_offsets``
    (seconds east of UTC: the SDKs write local wall time with a ``Z``)."""
    stamp = parse_date_time(text)
    if stamp is None:
        return False
    return any(abs(stamp - (now + offset)) <= max_skew_s for offset in utc_offsets)


def _signature_holds(secret_key: str, date_time: str, signature: str) -> bool:
    expected = hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"),
                        hashlib.sha1).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.lower().encode())


# ---------------------------------------------------------------------- resources per call


def _topic(resource: Any) -> str:
    return str(resource.name) if resource is not None else ""


def _sub(group: Any, *topics: Any) -> list[tuple[str, int]]:
    out = [topic_resource(_topic(t), SUB) for t in topics]
    return [(retry_topic(_topic(group)), SUB), *out]


def _telemetry(cmd: Any) -> list[tuple[str, int]]:
    if not cmd.HasField("settings"):
        return []
    settings = cmd.settings
    if settings.HasField("publishing"):
        return [topic_resource(_topic(t), PUB) for t in settings.publishing.topics]
    if settings.HasField("subscription"):
        sub = settings.subscription
        return _sub(sub.group, *(entry.topic for entry in sub.subscriptions))
    return []


def resources(method: str, request: Any) -> list[tuple[str, int]]:
    """(resource, permission) pairs ``method`` needs for ``request`` (a decoded v2 message):
    Apache's proxy's table, except that a SendMessage needs PUB on *every* message's topic
    (Apache checks the first one only). Methods not listed need a valid signature only."""
    r = request
    if method == "SendMessage":
        return [topic_resource(_topic(m.topic), PUB) for m in r.messages]
    if method in ("EndTransaction", "RecallMessage"):
        return [topic_resource(_topic(r.topic), PUB)]
    if method == "QueryRoute":
        return [topic_resource(_topic(r.topic), ANY)]
    if method == "Heartbeat":
        return _sub(r.group) if r.client_type in CONSUMER_CLIENT_TYPES else []
    if method == "NotifyClientTermination":
        return _sub(r.group) if r.group.name else []
    if method in ("ReceiveMessage", "PullMessage", "UpdateOffset", "GetOffset"):
        return _sub(r.group, r.message_queue.topic)
    if method in ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue",
                  "QueryAssignment", "SyncLiteSubscription"):
        return _sub(r.group, r.topic)
    if method == "QueryOffset":
        return [topic_resource(_topic(r.message_queue.topic), SUB)]
    if method == "Telemetry":
        return _telemetry(r)
    return []


# ---------------------------------------------------------------------- the decision


@attrs.frozen
class Clock:
    now: float
    #: seconds east of UTC the client's wall time may be read at
    utc_offsets: tuple[float, ...] = (0.0,)


def admit(rules: PlainAclConfig, method: str, request: Any, metadata: Mapping[str, str],
          peer: str, clock: Clock, max_skew_s: float) -> str | None:
    """The access key the call is admitted under (None: a white-listed peer); ``AuthDenied``
    when refused."""
    ip = peer_ip(peer)
    if any(p.match(ip) for p in rules.global_white):
        return None
    signed = parse_authorization(metadata.get(AUTHORIZATION))
    account = rules.accounts.get(signed.access_key)
    if account is None:
        raise AuthDenied(f"No acl config for {signed.access_key}")
    if not account.white_remote_address.match(ip):
        date_time = metadata.get(DATE_TIME)
        if date_time is None or not date_fresh(date_time, clock.now, max_skew_s,
                                               clock.utc_offsets):
            raise AuthDenied(f"{DATE_TIME} is missing, malformed or off by more than "
                             f"{max_skew_s:g} s")
        if not _signature_holds(account.secret_key, date_time, signed.signature):
            raise AuthDenied(f"Check signature failed for accessKey={signed.access_key}")
    denied = check_account(account, resources(method, request))
    if denied is not None:
        raise AuthDenied(str(denied))
    return signed.access_key
