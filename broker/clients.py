"""Clients of a broker: heartbeat bodies, subscriptions, producer/consumer tables, queue locks.

Pure (no trio): a "channel" is any hashable object standing for a client connection (the shell
passes its ``Connection``); time comes in as milliseconds. Decisions come out as return values:
which consumer groups changed membership (the shell then sends NOTIFY_CONSUMER_IDS_CHANGED).

HeartbeatData is accepted in Java form (enum names, numeric subVersion) and C++ 2.0 form
(integer ordinals, string subVersion, absent empty sets): remoting-protocol.md §4.6.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, Final

import attrs

from ..cluster.filter.sql92 import Selector, SelectorError, compile_sql92
from ..cluster.protocol import fastjson
from ..cluster.protocol.message import java_string_hash

SUB_ALL: Final = "*"
EXPRESSION_TAG: Final = "TAG"
EXPRESSION_SQL92: Final = "SQL92"
CONSUME_TYPES: Final = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS: Final = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE: Final = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)
#: RocketMQ's rebalance lock lease (rocketmq.broker.rebalance.lockMaxLiveTime).
REBALANCE_LOCK_MAX_LIVE_TIME_MS: Final = 60_000


class HeartbeatError(ValueError):
    """A heartbeat body that does not have HeartbeatData's shape."""


# ============================================================================ subscriptions


@attrs.frozen
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags_set: tuple[str, ...] = ()
    code_set: frozenset[int] = frozenset()
    sub_version: int = 0
    expression_type: str = EXPRESSION_TAG
    class_filter_mode: bool = False
    #: SQL92: the compiled selector (None when it did not compile: ``filter_error`` says why)
    selector: Selector | None = attrs.field(default=None, eq=False, repr=False)
    filter_error: str | None = attrs.field(default=None, eq=False)

    @property
    def matches_all(self) -> bool:
        if self.expression_type == EXPRESSION_SQL92:
            return False
        return self.sub_string == SUB_ALL or not self.code_set

    @property
    def is_tag_type(self) -> bool:
        return self.expression_type == EXPRESSION_TAG

    def is_matched_by_tags_code(self, tags_code: int) -> bool:
        """Java ``ExpressionMessageFilter.isMatchedByConsumeQueue`` for TAG expressions."""
        if self.class_filter_mode or self.expression_type != EXPRESSION_TAG:
            return True
        if self.sub_string == SUB_ALL:
            return True
        return tags_code in self.code_set

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": sorted(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }


#: Compiled SQL92 selectors by text, shared by every subscription of this process (a cache:
#: compiling is pure, so sharing changes nothing but the cost).
_SELECTOR_CACHE: dict[str, Selector] = {}


def build_subscription(
    topic: str, sub_string: str | None, sub_version: int = 0, expression_type: str | None = None
) -> SubscriptionData:
    """Java ``FilterAPI.build``: ``*``/empty = everything, else ``TagA || TagB``; SQL92
    expressions are compiled (a bad one raises ValueError with the parser's reason)."""
    etype = (expression_type or EXPRESSION_TAG).upper()
    if etype == EXPRESSION_SQL92:
        if sub_string is None or not sub_string.strip():
            raise ValueError(f"Expression can't be null! {etype}")
        return SubscriptionData(
            topic, sub_string, sub_version=sub_version, expression_type=EXPRESSION_SQL92,
            selector=compile_sql92(sub_string, _SELECTOR_CACHE),
        )
    if etype != EXPRESSION_TAG:
        raise ValueError(f"The broker does not support consumer to filter message by {etype}")
    if sub_string is None or not sub_string.strip() or sub_string.strip() == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, sub_version=sub_version)
    tags = [t.strip() for t in sub_string.split("||")]
    tags = [t for t in tags if t]
    if not tags:
        raise ValueError(f"subString split error: {sub_string!r}")
    return SubscriptionData(
        topic,
        sub_string,
        tuple(tags),
        frozenset(java_string_hash(t) for t in tags),
        sub_version,
    )


# ============================================================================ heartbeat


@attrs.frozen
class ConsumerData:
    group_name: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: tuple[SubscriptionData, ...]
    unit_mode: bool = False


@attrs.frozen
class HeartbeatData:
    client_id: str
    producer_groups: tuple[str, ...]
    consumers: tuple[ConsumerData, ...]


def _enum(value: Any, names: tuple[str, ...], what: str) -> str:
    if isinstance(value, bool):
        raise HeartbeatError(f"{what}: {value!r}")
    if isinstance(value, int):
        if 0 <= value < len(names):
            return names[value]
        raise HeartbeatError(f"{what}: ordinal {value} out of range")
    if isinstance(value, str):
        if value in names:
            return value
        if value.isdigit() and int(value) < len(names):
            return names[int(value)]
    raise HeartbeatError(f"{what}: {value!r}")


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise HeartbeatError(f"{key} must be a list")
    return value


def _int(value: Any, default: int = 0) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise HeartbeatError(f"not an integer: {value!r}") from None


