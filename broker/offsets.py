"""Consumer offsets, subscription groups and delay offsets (pure; no I/O, no trio).

* ``ConsumerOffsetManager``: ``consumerOffset.json`` = ``{"offsetTable":{"topic@group":{0:12}}}``
  (fastjson: integer queue ids as unquoted keys).
* ``SubscriptionGroupManager``: ``subscriptionGroup.json`` =
  ``{"dataVersion":..,"subscriptionGroupTable":{"G":SubscriptionGroupConfig}}``.
* ``DelayOffsetTable``: ``delayOffset.json`` = ``{"offsetTable":{1:0,2:5}}`` (delay level -> next
  offset in SCHEDULE_TOPIC_XXXX queue level-1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

from ..cluster.clock import now_ms
from ..cluster.protocol import fastjson
from ..cluster.protocol.route import DataVersion

TOPIC_GROUP_SEPARATOR: Final = "@"
DEFAULT_RETRY_MAX_TIMES: Final = 16
#: Groups RocketMQ's SubscriptionGroupManager creates at start.
SYSTEM_GROUPS: Final = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
)


def _load_obj(data: bytes) -> dict[str, Any]:
    if not data.strip():
        return {}
    obj = fastjson.loads(data)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


class ConsumerOffsetManager:
    def __init__(self) -> None:
        self.table: dict[str, dict[int, int]] = {}
        self.changed = False

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = self.key(topic, group)
        queues = self.table.get(key)
        if queues is None:
            queues = self.table[key] = {}
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.changed = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1."""
        queues = self.table.get(self.key(topic, group))
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def groups_of_topic(self, topic: str) -> set[str]:
        out = set()
        for key in self.table:
            t, _sep, g = key.partition(TOPIC_GROUP_SEPARATOR)
            if t == topic:
                out.add(g)
        return out

    def topics_of_group(self, group: str) -> set[str]:
        out = set()
        for key in self.table:
            t, _sep, g = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if g == group:
                out.add(t)
        return out

    def encode(self) -> bytes:
        return fastjson.dumps({"offsetTable": self.table})

    def load(self, data: bytes) -> None:
        obj = _load_obj(data)
        table = obj.get("offsetTable") or {}
        self.table = {
            str(k): {int(q): int(o) for q, o in (v or {}).items()} for k, v in table.items()
        }


@attrs.frozen
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    #: RocketMQ 5: the group consumes in order (5.x proxies pop for it orderly)
    consume_message_orderly: bool = False

    def to_json_obj(self) -> dict[str, Any]:
        orderly = {"consumeMessageOrderly": True} if self.consume_message_orderly else {}
        return {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
            **orderly,  # only when set: a 4.9 broker's answer has no such key
        }

    @classmethod
    def from_json_obj(cls, obj: Any, name: str | None = None) -> SubscriptionGroupConfig:
        if not isinstance(obj, dict):
            raise ValueError("SubscriptionGroupConfig must be an object")

        def b(key: str, default: bool) -> bool:
            v = obj.get(key, default)
            return v if isinstance(v, bool) else str(v).lower() == "true"

        group = obj.get("groupName", name)
        if not isinstance(group, str) or not group:
            raise ValueError("SubscriptionGroupConfig.groupName is required")
        return cls(
            group_name=group,
            consume_enable=b("consumeEnable", True),
            consume_from_min_enable=b("consumeFromMinEnable", True),
            consume_broadcast_enable=b("consumeBroadcastEnable", True),
            retry_queue_nums=int(obj.get("retryQueueNums", 1)),
            retry_max_times=int(obj.get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES)),
            broker_id=int(obj.get("brokerId", 0)),
            which_broker_when_consume_slowly=int(obj.get("whichBrokerWhenConsumeSlowly", 1)),
            notify_consumer_ids_changed_enable=b("notifyConsumerIdsChangedEnable", True),
            consume_message_orderly=b("consumeMessageOrderly", False),
        )


class SubscriptionGroupManager:
    def __init__(self, *, auto_create: bool, clock_ms: Callable[[], int] = now_ms) -> None:
        self.auto_create = auto_create
        self.clock_ms = clock_ms
        self.table: dict[str, SubscriptionGroupConfig] = {
            g: SubscriptionGroupConfig(g) for g in SYSTEM_GROUPS
        }
        self.data_version = DataVersion(timestamp=clock_ms(), counter=0)
        self.changed = False

    def _bump(self) -> None:
        self.data_version = self.data_version.next_version(self.clock_ms())
        self.changed = True

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults when autoCreateSubscriptionGroup."""
        sgc = self.table.get(group)
        if sgc is None and self.auto_create:
            sgc = self.table[group] = SubscriptionGroupConfig(group)
            self._bump()
        return sgc

    def update(self, sgc: SubscriptionGroupConfig) -> None:
        self.table[sgc.group_name] = sgc
        self._bump()

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self._bump()
        return True

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json_obj(),
            "subscriptionGroupTable": {k: v.to_json_obj() for k, v in self.table.items()},
        }

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_json_obj())

    def load(self, data: bytes) -> None:
        obj = _load_obj(data)
        for name, raw in (obj.get("subscriptionGroupTable") or {}).items():
            self.table[str(name)] = SubscriptionGroupConfig.from_json_obj(raw, str(name))
        if "dataVersion" in obj:
            self.data_version = DataVersion.from_json_obj(obj["dataVersion"])


class DelayOffsetTable:
    def __init__(self) -> None:
        self.table: dict[int, int] = {}
        self.changed = False

    def get(self, level: int) -> int:
        return self.table.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        if self.table.get(level) != offset:
            self.table[level] = offset
            self.changed = True

    def encode(self) -> bytes:
        return fastjson.dumps({"offsetTable": self.table})

    def load(self, data: bytes) -> None:
        obj = _load_obj(data)
        self.table = {int(k): int(v) for k, v in (obj.get("offsetTable") or {}).items()}
