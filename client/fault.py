"""Send latency fault tolerance (Java ``MQFaultStrategy`` + ``LatencyFaultToleranceImpl``). Pure:
the caller passes the current time in ms."""

from __future__ import annotations

from typing import Final

import attrs

#: Java latencyMax / notAvailableDuration (ms): a send that took >= latency_max[i] makes its
#: broker unavailable for not_available_ms[i].
LATENCY_MAX_MS: Final = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS: Final = (0, 0, 30000, 60000, 120000, 180000, 600000)
#: Java: an isolated failure counts as a 30 s send.
ISOLATION_LATENCY_MS: Final = 30000


@attrs.define
class FaultItem:
    name: str
    current_latency_ms: int
    start_ms: int  # available again from this time


#: Latencies below this never make a broker unavailable (the first non-zero penalty's bound).
FIRST_PENALIZED_LATENCY_MS: Final = next(
    lat for lat, dur in zip(LATENCY_MAX_MS, NOT_AVAILABLE_MS, strict=True) if dur
)


class LatencyFaultTolerance:
    def __init__(self) -> None:
        self.items: dict[str, FaultItem] = {}

    @staticmethod
    def not_available_duration(latency_ms: int) -> int:
        for i in range(len(LATENCY_MAX_MS) - 1, -1, -1):
            if latency_ms >= LATENCY_MAX_MS[i]:
                return NOT_AVAILABLE_MS[i]
        return 0

    def update(self, broker_name: str, latency_ms: int, isolation: bool, now_ms: int) -> None:
        latency = ISOLATION_LATENCY_MS if isolation else latency_ms
        duration = self.not_available_duration(latency)
        self.items[broker_name] = FaultItem(broker_name, latency, now_ms + duration)

    def forget(self, broker_name: str) -> None:
        """``broker_name`` has a new master: what its old one did says nothing about it."""
        self.items.pop(broker_name, None)

    def is_available(self, broker_name: str, now_ms: int) -> bool:
        item = self.items.get(broker_name)
        return item is None or now_ms >= item.start_ms

    def pick_one_at_least(self, now_ms: int) -> str | None:
        """The least bad broker (lowest latency, then earliest available)."""
        if not self.items:
            return None
        best = min(self.items.values(), key=lambda i: (i.current_latency_ms, i.start_ms))
        return best.name
