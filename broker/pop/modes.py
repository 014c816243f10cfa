"""Which groups consume which topic by POP (RocketMQ 5 ``MessageRequestModeManager``), kept in
``config/messageRequestMode.json`` in Apache's layout, and the queue allocation
QUERY_ASSIGNMENT answers with. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ...cluster.protocol import fastjson
from ...cluster.protocol.pop import PopFormatError, RequestMode, RequestModeSetting

MODE_FILE: Final = "messageRequestMode.json"
#: Entries the table holds at most (one per topic and group set by an admin).
MAX_MODE_ENTRIES: Final = 100_000

Queue = tuple[str, str, int]  # (topic, brokerName, queueId)


class RequestModeTable:
    def __init__(self) -> None:
        self._table: dict[str, dict[str, RequestModeSetting]] = {}
        self._count = 0
        self.changed = False

    def get(self, topic: str, group: str) -> RequestModeSetting | None:
        return self._table.get(topic, {}).get(group)

    def set(self, setting: RequestModeSetting) -> bool:
        """Record ``setting``; False when the table is full."""
        groups = self._table.setdefault(setting.topic, {})
        if setting.consumer_group not in groups:
            if self._count >= MAX_MODE_ENTRIES:
                return False
            self._count += 1
        groups[setting.consumer_group] = setting
        self.changed = True
        return True

    def encode(self) -> bytes:
        return fastjson.dumps({"messageRequestModeMap": {
            topic: {g: s.to_json_obj() for g, s in groups.items()}
            for topic, groups in self._table.items()
        }})

    def load(self, data: bytes) -> None:
        if not data.strip():
            return
        try:
            obj = fastjson.loads(data)
        except ValueError as exc:
            raise PopFormatError(f"{MODE_FILE}: {exc}") from None
        table = obj.get("messageRequestModeMap") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            return
        for groups in table.values():
            if isinstance(groups, dict):
                for entry in groups.values():
                    self.set(RequestModeSetting.from_json_obj(entry))
        self.changed = False


def allocate_averagely(queues: Sequence[Queue], cids: Sequence[str], cid: str) -> list[Queue]:
    """RocketMQ's AllocateMessageQueueAveragely: a contiguous share per client."""
    if cid not in cids or not queues:
        return []
    index = cids.index(cid)
    n, c = len(queues), len(cids)
    mod = n % c
    if n <= c:
        size = 1
    elif mod > 0 and index < mod:
        size = n // c + 1
    else:
        size = n // c
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [queues[(start + i) % n] for i in range(min(size, n - start))] if start < n else []


def allocate_for_pop(queues: Sequence[Queue], cids: Sequence[str], cid: str,
                     share: int) -> list[Queue]:
    """QUERY_ASSIGNMENT in POP mode: every client pops every queue (queueId -1 per broker)
    unless ``share`` > 0 says how many neighbours' queues each client also pops."""
    if share <= 0 or share >= len(cids) - 1:
        brokers = sorted({(t, b) for t, b, _q in queues})
        return [(t, b, -1) for t, b in brokers]
    if len(cids) > len(queues):
        if cid not in cids or not queues:
            return []
        return [queues[cids.index(cid) % len(queues)]]
    out = allocate_averagely(queues, cids, cid)
    index = cids.index(cid) if cid in cids else -1
    if index >= 0:
        for i in range(1, share + 1):
            out += allocate_averagely(queues, cids, cids[(index + i) % len(cids)])
    return out


def mode_of(table: RequestModeTable, topic: str, group: str) -> RequestModeSetting:
    """The mode set for (topic, group), else PULL (Apache's defaultMessageRequestMode)."""
    found = table.get(topic, group)
    if found is not None:
        return found
    return RequestModeSetting(topic, group, RequestMode.PULL, 0)
