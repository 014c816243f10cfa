"""Broker counters for GET_BROKER_RUNTIME_INFO and the metrics endpoint (put/get totals, TPS).

The totals are counted where messages are put and pulled; the per-second figures are rates of
those totals over stated windows (``cluster.metrics.WindowRates``), fed by ``sample`` from the
broker's sampler task every ``RATE_SAMPLE_PERIOD_S``. Pure: the caller passes the time.
"""

from __future__ import annotations

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
