"""gRPC (apache.rocketmq.v2 protobuf) <-> our remoting model, in one place: routes into
MessageQueues, a published Message into ours, client errors into the v2 ``Code``, Settings
answered on Telemetry. Pure: no Trio."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

import attrs
from google.protobuf import duration_pb2

from ..client.errors import (
    MQBrokerError,
    MQClientError,
    MQTimeoutError,
    NoRouteError,
)
from ..client.model import Message, MessageQueue
from ..cluster.protocol import fastjson
from ..cluster.protocol.message import MessageConst as MC
from ..cluster.protocol.names import MAX_QUEUE_NUMS
from ..cluster.protocol.route import PermName, TopicRouteData
from ..cluster.protocol.topic_attributes import (
    TYPE_MISMATCH_REMARK,
    MessageType,
    topic_message_type,
)
from ..cluster.remoting.codes import ResponseCode
from .pb import definition_pb2 as pb

#: the message group of a FIFO message, as the 5.x Proxy stores it (RocketMQ's sharding key)
PROPERTY_MESSAGE_GROUP: Final = "__SHARDINGKEY"
#: the host the SDK says it sent from, kept with the message (as Apache's proxy keeps it) and
#: handed back as ``born_host`` to whoever receives it
PROPERTY_BORN_HOST: Final = "__BORNHOST"
#: the longest ``born_host`` kept (a host name and a port); a longer one is not kept
MAX_BORN_HOST_CHARS: Final = 255
MASTER_ID: Final = 0
#: user properties one message may carry (a bound on what one request makes us build)
MAX_USER_PROPERTIES: Final = 128
#: topics with no 5.x message type accept every type (Apache: UNSPECIFIED topics are mixed)
ALL_TYPES: Final = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
#: delivery timestamps past this (in seconds since the epoch: the year 9999) are refused
#: before they reach the broker, which refuses anything past its own timerMaxDelaySec
MAX_DELIVERY_SECONDS: Final = 253_402_300_799
#: user property keys that would change what the broker does with a message
_RESERVED_KEYS: Final = frozenset({
    MC.PROPERTY_TRANSACTION_PREPARED, MC.PROPERTY_PRODUCER_GROUP,
    MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, PROPERTY_MESSAGE_GROUP,
    MC.PROPERTY_DELAY_TIME_LEVEL, MC.PROPERTY_REAL_TOPIC, MC.PROPERTY_REAL_QUEUE_ID,
    "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "__STARTDELIVERTIME",
    PROPERTY_BORN_HOST,
})
#: what a producer is told in Settings: retries with exponential backoff
PRODUCER_MAX_ATTEMPTS: Final = 3
#: what a consumer is told in Settings (Apache's proxy defaults): its receive batch
#: (``grpcClientConsumerLongPollingBatchSize``; its longest long poll is the proxy's
#: ``grpc_client_consumer_max_long_polling_timeout_ms``)
CONSUMER_RECEIVE_BATCH: Final = 32
CONSUMER_MAX_LONG_POLL_MS: Final = 20_000
#: a subscription group's retries when it names none (RocketMQ's ``retryMaxTimes`` default)
DEFAULT_RETRY_MAX_TIMES: Final = 16
#: the largest ``retryMaxTimes`` taken from a broker (a consumer's attempts are an int32)
MAX_RETRY_MAX_TIMES: Final = 2**31 - 2
#: a consumer's wait before each redelivery, in milliseconds: RocketMQ's delay levels 3 and up
#: (1s 5s 10s 30s 1m .. 2h), the customized backoff Apache answers a group of the default policy
CONSUMER_RETRY_NEXT_MS: Final = (
    1_000, 5_000, 10_000, 30_000, *(m * 60_000 for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30)),
    3_600_000, 7_200_000,
)


#: protobuf's Duration range (google/protobuf/duration.proto: about 10 000 years either way)
MAX_DURATION_SECONDS: Final = 315_576_000_000
MAX_DURATION_NANOS: Final = 999_999_999


def duration_ms(d: duration_pb2.Duration) -> int | None:
    """A request's Duration in whole milliseconds, truncated toward zero, as protobuf-java's
    ``Durations.toMillis`` (which Apache's proxy reads every duration with) gives it; None for
    what is no valid Duration and ``toMillis`` refuses: seconds or nanos out of protobuf's
    range, or of opposite signs. An unset field reads as 0."""
    seconds, nanos = int(d.seconds), int(d.nanos)
    if abs(seconds) > MAX_DURATION_SECONDS or abs(nanos) > MAX_DURATION_NANOS \
            or seconds < 0 < nanos or nanos < 0 < seconds:
        return None
    whole_ms = abs(nanos) // 1_000_000
    return seconds * 1000 + (whole_ms if nanos >= 0 else -whole_ms)


class ProxyError(Exception):
    """A request refused with a v2 ``Code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def ok_status() -> pb.Status:
    return pb.Status(code=pb.OK, message="OK")


def error_status(exc: BaseException) -> pb.Status:
    code, message = code_of(exc)
    return pb.Status(code=code, message=message[:512])


def code_of(exc: BaseException) -> tuple[int, str]:
    """The v2 Code for a failure of the remoting side (or a refused request)."""
    if isinstance(exc, ProxyError):
        return exc.code, exc.message
    if isinstance(exc, NoRouteError):
        return pb.TOPIC_NOT_FOUND, str(exc)
    if isinstance(exc, MQTimeoutError):
        return pb.PROXY_TIMEOUT, str(exc)
    if isinstance(exc, MQClientError) and exc.code == ResponseCode.MESSAGE_ILLEGAL and (
            exc.remark or "").startswith(TYPE_MISMATCH_REMARK):
        # the broker's message type check refused it: answered as Apache's proxy does
        return pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, str(exc)
    if isinstance(exc, MQBrokerError):
        return _BROKER_CODES.get(exc.code or 0, pb.INTERNAL_SERVER_ERROR), str(exc)
    if isinstance(exc, MQClientError):
        if exc.code == ResponseCode.MESSAGE_ILLEGAL:
            return pb.BAD_REQUEST, str(exc)
        return pb.INTERNAL_SERVER_ERROR, str(exc)
    return pb.INTERNAL_SERVER_ERROR, type(exc).__name__


_BROKER_CODES: Final[dict[int, int]] = {
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
}


# ---------------------------------------------------------------------- metadata


@attrs.frozen
class GroupPolicy:
    """What the proxy takes from a subscription group's config: whether it consumes in order
    (``consumeMessageOrderly``: orderly POP, the SDKs' FIFO consumption) and its
    ``retryMaxTimes``."""

    orderly: bool = False
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES


@attrs.frozen
class TopicInfo:
    """What the proxy takes from a topic's config: whether a broker has it, and the 5.x
    message type it declares (None: none, a 4.x topic, which takes every type)."""

    exists: bool
    message_type: MessageType | None = None


MISSING_TOPIC: Final = TopicInfo(exists=False)


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        obj = fastjson.loads(body)
    except ValueError as exc:  # FastjsonError is one
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def group_policy(table_body: bytes, group: str) -> GroupPolicy | None:
    """``group``'s policy from a broker's GET_ALL_SUBSCRIPTIONGROUP_CONFIG answer (None when
    the broker has no such group); ValueError for anything that is not such a table."""
    table = _json_object(table_body).get("subscriptionGroupTable")
    if not isinstance(table, dict):
        raise ValueError("no subscriptionGroupTable")
    entry = table.get(group)
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise ValueError(f"group {group!r} is not an object")
    orderly = entry.get("consumeMessageOrderly", False)
    retries = entry.get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES)
    if not isinstance(orderly, bool) or isinstance(retries, bool) \
            or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRY_MAX_TIMES:
        raise ValueError(f"group {group!r}: bad consumeMessageOrderly or retryMaxTimes")
    return GroupPolicy(orderly=orderly, retry_max_times=retries)


