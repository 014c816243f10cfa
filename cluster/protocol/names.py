"""Names on the wire: the rules, and the one table of which request carries which name.

Every topic and group name that arrives in a request (a header field or a body) is checked with
a *full* match before anything uses it (a ``re.match`` with ``$`` would accept a trailing
newline). RocketMQ's rules are the floor: ``^[%|a-zA-Z0-9_-]+$``, a topic at most
``TOPIC_MAX_LENGTH`` characters, a group at most ``GROUP_MAX_LENGTH``; ``%RETRY%<group>`` and
``%DLQ%<group>`` topics only for a valid group. Queue ids that arrive on the wire must lie in
``[-1, MAX_QUEUE_NUMS)``; topics never have more than ``MAX_QUEUE_NUMS`` queues.

``names_in(request)`` lists every name a request carries (field, kind, value, and the access it
asks for, which the ACL maps onto permissions); ``check_request(request)`` answers the remark of
the first bad one. The broker's gate, the NameServer's and the ACL validator all read
``NAME_TABLE``, so a code cannot be covered by one and missed by another; a code without names is
listed in ``NO_NAME_CODES``.

Pure: no I/O, no trio.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import attrs

from ..remoting.codec import RemotingCommand
from ..remoting.codes import RequestCode, Version
from ..remoting.headers import SEND_V2_LETTER
from . import fastjson
from .crc import crc32
from .route import (
    RegisterBrokerBody,
    RouteDecodeError,
    TopicConfigSerializeWrapper,
)

TOPIC_MAX_LENGTH: Final = 127
GROUP_MAX_LENGTH: Final = 255
#: The most read/write queues a topic may have (RocketMQ has no limit; stats, reset and
#: /metrics walk every queue of a topic).
MAX_QUEUE_NUMS: Final = 1024
#: Names remembered as valid by one ``NameCache`` (per kind) before it starts afresh.
MAX_CACHED_NAMES: Final = 100_000
#: Longest name quoted back in a remark (the rest is cut).
MAX_QUOTED_NAME_CHARS: Final = 64
VALID_CHARS_TEXT: Final = "^[%|a-zA-Z0-9_-]+$"
_VALID_CHARS: Final = re.compile(r"[%|a-zA-Z0-9_-]+")
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
_VALID_QUEUE_IDS: Final = frozenset(str(i) for i in range(-1, MAX_QUEUE_NUMS))


class Kind(enum.Enum):
    TOPIC = "topic"
    GROUP = "group"
    QUEUE_ID = "queueId"


class Access(enum.IntEnum):
    """What a name asks of the ACL: nothing (validated only), PUB or SUB on it, or nothing
    beyond the admin flag its (admin-only) code already needs."""

    NONE = 0
    PUB = 1
    SUB = 2
    ADMIN = 3


@attrs.frozen
class Name:
    field: str
    kind: Kind
    value: Any
    access: Access


class UnreadableBody(ValueError):
    """A body that should carry names cannot be read."""


def _quote(name: str) -> str:
    """``name`` as a remark quotes it: control and non-ASCII characters escaped, cut short."""
    cut = name[:MAX_QUOTED_NAME_CHARS]
    if not (cut.isascii() and cut.isprintable()):
        cut = ascii(cut)[1:-1]
    return cut + "..." if len(name) > MAX_QUOTED_NAME_CHARS else cut


# =========================================================================== node names

#: Longest broker, cluster or controller name (RocketMQ's topic/group length limit).
MAX_NODE_NAME_CHARS: Final = 127
#: What a broker, cluster or controller name cannot hold besides whitespace: the separators of
#: address lists and ``.properties`` lines, and path separators (the names become file keys).
_NODE_NAME_SEPARATORS: Final = frozenset(";:=,/\\")


def node_name_problem(value: Any) -> str | None:
    """Why ``value`` cannot name a broker, a cluster or a controller, or None: the one rule the
    broker's config and the controller's replicated state both apply."""
    if type(value) is not str or not value or len(value) > MAX_NODE_NAME_CHARS:
        return f"must be 1..{MAX_NODE_NAME_CHARS} characters"
    if not value.isprintable() or any(c.isspace() or c in _NODE_NAME_SEPARATORS for c in value):
        return "has a character a name cannot have"
    return None


# =========================================================================== rules


def group_of_topic(topic: str) -> str | None:
    """The group a ``%RETRY%<group>`` / ``%DLQ%<group>`` topic is built from, else None."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return topic[len(DLQ_GROUP_TOPIC_PREFIX) :]
    return None