def decode_subscription(raw: Any) -> SubscriptionData:
    if not isinstance(raw, dict):
        raise HeartbeatError("subscriptionData must be an object")
    topic = raw.get("topic")
    if not isinstance(topic, str) or not topic:
        raise HeartbeatError("subscriptionData.topic is required")
    sub_string = str(raw.get("subString") or SUB_ALL)
    etype = str(raw.get("expressionType") or EXPRESSION_TAG).upper()
    if etype == EXPRESSION_SQL92:
        # a bad expression does not refuse the heartbeat: pulls for it answer
        # FILTER_DATA_NOT_EXIST (RocketMQ's ConsumerFilterManager keeps no filter data)
        try:
            selector: Selector | None = compile_sql92(str(sub_string), _SELECTOR_CACHE)
            error = None
        except SelectorError as exc:
            selector, error = None, str(exc)
        return SubscriptionData(
            topic=topic, sub_string=str(sub_string), sub_version=_int(raw.get("subVersion")),
            expression_type=EXPRESSION_SQL92,
            class_filter_mode=bool(raw.get("classFilterMode", False)),
            selector=selector, filter_error=error,
        )
    tags = tuple(str(t) for t in _list(raw, "tagsSet"))
    codes = frozenset(_int(c) for c in _list(raw, "codeSet"))
    if not codes and tags and sub_string != SUB_ALL:
        codes = frozenset(java_string_hash(t) for t in tags)
    if not tags and sub_string != SUB_ALL:
        try:
            parsed = build_subscription(topic, sub_string)
        except ValueError as exc:
            raise HeartbeatError(str(exc)) from None
        tags, codes = parsed.tags_set, parsed.code_set
    return SubscriptionData(
        topic=topic,
        sub_string=str(sub_string),
        tags_set=tags,
        code_set=codes,
        sub_version=_int(raw.get("subVersion")),
        expression_type=str(raw.get("expressionType") or EXPRESSION_TAG),
        class_filter_mode=bool(raw.get("classFilterMode", False)),
    )


def decode_heartbeat(body: bytes | bytearray | memoryview) -> HeartbeatData:
    try:
        obj = fastjson.loads(bytes(body).strip(b"\x00 \r\n\t"))
    except ValueError as exc:
        raise HeartbeatError(f"heartbeat body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise HeartbeatError("heartbeat body must be a JSON object")
    client_id = obj.get("clientID")
    if not isinstance(client_id, str) or not client_id:
        raise HeartbeatError("clientID is required")
    producers = []
    for p in _list(obj, "producerDataSet"):
        if isinstance(p, dict) and isinstance(p.get("groupName"), str):
            producers.append(p["groupName"])
    consumers = []
    for c in _list(obj, "consumerDataSet"):
        if not isinstance(c, dict) or not isinstance(c.get("groupName"), str):
            raise HeartbeatError("consumerData.groupName is required")
        consumers.append(
            ConsumerData(
                group_name=c["groupName"],
                consume_type=_enum(
                    c.get("consumeType", "CONSUME_PASSIVELY"), CONSUME_TYPES, "consumeType"
                ),
                message_model=_enum(
                    c.get("messageModel", "CLUSTERING"), MESSAGE_MODELS, "messageModel"
                ),
                consume_from_where=_enum(
                    c.get("consumeFromWhere", CONSUME_FROM_WHERE[0]),
                    CONSUME_FROM_WHERE,
                    "consumeFromWhere",
                ),
                subscriptions=tuple(
                    decode_subscription(s) for s in _list(c, "subscriptionDataSet")
                ),
                unit_mode=str(c.get("unitMode", False)).lower() in ("true", "1"),
            )
        )
    return HeartbeatData(client_id, tuple(producers), tuple(consumers))


# ============================================================================ client tables


@attrs.define
class ClientChannelInfo:
    channel: Hashable
    client_id: str
    language: str
    version: int
    addr: str
    last_update_ms: int
    #: Producer rows, ACL on: the AccessKey of the connection's latest heartbeat for the group
    #: (the account the ACL admitted it as); None with ACL off.
    access_key: str | None = None


@attrs.define
class ConsumerGroupInfo:
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = CONSUME_FROM_WHERE[0]
    channels: dict[Hashable, ClientChannelInfo] = attrs.field(factory=dict)
    subscriptions: dict[str, SubscriptionData] = attrs.field(factory=dict)
    last_update_ms: int = 0

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]

    def find_subscription(self, topic: str) -> SubscriptionData | None:
        return self.subscriptions.get(topic)