def topic_info(config_body: bytes) -> TopicInfo:
    """A topic's info from a broker's GET_TOPIC_CONFIG answer (``TopicConfigAndQueueMapping``
    JSON); ValueError for anything else."""
    attributes = _json_object(config_body).get("attributes") or {}
    if not isinstance(attributes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
        raise ValueError("attributes are not a string map")
    return TopicInfo(exists=True, message_type=topic_message_type(attributes))


def accept_message_types(declared: MessageType | None) -> tuple[int, ...]:
    """The v2 message types a topic's queues accept (QueryRoute), as Apache's proxy names them
    for a declared type; a topic declaring none takes every type (our broker's rule for 4.x
    topics, where Apache's would say NORMAL)."""
    if declared is None or declared is MessageType.MIXED:
        return ALL_TYPES
    return {
        MessageType.NORMAL: (pb.NORMAL,), MessageType.FIFO: (pb.FIFO,),
        MessageType.DELAY: (pb.DELAY,), MessageType.TRANSACTION: (pb.TRANSACTION,),
    }.get(declared, (pb.MESSAGE_TYPE_UNSPECIFIED,))


# ---------------------------------------------------------------------- routes


def message_queues(topic: str, route: TopicRouteData, endpoints: pb.Endpoints,
                   accept: Sequence[int] = ALL_TYPES) -> list[pb.MessageQueue]:
    """The topic's queues as 5.x clients see them: per broker with a master, ``min(read,
    write)`` READ_WRITE queues, then the extra READ or WRITE ones, every broker reached through
    this proxy's ``endpoints``, each accepting the message types ``accept``."""
    masters = {b.broker_name for b in route.broker_datas if MASTER_ID in b.broker_addrs}
    out: list[pb.MessageQueue] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.broker_name not in masters:
            continue
        reads = qd.read_queue_nums if PermName.is_readable(qd.perm) else 0
        writes = qd.write_queue_nums if PermName.is_writeable(qd.perm) else 0
        broker = pb.Broker(name=qd.broker_name, id=MASTER_ID, endpoints=endpoints)
        for qid in range(min(max(reads, writes), MAX_QUEUE_NUMS)):
            if qid < min(reads, writes):
                perm = pb.READ_WRITE
            else:
                perm = pb.READ if qid < reads else pb.WRITE
            out.append(pb.MessageQueue(
                topic=pb.Resource(name=topic), id=qid, permission=perm, broker=broker,
                accept_message_types=accept,
            ))
    return out


def assignments(topic: str, route: TopicRouteData, endpoints: pb.Endpoints,
                orderly: bool = False) -> list[pb.Assignment]:
    """A PushConsumer's assignment (QueryAssignment): each broker with a master and readable
    queues as one whole-broker queue (id -1), which it receives from by POP; the broker
    balances the group's consumers over its queues, however many consumers there are. An
    ``orderly`` group's consumers get each readable queue (ids 0..n-1) instead, as Apache's
    proxy gives them: one receive in flight per queue, each still a whole-broker orderly pop
    there (and here). No accepted message types: they are a producer's concern (Apache's
    proxy names none here)."""
    masters = {b.broker_name for b in route.broker_datas if MASTER_ID in b.broker_addrs}
    out: list[pb.Assignment] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.broker_name not in masters or not PermName.is_readable(qd.perm) \
                or qd.read_queue_nums <= 0:
            continue
        perm = pb.READ_WRITE if PermName.is_writeable(qd.perm) else pb.READ
        broker = pb.Broker(name=qd.broker_name, id=MASTER_ID, endpoints=endpoints)
        for qid in range(min(qd.read_queue_nums, MAX_QUEUE_NUMS)) if orderly else (-1,):
            out.append(pb.Assignment(message_queue=pb.MessageQueue(
                topic=pb.Resource(name=topic), id=qid, permission=perm, broker=broker)))
    return out


def readable_brokers(route: TopicRouteData) -> list[str]:
    """The topic's brokers with a master and readable queues, by name."""
    masters = {b.broker_name for b in route.broker_datas if MASTER_ID in b.broker_addrs}
    return sorted({qd.broker_name for qd in route.queue_datas
                   if qd.broker_name in masters and PermName.is_readable(qd.perm)
                   and qd.read_queue_nums > 0})


def fifo_queue(queues: Sequence[MessageQueue], group: str) -> MessageQueue:
    """A message group's queue: the same group always on the same queue (while the queue
    count stays)."""
    digest = hashlib.blake2b(group.encode(), digest_size=8).digest()
    return queues[int.from_bytes(digest, "big") % len(queues)]


# ---------------------------------------------------------------------- publishing


def message_from_pb(m: pb.Message, max_body_bytes: int) -> tuple[Message, str | None]:
    """A published message as ours, with its message group (FIFO) if any; ProxyError if the
    SDK sent what a 5.x Proxy refuses."""
    sp = m.system_properties
    if not m.topic.name:
        raise ProxyError(pb.ILLEGAL_TOPIC, "topic is empty")
    if not m.body:
        raise ProxyError(pb.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(m.body) > max_body_bytes:
        raise ProxyError(pb.MESSAGE_BODY_TOO_LARGE,
                         f"message body of {len(m.body)} bytes over {max_body_bytes}")
    if sp.body_encoding not in (pb.ENCODING_UNSPECIFIED, pb.IDENTITY):
        raise ProxyError(pb.UNSUPPORTED, "only identity-encoded bodies are accepted")
    if not sp.message_id:
        raise ProxyError(pb.ILLEGAL_MESSAGE_ID, "message id is empty")
    if len(m.user_properties) > MAX_USER_PROPERTIES:
        raise ProxyError(pb.MESSAGE_PROPERTIES_TOO_LARGE,
                         f"more than {MAX_USER_PROPERTIES} user properties")
    if any(k in _RESERVED_KEYS for k in m.user_properties):
        raise ProxyError(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, "a user property uses a system key")
    group = sp.message_group if sp.HasField("message_group") else None
    deliver_ms = None
    if sp.HasField("delivery_timestamp"):
        ts = sp.delivery_timestamp
        if not 0 < ts.seconds < MAX_DELIVERY_SECONDS or not 0 <= ts.nanos < 1_000_000_000:
            raise ProxyError(pb.ILLEGAL_DELIVERY_TIME, f"bad delivery time {ts.seconds}s")
        deliver_ms = ts.seconds * 1000 + ts.nanos // 1_000_000
    if group is not None and deliver_ms is not None:
        raise ProxyError(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                         "a message has a message group or a delivery time, not both")
    transaction = sp.message_type == pb.TRANSACTION
    if transaction and (group is not None or deliver_ms is not None):
        raise ProxyError(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                         "a transaction message has no message group nor delivery time")
    if group is not None and not group.strip():
        raise ProxyError(pb.ILLEGAL_MESSAGE_GROUP, "message group is blank")
    props = dict(m.user_properties)
    props[MC.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
    if sp.born_host and len(sp.born_host) <= MAX_BORN_HOST_CHARS:
        props[PROPERTY_BORN_HOST] = sp.born_host
    if group is not None:
        props[PROPERTY_MESSAGE_GROUP] = group
    if transaction:  # a 4.x half message of the topic's producer group (as Apache's proxy)
        props[MC.PROPERTY_TRANSACTION_PREPARED] = "true"
        props[MC.PROPERTY_PRODUCER_GROUP] = m.topic.name
    msg = Message(
        m.topic.name, bytes(m.body),
        tags=sp.tag if sp.HasField("tag") and sp.tag else None,
        keys=tuple(sp.keys) or None,
        properties=props,
        deliver_time_ms=deliver_ms,
    )
    return msg, group


def body_digest(body: bytes) -> pb.Digest:
    """MD5 in upper-case hex, as Apache's proxy sends it. (Not CRC32: the SDKs disagree on
    its text, the Python SDK pads it to 8 digits and the Java SDK does not, so a Java client
    took every body whose CRC-32 starts with a zero hex digit for corrupted.)"""
    return pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper())


# ---------------------------------------------------------------------- settings


def settings_reply(client: pb.Settings, max_body_bytes: int,
                   group: GroupPolicy | None = None, *,
                   max_long_poll_ms: int = CONSUMER_MAX_LONG_POLL_MS) -> pb.Settings:
    """What the proxy answers to a client's Settings on Telemetry, as Apache's proxy does: a
    producer's own with the body limit, the type check and the producer's backoff; a
    consumer's own over the consumer defaults, and over both its subscription group's receive
    batch, longest long poll, orderliness (``fifo``) and retry policy when the brokers know
    the group (``group``)."""
    out = pb.Settings()
    if client.HasField("publishing") or client.client_type in (pb.PRODUCER,):
        out.CopyFrom(client)
        out.publishing.max_body_size = max_body_bytes
        out.publishing.validate_message_type = True
        out.backoff_policy.max_attempts = PRODUCER_MAX_ATTEMPTS
        backoff = out.backoff_policy.exponential_backoff
        backoff.initial.CopyFrom(duration_pb2.Duration(nanos=10_000_000))
        backoff.max.CopyFrom(duration_pb2.Duration(seconds=1))
        backoff.multiplier = 2.0
        return out
    if not client.HasField("subscription"):
        out.CopyFrom(client)
        return out
    _apply_group(out, GroupPolicy(), max_long_poll_ms)  # the defaults, under the client's own
    out.MergeFrom(client)
    if group is not None:
        _apply_group(out, group, max_long_poll_ms)
    return out


def _apply_group(out: pb.Settings, group: GroupPolicy, max_long_poll_ms: int) -> None:
    sub = out.subscription
    sub.receive_batch_size = CONSUMER_RECEIVE_BATCH
    sub.long_polling_timeout.FromMilliseconds(max_long_poll_ms)
    sub.fifo = group.orderly
    out.backoff_policy.max_attempts = group.retry_max_times + 1
    nexts = []
    for ms in CONSUMER_RETRY_NEXT_MS:
        d = duration_pb2.Duration()
        d.FromMilliseconds(ms)
        nexts.append(d)
    out.backoff_policy.customized_backoff.CopyFrom(pb.CustomizedBackoff(next=nexts))
