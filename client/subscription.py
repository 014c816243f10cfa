"""Subscriptions (Java ``SubscriptionData`` / ``FilterAPI.buildSubscriptionData``) and the
heartbeat body (``HeartbeatData``) exactly as a Java 4.9 client's fastjson writes it. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ..cluster.protocol import fastjson
from ..cluster.protocol.message import java_string_hash

SUB_ALL = "*"
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"


def java_hashset_order(items: Iterable[Any], hash_of: Any) -> list[Any]:
    """Iteration order of a Java ``HashSet`` built by adding ``items`` in order: buckets by
    ``(h ^ (h >>> 16)) & (capacity - 1)`` (capacity 16, doubling past 0.75 load), insertion
    order within a bucket. fastjson writes sets in this order."""
    unique: list[Any] = []
    seen: set[Any] = set()
    for item in items:
        if item not in seen:
            seen.add(item)
            unique.append(item)
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2

    def bucket(item: Any) -> int:
        h = hash_of(item) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(unique, key=bucket)  # stable: insertion order within a bucket


#: Key sequences a ``JavaMapOrder`` remembers before it starts over.
MAP_ORDER_CACHE_MAX_ENTRIES = 1024


class JavaMapOrder:
    """The iteration order of a Java ``HashMap<String,String>`` filled with given keys in order
    (Java writes message properties by iterating the map), remembered per key sequence: a
    producer sends the same few sequences over and over. One per producer (no shared state)."""

    __slots__ = ("_orders",)

    def __init__(self) -> None:
        self._orders: dict[tuple[str, ...], tuple[str, ...]] = {}

    def keys(self, props: dict[str, str]) -> tuple[str, ...]:
        keys = tuple(props)
        order = self._orders.get(keys)
        if order is None:
            order = tuple(java_hashset_order(keys, java_string_hash))
            if len(self._orders) >= MAP_ORDER_CACHE_MAX_ENTRIES:
                self._orders.clear()
            self._orders[keys] = order
        return order

    def ordered(self, props: dict[str, str]) -> dict[str, str]:
        """``props`` re-ordered as the Java map iterates."""
        return {k: props[k] for k in self.keys(props)}

    def properties_string(self, props: dict[str, str]) -> str:
        """The properties header value a Java client sends for ``props``: the entries in Java
        ``HashMap`` order, ``name 0x01 value`` joined by 0x02 (``encode_properties`` of
        ``ordered(props)``, as text, built in one join: the per-message send path)."""
        return "\x02".join([k + "\x01" + props[k] for k in self.keys(props)])


def java_hashmap_order(props: dict[str, str]) -> dict[str, str]:
    """``props`` re-ordered as a Java ``HashMap<String,String>`` filled in this order iterates
    (``JavaMapOrder().ordered``; a producer keeps one to remember the orders)."""
    return JavaMapOrder().ordered(props)


def java_properties_string(props: dict[str, str]) -> str:
    """``JavaMapOrder().properties_string(props)``."""
    return JavaMapOrder().properties_string(props)


def _int_hash(value: int) -> int:
    return value


@attrs.frozen
class SubscriptionData:
    topic: str
    sub_string: str
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = EXPRESSION_TAG
    class_filter_mode: bool = False

    @property
    def is_all(self) -> bool:
        return self.sub_string == SUB_ALL

    def matches(self, tags: str | None) -> bool:
        """Client-side re-filter of pulled messages (the broker filters by tag hash only)."""
        if self.is_all or self.expression_type != EXPRESSION_TAG:
            return True
        return tags is not None and tags in self.tags_set

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }


def build_subscription(
    topic: str, expression: str | None, sub_version: int, expression_type: str = EXPRESSION_TAG
) -> SubscriptionData:
    """``"*"``/empty -> all; else ``"TagA || TagB"`` split on ``||``, trimmed, empties dropped.
    ``expression_type="SQL92"``: ``expression`` is a SQL92 selector the broker evaluates on
    message properties (it must run with enablePropertyFilter=true)."""
    etype = (expression_type or EXPRESSION_TAG).upper()
    if etype == EXPRESSION_SQL92:
        text = (expression or "").strip()
        if not text:
            raise ValueError("a SQL92 subscription needs an expression")
        return SubscriptionData(topic, text, sub_version=sub_version, expression_type=etype)
    if etype != EXPRESSION_TAG:
        raise ValueError(f"unknown expression type {expression_type!r} (TAG or SQL92)")
    text = (expression or "").strip()
    if not text or text == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, sub_version=sub_version)
    tags = [t.strip() for t in text.split("||") if t.strip()]
    if not tags:
        return SubscriptionData(topic, SUB_ALL, sub_version=sub_version)
    tags_set = java_hashset_order(tags, java_string_hash)
    codes = java_hashset_order([java_string_hash(t) for t in tags], _int_hash)
    return SubscriptionData(topic, text, tuple(tags_set), tuple(codes), sub_version)


@attrs.frozen
class ConsumerData:
    group_name: str
    consume_type: str  # CONSUME_ACTIVELY / CONSUME_PASSIVELY
    message_model: str  # CLUSTERING / BROADCASTING
    consume_from_where: str
    subscriptions: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group_name,
            "messageModel": self.message_model,
            "subscriptionDataSet": [s.to_json_obj() for s in self.subscriptions],
            "unitMode": self.unit_mode,
        }


def heartbeat_body(
    client_id: str, producer_groups: Sequence[str], consumers: Sequence[ConsumerData]
) -> bytes:
    """HeartbeatData JSON: compact, keys sorted (fastjson's output)."""
    data = {
        "clientID": client_id,
        "consumerDataSet": [c.to_json_obj() for c in consumers],
        "producerDataSet": [{"groupName": g} for g in producer_groups],
    }
    return fastjson.dumps(data)