class ClientManager:
    """Producer and consumer tables kept from heartbeats (Java ProducerManager +
    ConsumerManager)."""

    def __init__(self, *, channel_expired_ms: int) -> None:
        self.channel_expired_ms = channel_expired_ms
        self.producers: dict[str, dict[Hashable, ClientChannelInfo]] = {}
        self.consumers: dict[str, ConsumerGroupInfo] = {}

    # ------------------------------------------------------------------ registration

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        channels = self.producers.setdefault(group, {})
        old = channels.get(info.channel)
        if old is None:
            channels[info.channel] = info
        else:
            old.last_update_ms = info.last_update_ms
            old.access_key = info.access_key

    def unregister_producer(self, group: str, channel: Hashable) -> None:
        channels = self.producers.get(group)
        if channels is not None:
            channels.pop(channel, None)
            if not channels:
                del self.producers[group]

    def register_consumer(self, data: ConsumerData, info: ClientChannelInfo) -> bool:
        """Record the heartbeat; True when the group's membership or subscriptions changed."""
        group = self.consumers.get(data.group_name)
        if group is None:
            group = self.consumers[data.group_name] = ConsumerGroupInfo(data.group_name)
        group.consume_type = data.consume_type
        group.message_model = data.message_model
        group.consume_from_where = data.consume_from_where
        group.last_update_ms = info.last_update_ms
        changed = False
        old = group.channels.get(info.channel)
        if old is None:
            group.channels[info.channel] = info
            changed = True
        else:
            if old.client_id != info.client_id:
                group.channels[info.channel] = info
                changed = True
            old.last_update_ms = info.last_update_ms
        new_subs = {s.topic: s for s in data.subscriptions}
        for topic, sub in new_subs.items():
            cur = group.subscriptions.get(topic)
            if cur is None:
                group.subscriptions[topic] = sub
                changed = True
            elif sub.sub_version > cur.sub_version or sub.sub_string != cur.sub_string:
                group.subscriptions[topic] = sub
        for topic in [t for t in group.subscriptions if t not in new_subs]:
            del group.subscriptions[topic]
            changed = True
        return changed

    def unregister_consumer(self, group_name: str, channel: Hashable) -> bool:
        """True when the channel was a member (the remaining members should be told)."""
        group = self.consumers.get(group_name)
        if group is None or group.channels.pop(channel, None) is None:
            return False
        if not group.channels:
            del self.consumers[group_name]
        return True

    def channel_closed(self, channel: Hashable) -> list[str]:
        """Forget ``channel`` everywhere; the consumer groups it belonged to."""
        for group in list(self.producers):
            self.unregister_producer(group, channel)
        changed = []
        for name in list(self.consumers):
            if self.unregister_consumer(name, channel):
                changed.append(name)
        return changed

    def scan_not_active(self, now_ms: int) -> tuple[list[Hashable], list[str]]:
        """Drop clients silent for channel_expired_ms. -> (their channels, changed groups)."""
        expired: set[Hashable] = set()
        for channels in self.producers.values():
            for ch, info in channels.items():
                if now_ms - info.last_update_ms > self.channel_expired_ms:
                    expired.add(ch)
        for group in self.consumers.values():
            for ch, info in group.channels.items():
                if now_ms - info.last_update_ms > self.channel_expired_ms:
                    expired.add(ch)
        changed: list[str] = []
        for ch in expired:
            for name in self.channel_closed(ch):
                if name not in changed:
                    changed.append(name)
        return list(expired), changed

    # ------------------------------------------------------------------ queries

    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumers.get(group)

    def consumer_channels(self, group: str) -> list[Hashable]:
        info = self.consumers.get(group)
        return list(info.channels) if info is not None else []

    def find_channel_by_client_id(self, group: str, client_id: str) -> Hashable | None:
        info = self.consumers.get(group)
        if info is not None:
            for ch, ci in info.channels.items():
                if ci.client_id == client_id:
                    return ch
        return None

    def producer_channels(self, group: str) -> list[Hashable]:
        return list(self.producers.get(group, {}))

    def producer_infos(self, group: str) -> list[ClientChannelInfo]:
        """The group's producer connections, first registered first."""
        return list(self.producers.get(group, {}).values())

    def groups_subscribing(self, topic: str) -> list[str]:
        return [g for g, info in self.consumers.items() if topic in info.subscriptions]


# ============================================================================ queue locks


MessageQueueKey = tuple[str, str, int]  # topic, brokerName, queueId


@attrs.define
class _Lock:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    """Orderly consumers' queue locks (Java ``RebalanceLockManager``), leased for 60 s."""

    def __init__(self, max_live_ms: int = REBALANCE_LOCK_MAX_LIVE_TIME_MS) -> None:
        self.max_live_ms = max_live_ms
        self.table: dict[str, dict[MessageQueueKey, _Lock]] = {}

    def try_lock_batch(
        self, group: str, mqs: Iterable[MessageQueueKey], client_id: str, now_ms: int
    ) -> list[MessageQueueKey]:
        locks = self.table.setdefault(group, {})
        ok = []
        for mq in mqs:
            lock = locks.get(mq)
            if (
                lock is None
                or lock.client_id == client_id
                or now_ms - lock.last_update_ms > self.max_live_ms
            ):
                locks[mq] = _Lock(client_id, now_ms)
                ok.append(mq)
        return ok

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueueKey], client_id: str) -> None:
        locks = self.table.get(group)
        if not locks:
            return
        for mq in mqs:
            lock = locks.get(mq)
            if lock is not None and lock.client_id == client_id:
                del locks[mq]
