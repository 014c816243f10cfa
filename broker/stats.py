"""Broker counters for GET_BROKER_RUNTIME_INFO and the metrics endpoint (put/get totals, TPS).

The totals are counted where messages are put and pulled; the per-second figures are rates of
those totals over stated windows (``cluster.metrics.WindowRates``), fed by ``sample`` from the
broker's sampler task every ``RATE_SAMPLE_PERIOD_S``. Pure: the caller passes the time.
"""

from __future__ import annotations

import datetime
from typing import Final

from ..cluster.metrics import WindowRates

#: The window of every ``*_tps`` / ``*_qps`` figure on /metrics and of the first putTps /
#: getTransferedTps figure of GET_BROKER_RUNTIME_INFO: the last 10 s (RocketMQ's
#: StoreStatsService's first window).
TPS_WINDOW_S: Final = 10.0
#: How often the broker samples its totals (the sampler task in ``node.py``).
RATE_SAMPLE_PERIOD_S: Final = 1.0
#: GET_BROKER_RUNTIME_INFO's putTps / getTransferedTps: three figures, over the last 10 s,
#: 1 min and 10 min, as RocketMQ's StoreStatsService answers; (window, sample period).
RUNTIME_TPS_WINDOWS: Final = ((TPS_WINDOW_S, RATE_SAMPLE_PERIOD_S), (60.0, RATE_SAMPLE_PERIOD_S),
                              (600.0, 10.0))
_PUT: Final = "put"
_GET: Final = "get"


class BrokerStats:
    """Counters for GET_BROKER_RUNTIME_INFO (msgPutTotalTodayNow, putTps, ...)."""

    def __init__(self) -> None:
        self.put_total = 0
        self.get_total = 0
        self._windows = [WindowRates(w, p) for w, p in RUNTIME_TPS_WINDOWS]
        #: (put, get) totals at the last two local midnights (msg*TotalTodayMorning,
        #: msg*TotalYesterdayMorning): 0 until the broker lived through one, as RocketMQ's
        self.today_morning = (0, 0)
        self.yesterday_morning = (0, 0)
        self._day: int | None = None  # the local day ``roll_day`` saw last

    def roll_day(self, wall_ms: int) -> None:
        """Note the local day of ``wall_ms``; the first call after a midnight takes the totals
        as this morning's (and this morning's as yesterday's). The sampler calls it."""
        day = local_day(wall_ms)
        if self._day is None:
            self._day = day
        if day <= self._day:
            return
        totals = (self.put_total, self.get_total)
        # more than one midnight since the last call: yesterday morning's totals were these too
        self.yesterday_morning = self.today_morning if day - self._day == 1 else totals
        self.today_morning = totals
        self._day = day

    def put(self, topic: str, count: int, size: int) -> None:
        self.put_total += count

    def get(self, topic: str, count: int) -> None:
        self.get_total += count

    def sample(self, now: float) -> None:
        """Record the totals as of ``now`` (monotonic seconds); the sampler calls it every
        ``RATE_SAMPLE_PERIOD_S``."""
        for window in self._windows:
            window.observe(_PUT, self.put_total, now)
            window.observe(_GET, self.get_total, now)

    def put_tps(self, window: int = 0) -> float:
        """Messages put per second over ``RUNTIME_TPS_WINDOWS[window]`` (default: 10 s)."""
        return self._windows[window].rate(_PUT)

    def get_tps(self, window: int = 0) -> float:
        """Messages pulled per second over ``RUNTIME_TPS_WINDOWS[window]`` (default: 10 s)."""
        return self._windows[window].rate(_GET)

    def put_tps_figures(self) -> str:
        """putTps as RocketMQ answers it: the 10 s, 1 min and 10 min rates."""
        return " ".join(f"{self.put_tps(i):.2f}" for i in range(len(self._windows)))

    def get_tps_figures(self) -> str:
        """getTransferedTps as RocketMQ answers it: the 10 s, 1 min and 10 min rates."""
        return " ".join(f"{self.get_tps(i):.2f}" for i in range(len(self._windows)))


def local_day(wall_ms: int) -> int:
    """The local calendar day of ``wall_ms`` (RocketMQ's day figures turn at local midnight)."""
    return datetime.datetime.fromtimestamp(wall_ms / 1000).date().toordinal()