def validate_group(group: Any) -> str | None:
    """None if ``group`` is a legal group name, else RocketMQ's remark saying why not."""
    if not isinstance(group, str):
        return f"the specified group must be a string, not {type(group).__name__}"
    if not group.strip():
        return "the specified group is blank"
    if len(group) > GROUP_MAX_LENGTH:
        return f"the specified group is longer than group max length {GROUP_MAX_LENGTH}."
    if _VALID_CHARS.fullmatch(group) is None:
        return (
            f"the specified group[{_quote(group)}] contains illegal characters, "
            f"allowing only {VALID_CHARS_TEXT}"
        )
    return None


def validate_topic(topic: Any) -> str | None:
    """None if ``topic`` is a legal topic name, else RocketMQ's remark saying why not.

    A ``%RETRY%``/``%DLQ%`` topic must be built from a valid group (so it may be as long as the
    prefix plus ``GROUP_MAX_LENGTH``)."""
    if not isinstance(topic, str):
        return f"The specified topic must be a string, not {type(topic).__name__}"
    if not topic.strip():
        return "The specified topic is blank."
    if _VALID_CHARS.fullmatch(topic) is None:
        return (
            f"The specified topic[{_quote(topic)}] contains illegal characters, "
            f"allowing only {VALID_CHARS_TEXT}"
        )
    group = group_of_topic(topic)
    if group is not None:
        bad = validate_group(group)
        if bad is not None:
            return f"The specified topic[{_quote(topic)}] is not built from a valid group: {bad}"
        return None
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``; ``ValueError`` unless ``group`` is valid."""
    bad = validate_group(group)
    if bad is not None:
        raise ValueError(bad)
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``; ``ValueError`` unless ``group`` is valid."""
    bad = validate_group(group)
    if bad is not None:
        raise ValueError(bad)
    return DLQ_GROUP_TOPIC_PREFIX + group


def validate_queue_id(value: Any) -> str | None:
    """None if ``value`` (wire text or a JSON number) is a queue id in [-1, MAX_QUEUE_NUMS)."""
    if isinstance(value, str):
        if value in _VALID_QUEUE_IDS:
            return None
        try:
            number = int(value.strip())  # as the header parser reads it
        except ValueError:
            return f"queueId[{_quote(value)}] is not an integer"
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        return f"queueId must be an integer, not {type(value).__name__}"
    if not -1 <= number < MAX_QUEUE_NUMS:
        return f"queueId[{number}] is out of range [-1, {MAX_QUEUE_NUMS})"
    return None


def validate_queue_nums(read_queue_nums: int, write_queue_nums: int) -> str | None:
    """None if both counts lie in [0, MAX_QUEUE_NUMS], else a remark."""
    for label, n in (("readQueueNums", read_queue_nums), ("writeQueueNums", write_queue_nums)):
        if not 0 <= n <= MAX_QUEUE_NUMS:
            return f"{label}[{n}] is out of range [0, {MAX_QUEUE_NUMS}]"
    return None


_VALIDATORS: Final[dict[Kind, Callable[[Any], str | None]]] = {
    Kind.TOPIC: validate_topic,
    Kind.GROUP: validate_group,
    Kind.QUEUE_ID: validate_queue_id,
}


def problem(name: Name) -> str | None:
    """None if ``name`` is valid, else a remark naming the field and the problem."""
    bad = _VALIDATORS[name.kind](name.value)
    if bad is None:
        return None
    return f"{bad} (field {name.field})"


# =========================================================================== the table


@attrs.frozen
class H:
    """A name in a header field (absent: nothing to check; required-ness is the processor's)."""

    field: str
    kind: Kind
    access: Access = Access.NONE


BodyReader = Callable[[RemotingCommand], Iterator[Name]]


