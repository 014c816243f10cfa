"""Broker counters for GET_BROKER_RUNTIME_INFO and the metrics endpoint (put/get totals, TPS)."""

from __future__ import annotations

import time
from typing import Final

#: Window of the put/get TPS figures in GET_BROKER_RUNTIME_INFO.
TPS_WINDOW_S: Final = 10.0


class BrokerStats:
    """Counters for GET_BROKER_RUNTIME_INFO (msgPutTotalTodayNow, putTps, ...)."""

    def __init__(self) -> None:
        self.put_total = 0
        self.get_total = 0
        self._mark = time.monotonic()
        self._put_mark = 0
        self._get_mark = 0
        self._put_tps = 0.0
        self._get_tps = 0.0

    def put(self, topic: str, count: int, size: int) -> None:
        self.put_total += count

    def get(self, topic: str, count: int) -> None:
        self.get_total += count

    def _roll(self) -> None:
        now = time.monotonic()
        elapsed = now - self._mark
        if elapsed >= TPS_WINDOW_S:
            self._put_tps = (self.put_total - self._put_mark) / elapsed
            self._get_tps = (self.get_total - self._get_mark) / elapsed
            self._mark, self._put_mark, self._get_mark = now, self.put_total, self.get_total

    def put_tps(self) -> float:
        self._roll()
        return self._put_tps

    def get_tps(self) -> float:
        self._roll()
        return self._get_tps