def _json_object(request: RemotingCommand) -> dict[str, Any]:
    raw = bytes(request.body).strip(b"\x00 \r\n\t")
    if not raw:
        return {}
    try:
        obj = fastjson.loads(raw)
    except ValueError as exc:
        raise UnreadableBody(f"body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise UnreadableBody("body is not a JSON object")
    return obj


def _items(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise UnreadableBody(f"{where}{key} is not a list")
    return value


def _scalar(value: Any) -> Any:
    """A name as the processors read it: strings as they are, numbers as ``str()``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def _heartbeat(request: RemotingCommand) -> Iterator[Name]:
    obj = _json_object(request)
    for i, producer in enumerate(_items(obj, "producerDataSet", "")):
        if isinstance(producer, dict) and producer.get("groupName") is not None:
            yield Name(
                f"producerDataSet[{i}].groupName", Kind.GROUP,
                _scalar(producer["groupName"]), Access.NONE,
            )
    for i, consumer in enumerate(_items(obj, "consumerDataSet", "")):
        if not isinstance(consumer, dict):
            continue
        where = f"consumerDataSet[{i}]."
        if consumer.get("groupName") is not None:
            yield Name(where + "groupName", Kind.GROUP, _scalar(consumer["groupName"]), Access.SUB)
        for j, sub in enumerate(_items(consumer, "subscriptionDataSet", where)):
            if isinstance(sub, dict) and sub.get("topic") is not None:
                yield Name(
                    f"{where}subscriptionDataSet[{j}].topic", Kind.TOPIC,
                    _scalar(sub["topic"]), Access.SUB,
                )


def _client_config(request: RemotingCommand) -> Iterator[Name]:
    obj = _json_object(request)
    if obj.get("group") is not None:
        yield Name("group", Kind.GROUP, _scalar(obj["group"]), Access.SUB)
    sub = obj.get("subscriptionData")
    if isinstance(sub, dict) and sub.get("topic") is not None:
        yield Name("subscriptionData.topic", Kind.TOPIC, _scalar(sub["topic"]), Access.SUB)


def _mq_batch(request: RemotingCommand) -> Iterator[Name]:
    obj = _json_object(request)
    if obj.get("consumerGroup") is not None:
        yield Name("consumerGroup", Kind.GROUP, _scalar(obj["consumerGroup"]), Access.SUB)
    for i, mq in enumerate(_items(obj, "mqSet", "")):
        if not isinstance(mq, dict):
            continue
        if mq.get("topic") is not None:
            yield Name(f"mqSet[{i}].topic", Kind.TOPIC, _scalar(mq["topic"]), Access.SUB)
        if mq.get("queueId") is not None:
            yield Name(f"mqSet[{i}].queueId", Kind.QUEUE_ID, mq["queueId"], Access.NONE)


def _subscription_group(request: RemotingCommand) -> Iterator[Name]:
    obj = _json_object(request)
    if obj.get("groupName") is not None:
        yield Name("groupName", Kind.GROUP, _scalar(obj["groupName"]), Access.ADMIN)


def _assignment(access: Access) -> BodyReader:
    """QUERY_ASSIGNMENT / SET_MESSAGE_REQUEST_MODE: topic and consumerGroup in a JSON body."""

    def read(request: RemotingCommand) -> Iterator[Name]:
        obj = _json_object(request)
        if obj.get("topic") is not None:
            yield Name("topic", Kind.TOPIC, _scalar(obj["topic"]), access)
        if obj.get("consumerGroup") is not None:
            yield Name("consumerGroup", Kind.GROUP, _scalar(obj["consumerGroup"]), access)

    return read


def _batch_ack(request: RemotingCommand) -> Iterator[Name]:
    """BATCH_ACK_MESSAGE: each ack's consumerGroup ("c") and topic ("t")."""
    obj = _json_object(request)
    for i, ack in enumerate(_items(obj, "acks", "")):
        if not isinstance(ack, dict):
            continue
        for short, long_, kind in (("c", "consumerGroup", Kind.GROUP), ("t", "topic", Kind.TOPIC)):
            value = ack.get(short, ack.get(long_))
            if value is not None:
                yield Name(f"acks[{i}].{short}", kind, _scalar(value), Access.SUB)


def _register_broker(request: RemotingCommand) -> Iterator[Name]:
    # A body whose CRC does not match or that does not decode carries no names: the handler
    # decodes it the same way and refuses it with RocketMQ's remark.
    ext = request.ext_fields
    body = bytes(request.body)
    if not body:
        return
    try:
        crc = int(str(ext.get("bodyCrc32", "0")).strip())
    except ValueError:
        return
    if crc != 0 and (crc32(body) & 0x7FFFFFFF) != crc:
        return
    compressed = str(ext.get("compressed", "false")).strip().lower() == "true"
    try:
        if request.version >= Version.V3_0_11:
            wrapper = RegisterBrokerBody.decode(body, compressed).topic_config_serialize_wrapper
        else:
            wrapper = TopicConfigSerializeWrapper.decode(body)
    except RouteDecodeError:
        return
    for key, tc in wrapper.topic_config_table.items():
        yield Name("topicConfigTable", Kind.TOPIC, key, Access.NONE)
        if tc.topic_name != key:
            yield Name("topicConfigTable.topicName", Kind.TOPIC, tc.topic_name, Access.NONE)


_RC = RequestCode
_T, _G, _Q = Kind.TOPIC, Kind.GROUP, Kind.QUEUE_ID
_PUB, _SUB, _ADM = Access.PUB, Access.SUB, Access.ADMIN

_SEND_V1: Final = (
    H("producerGroup", _G), H("topic", _T, _PUB), H("defaultTopic", _T), H("queueId", _Q),
)
_SEND_V2: Final = (
    H(SEND_V2_LETTER["producerGroup"], _G), H(SEND_V2_LETTER["topic"], _T, _PUB),
    H(SEND_V2_LETTER["defaultTopic"], _T), H(SEND_V2_LETTER["queueId"], _Q),
)
_TOPIC_QUEUE: Final = (H("topic", _T, _SUB), H("queueId", _Q))
_GROUP_TOPIC_QUEUE: Final = (H("consumerGroup", _G, _SUB), H("topic", _T, _SUB), H("queueId", _Q))

#: Every request code that carries a name -> where (header fields, body readers).
NAME_TABLE: Final[Mapping[int, tuple[H | BodyReader, ...]]] = {
    # --- broker: client traffic
    _RC.SEND_MESSAGE: _SEND_V1,
    _RC.SEND_MESSAGE_V2: _SEND_V2,
    _RC.SEND_BATCH_MESSAGE: _SEND_V2,
    _RC.SEND_REPLY_MESSAGE: _SEND_V1,
    _RC.SEND_REPLY_MESSAGE_V2: _SEND_V2,
    _RC.PULL_MESSAGE: _GROUP_TOPIC_QUEUE,
    _RC.LITE_PULL_MESSAGE: _GROUP_TOPIC_QUEUE,
    _RC.QUERY_MESSAGE: (H("topic", _T, _SUB),),
    _RC.QUERY_CONSUMER_OFFSET: _GROUP_TOPIC_QUEUE,
    _RC.UPDATE_CONSUMER_OFFSET: _GROUP_TOPIC_QUEUE,
    _RC.SEARCH_OFFSET_BY_TIMESTAMP: _TOPIC_QUEUE,
    _RC.GET_MAX_OFFSET: _TOPIC_QUEUE,
    _RC.GET_MIN_OFFSET: _TOPIC_QUEUE,
    _RC.GET_EARLIEST_MSG_STORETIME: _TOPIC_QUEUE,
    _RC.HEART_BEAT: (_heartbeat,),
    _RC.UNREGISTER_CLIENT: (H("producerGroup", _G), H("consumerGroup", _G, _SUB)),
    _RC.CONSUMER_SEND_MSG_BACK: (H("group", _G, _SUB), H("originTopic", _T, _PUB)),
    _RC.END_TRANSACTION: (H("producerGroup", _G),),
    _RC.GET_CONSUMER_LIST_BY_GROUP: (H("consumerGroup", _G, _SUB),),
    _RC.LOCK_BATCH_MQ: (_mq_batch,),
    _RC.UNLOCK_BATCH_MQ: (_mq_batch,),
    _RC.CHECK_CLIENT_CONFIG: (_client_config,),
    # --- broker: RocketMQ 5 POP (the receipt handle in extraInfo names no topic or group)
    _RC.POP_MESSAGE: _GROUP_TOPIC_QUEUE,
    _RC.ACK_MESSAGE: _GROUP_TOPIC_QUEUE,
    _RC.BATCH_ACK_MESSAGE: (_batch_ack,),
    _RC.CHANGE_MESSAGE_INVISIBLETIME: _GROUP_TOPIC_QUEUE,
    _RC.NOTIFICATION: _GROUP_TOPIC_QUEUE,
    _RC.POLLING_INFO: _GROUP_TOPIC_QUEUE,
    _RC.QUERY_ASSIGNMENT: (_assignment(_SUB),),
    _RC.SET_MESSAGE_REQUEST_MODE: (_assignment(_ADM),),
    # --- broker: admin
    _RC.UPDATE_AND_CREATE_TOPIC: (H("topic", _T, _ADM), H("defaultTopic", _T, _ADM)),
    _RC.DELETE_TOPIC_IN_BROKER: (H("topic", _T, _ADM),),
    _RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: (_subscription_group,),
    _RC.DELETE_SUBSCRIPTIONGROUP: (H("groupName", _G, _ADM),),
    _RC.GET_TOPIC_STATS_INFO: (H("topic", _T, _SUB),),
    _RC.GET_TOPIC_CONFIG: (H("topic", _T, _SUB),),
    _RC.GET_CONSUME_STATS: (H("consumerGroup", _G, _SUB), H("topic", _T, _SUB)),
    _RC.GET_CONSUMER_CONNECTION_LIST: (H("consumerGroup", _G, _SUB),),
    _RC.GET_PRODUCER_CONNECTION_LIST: (H("producerGroup", _G),),
    _RC.INVOKE_BROKER_TO_RESET_OFFSET: (H("topic", _T, _SUB), H("group", _G, _SUB)),
    _RC.QUERY_TOPIC_CONSUME_BY_WHO: (H("topic", _T, _SUB),),
    _RC.QUERY_CONSUME_TIME_SPAN: (H("topic", _T, _SUB), H("group", _G, _SUB)),
    _RC.GET_CONSUMER_RUNNING_INFO: (H("consumerGroup", _G, _SUB),),
    _RC.CONSUME_MESSAGE_DIRECTLY: (H("consumerGroup", _G, _SUB), H("topic", _T, _SUB)),
    # --- NameServer
    _RC.GET_ROUTEINFO_BY_TOPIC: (H("topic", _T),),
    _RC.DELETE_TOPIC_IN_NAMESRV: (H("topic", _T, _ADM),),
    _RC.REGISTER_BROKER: (_register_broker,),
}

#: Request codes a node serves that carry no topic, group or queue id (a code served by a
#: broker or NameServer must be here or in ``NAME_TABLE``; tests/unit/security/test_names.py).
#: VIEW_MESSAGE_BY_ID reads by physical offset: the processor asks the ACL about the topic of
#: the message it read.
NO_NAME_CODES: Final = frozenset(
    {
        _RC.VIEW_MESSAGE_BY_ID,
        _RC.GET_ALL_TOPIC_CONFIG,
        _RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        _RC.GET_ALL_CONSUMER_OFFSET,
        _RC.GET_ALL_DELAY_OFFSET,
        _RC.GET_BROKER_CONFIG,
        _RC.GET_BROKER_RUNTIME_INFO,
        _RC.GET_BROKER_CONSUME_STATS,
        _RC.GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
        _RC.UPDATE_BROKER_CONFIG,
        # statsKey is a topic or "topic@group": the processor splits and validates it
        _RC.VIEW_BROKER_STATS_DATA,
        # NameServer: KV entries live in one JSON file, broker/cluster names are table keys
        _RC.PUT_KV_CONFIG,
        _RC.GET_KV_CONFIG,
        _RC.DELETE_KV_CONFIG,
        _RC.GET_KVLIST_BY_NAMESPACE,
        _RC.UNREGISTER_BROKER,
        _RC.QUERY_DATA_VERSION,
        _RC.GET_BROKER_CLUSTER_INFO,
        _RC.WIPE_WRITE_PERM_OF_BROKER,
        _RC.ADD_WRITE_PERM_OF_BROKER,
        _RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        _RC.GET_TOPICS_BY_CLUSTER,
        _RC.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        _RC.GET_UNIT_TOPIC_LIST,
        _RC.GET_HAS_UNIT_SUB_TOPIC_LIST,
        _RC.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
        _RC.UPDATE_NAMESRV_CONFIG,
        _RC.GET_NAMESRV_CONFIG,
    }
)


def names_in(request: RemotingCommand) -> tuple[Name, ...]:
    """Every name ``request`` carries, in table order; ``UnreadableBody`` if a body that
    carries names cannot be read."""
    specs = NAME_TABLE.get(request.code)
    if not specs:
        return ()
    ext = request.ext_fields
    out: list[Name] = []
    for spec in specs:
        if isinstance(spec, H):
            value = ext.get(spec.field)
            if value is not None:
                out.append(Name(spec.field, spec.kind, value, spec.access))
        else:
            out.extend(spec(request))
    return tuple(out)


class NameCache:
    """Names already found valid, per kind, bounded: a node keeps one so the send hot path
    costs one set lookup per field. Starts afresh when ``MAX_CACHED_NAMES`` is reached."""

    __slots__ = ("_by_value", "_valid")

    def __init__(self) -> None:
        self._valid: dict[Kind, set[Any]] = {kind: set() for kind in Kind}
        # the same sets keyed by the Kind's ``_value_`` (a plain str attribute) for ``check``:
        # hashing the Enum member runs ``Enum.__hash__`` in Python on every field checked
        self._by_value: dict[str, set[Any]] = {k._value_: v for k, v in self._valid.items()}

    def problem(self, name: Name) -> str | None:
        return self.check(name.kind, name.value, name.field)

    def check(self, kind: Kind, value: Any, field: str) -> str | None:
        known = self._by_value[kind._value_]
        try:
            if value in known:
                return None
        except TypeError:  # unhashable: a list or object where a name belongs
            return problem(Name(field, kind, value, Access.NONE))
        bad = problem(Name(field, kind, value, Access.NONE))
        if bad is None:
            if len(known) >= MAX_CACHED_NAMES:
                known.clear()
            known.add(value)
        return bad


#: The codes whose names are all in header fields -> (field, the Kind's ``_value_``) of each:
#: ``check_request`` looks them up in the cache's sets at once (a send's and a pull's).
_HEADER_NAMES: Final[Mapping[int, tuple[tuple[str, str], ...]]] = {
    code: tuple((spec.field, spec.kind._value_) for spec in specs if isinstance(spec, H))
    for code, specs in NAME_TABLE.items()
    if all(isinstance(spec, H) for spec in specs)
}


def check_request(request: RemotingCommand, cache: NameCache | None = None) -> str | None:
    """None if every name ``request`` carries is valid, else a remark naming the first bad one
    (answered with SYSTEM_ERROR, as RocketMQ answers a bad topic in ``msgCheck``)."""
    specs = NAME_TABLE.get(request.code)
    if not specs:
        return None
    if cache is None:
        cache = NameCache()
    ext = request.ext_fields
    fields = _HEADER_NAMES.get(request.code)
    if fields is not None:  # every name known valid already: done (else the careful loop)
        known = cache._by_value
        try:
            for field, kind in fields:
                value = ext.get(field)
                if value is not None and value not in known[kind]:
                    break
            else:
                return None
        except TypeError:  # unhashable: the loop below names it
            pass
    check = cache.check
    for spec in specs:
        if isinstance(spec, H):
            value = ext.get(spec.field)
            if value is not None:
                bad = check(spec.kind, value, spec.field)
                if bad is not None:
                    return bad
            continue
        try:
            names = list(spec(request))
        except UnreadableBody as exc:
            return f"bad request body: {exc}"
        for name in names:
            bad = check(name.kind, name.value, name.field)
            if bad is not None:
                return bad
    return None
