"""The broker's metric families (rocketmq-exporter names where they exist, ``rmq_*`` ours).

Everything is read when an exposition is built, from state the broker keeps anyway, except two
instruments the broker feeds only while metrics are on: the send latency histogram (a wrapper
around the send processor, installed by the controller only when ``metricsPort`` >= 0) and the
ACL denial counter. Pure: no I/O, no trio.

What a build costs: the per-topic and per-group figures sum queues' max offsets (200 topics
of 1024 queues: 204 800 queues; the ConsumeQueues that exist are walked, so empty ones cost
nothing). ``BrokerMetrics.build`` reads them once per build into a snapshot, yielding every
``BUILD_STEP_QUEUES`` queues, then renders from the snapshot (also in steps); the listener
(``cluster.metrics_server``) runs it a short time slice at a time on the event loop, serves
the text to every scrape for ``metricsCacheSeconds`` and lets concurrent scrapes share one
build. State is only read, on the loop that mutates it, between two steps:
a figure is as of the moment its queue was read.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..cluster.metrics import Histogram, Registry, Steps, WindowRates, run_to_end
from ..cluster.remoting.codec import RemotingCommand
from .offsets import TOPIC_GROUP_SEPARATOR
from .stats import RATE_SAMPLE_PERIOD_S, TPS_WINDOW_S

if TYPE_CHECKING:
    from .context import BrokerContext

Rows = Iterable[tuple[Mapping[str, object] | None, float]]

PUT_LATENCY_METRIC = "rmq_broker_send_latency_seconds"
#: Said in the HELP of every rate: its window.
_OVER_WINDOW: Final = f", over the last {TPS_WINDOW_S:g} s"
#: Queue offsets read between two safe points of a build.
BUILD_STEP_QUEUES: Final = 64

GroupOffsets = dict[tuple[str, str], tuple[int, int]]


class BrokerMetrics:
    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl
        self.registry = Registry()
        #: per-topic and per-group rates over TPS_WINDOW_S, fed by ``sample`` (never by a build)
        self._rates = WindowRates(TPS_WINDOW_S, RATE_SAMPLE_PERIOD_S)
        #: what the last build read: topic -> sum of its queues' max offsets, and
        #: (topic, group) -> (committed total, max total)
        self._topic_totals: dict[str, int] = {}
        self._group_offsets: GroupOffsets = {}
        #: builds done, and the wall time the last one took (its yields included)
        self.builds = 0
        self.last_build_s = 0.0
        reg = self.registry
        self.send_latency: Histogram = reg.histogram(
            PUT_LATENCY_METRIC, "Send request handling time (header to stored), seconds"
        )
        gauge, counter = "gauge", "counter"
        reg.collect("rocketmq_broker_tps", gauge, f"Messages put per second{_OVER_WINDOW}",
                    self._broker_tps)
        reg.collect("rocketmq_broker_qps", gauge, f"Messages got per second{_OVER_WINDOW}",
                    self._broker_qps)
        reg.collect("rocketmq_brokeruntime_commitlog_maxoffset", gauge,
                    "brokerRuntimeCommitLogMaxOffset", self._max_offset)
        reg.collect("rocketmq_brokeruntime_commitlog_minoffset", gauge,
                    "brokerRuntimeCommitLogMinOffset", self._min_offset)
        reg.collect("rocketmq_brokeruntime_dispatch_behind_bytes", gauge,
                    "brokerRuntimeDispatchBehindBytes", self._dispatch_behind)
        reg.collect("rocketmq_producer_offset", gauge,
                    "Sum of the max offsets of a topic's queues", self._producer_offset)
        reg.collect("rocketmq_producer_tps", gauge,
                    f"Messages put per second per topic{_OVER_WINDOW}", self._producer_tps)
        reg.collect("rocketmq_consumer_offset", gauge,
                    "Sum of a group's committed offsets on a topic", self._consumer_offset)
        reg.collect("rocketmq_consumer_tps", gauge,
                    f"Committed-offset advance per second per topic and group{_OVER_WINDOW}",
                    self._consumer_tps)
        reg.collect("rocketmq_group_diff", gauge, "Messages a group has not consumed yet",
                    self._group_diff)
        reg.collect("rocketmq_broker_commitlog_diff", gauge,
                    "CommitLog bytes a slave is behind its master", self._commitlog_diff)
        reg.collect("rmq_broker_put_messages", counter, "Messages stored since start",
                    lambda: [(self._base(), ctrl.stats.put_total)])
        reg.collect("rmq_broker_get_messages", counter, "Messages returned by pulls since start",
                    lambda: [(self._base(), ctrl.stats.get_total)])
        reg.collect("rmq_broker_long_poll_holds", gauge, "Pull requests parked (long polling)",
                    lambda: [(self._base(), ctrl.hold.parked)])
        reg.collect("rmq_broker_replication_lag_bytes", gauge,
                    "Master max offset minus the offset pushed to slaves", self._replication_lag)
        reg.collect("rmq_broker_connections", gauge, "Open remoting connections",
                    lambda: [(self._base(), len(ctrl.server.connections) if ctrl.server else 0)])
        reg.collect("rmq_acl_denials", counter, "Requests refused by the ACL",
                    lambda: [(self._base(), ctrl.acl.denials if ctrl.acl else 0)])
        reg.collect("rmq_dledger_term", gauge, "DLedger term", self._dledger("dLegerTerm"))
        reg.collect("rmq_dledger_commit_index", gauge, "DLedger committed index",
                    self._dledger("dLegerCommitIndex"))
        reg.collect("rmq_broker_metrics_builds", counter, "Expositions built for /metrics",
                    lambda: [(self._base(), self.builds)])
        reg.collect("rmq_broker_metrics_build_seconds", gauge,
                    "Wall time the previous /metrics build took, yields included",
                    lambda: [(self._base(), self.last_build_s)])

    def build(self) -> Steps:
        """The exposition text, in steps (see the module's doc)."""
        started = time.perf_counter()
        self._topic_totals = yield from self._read_topic_totals()
        self._group_offsets = yield from self._read_group_offsets()
        text = yield from self.registry.render_steps()
        self.builds += 1
        self.last_build_s = time.perf_counter() - started
        return text

    def render(self) -> str:
        """The whole build at once (tests, tools)."""
        return run_to_end(self.build())

    def sample(self, now: float) -> Steps:
        """Record every topic's and group's total as of ``now`` (monotonic seconds) for the
        rates, in steps like a build (the broker's sampler runs it every
        ``RATE_SAMPLE_PERIOD_S``, or less often when it is costly); returns ""."""
        topics = yield from self._read_topic_totals()
        groups = yield from self._read_group_offsets()
        observe = self._rates.observe
        for topic, total in topics.items():
            observe(("p", topic), total, now)
        for key, (committed, _max) in groups.items():
            observe(("c", *key), committed, now)
        self._rates.forget(now)
        return ""

    # ------------------------------------------------------------------ helpers

    def _base(self) -> dict[str, object]:
        b = self.ctrl.bcfg
        return {"cluster": b.broker_cluster_name, "broker": b.broker_name,
                "brokerIP": self.ctrl.broker_addr}

    def _store(self) -> Any:
        return self.ctrl.store_or_none  # None until the store is open

    def _broker_tps(self) -> Rows:
        return [(self._base(), self.ctrl.stats.put_tps())]

    def _broker_qps(self) -> Rows:
        return [(self._base(), self.ctrl.stats.get_tps())]

    def _max_offset(self) -> Rows:
        store = self._store()
        return [] if store is None else [(self._base(), store.max_phys_offset)]

    def _min_offset(self) -> Rows:
        store = self._store()
        return [] if store is None else [(self._base(), store.min_phys_offset)]

    def _dispatch_behind(self) -> Rows:
        store = self._store()
        return [] if store is None else [(self._base(), store.dispatch_behind_bytes)]

    def _read_topic_totals(self) -> Generator[None, None, dict[str, int]]:
        """topic -> sum of the max offsets of its queues (those its config has), walking the
        ConsumeQueues that exist: a topic's empty queues cost nothing."""
        store = self._store()
        out: dict[str, int] = {}
        if store is None:
            return out
        topics = self.ctrl.topics.table
        queues = store.cqs.queues
        budget = BUILD_STEP_QUEUES
        for key in list(queues):  # (the keys as they are: no tuple made per queue)
            topic, q = key
            tc = topics.get(topic)
            cq = queues.get(key)
            if cq is not None and tc is not None and q < max(
                tc.read_queue_nums, tc.write_queue_nums
            ):
                value = cq.max_offset_in_queue
                if value > 0:
                    out[topic] = out.get(topic, 0) + value
            budget -= 1
            if not budget:
                yield
                budget = BUILD_STEP_QUEUES
        return out

    def _read_group_offsets(self) -> Generator[None, None, GroupOffsets]:
        """(topic, group) -> (committed total, max total) over the queues with a commit."""
        store = self._store()
        out: GroupOffsets = {}
        if store is None:
            return out
        budget = BUILD_STEP_QUEUES
        for key, queues in list(self.ctrl.offsets.table.items()):
            topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
            if not sep:
                continue
            committed = maximum = 0
            for q, o in list(queues.items()):
                committed += max(0, o)
                maximum += max(0, store.get_max_offset_in_queue(topic, q))
                budget -= 1
                if not budget:
                    yield
                    budget = BUILD_STEP_QUEUES
            out[(topic, group)] = (committed, maximum)
        return out

    def _producer_offset(self) -> Rows:
        b = self._base()
        return [({**b, "topic": t}, v) for t, v in self._topic_totals.items()]

    def _producer_tps(self) -> Rows:
        b = self._base()
        return [({**b, "topic": t}, self._rates.rate(("p", t))) for t in self._topic_totals]

    def _consumer_offset(self) -> Rows:
        b = self._base()
        return [({**b, "topic": t, "group": g}, c)
                for (t, g), (c, _m) in self._group_offsets.items()]

    def _consumer_tps(self) -> Rows:
        b = self._base()
        return [({**b, "topic": t, "group": g}, self._rates.rate(("c", t, g)))
                for t, g in self._group_offsets]

    def _group_diff(self) -> Rows:
        rows = []
        consumers = self.ctrl.clients.consumers
        for (t, g), (c, m) in self._group_offsets.items():
            info = consumers.get(g)
            rows.append((
                {"group": g, "topic": t,
                 "countOfOnlineConsumers": len(info.channels) if info else 0,
                 "msgModel": info.message_model if info else "CLUSTERING"},
                max(0, m - c),
            ))
        return rows

    def _commitlog_diff(self) -> Rows:
        ha = self.ctrl.ha
        if ha is None:
            return []
        b = self._base()
        return [({**b, "slave": s.address}, s.diff_bytes) for s in ha.status().slaves]

    def _replication_lag(self) -> Rows:
        ha = self.ctrl.ha
        if ha is None or self._store() is None or not ha.status().slaves:
            return []  # no slave: nothing to lag
        return [(self._base(), ha.slave_fall_behind_bytes)]

    def _dledger(self, key: str) -> Any:
        """A DLedger figure from the DLedger store's runtime info (``dLegerTerm``,
        ``dLegerCommitIndex``); nothing for a broker without DLedger."""

        def rows() -> Rows:
            info_fn = getattr(self._store(), "runtime_info", None)
            if info_fn is None:
                return []
            value = info_fn().get(key)
            if value is None or not value.lstrip("-").isdigit():
                return []
            return [(self._base(), int(value))]

        return rows


def timed(processor: Any, histogram: Histogram) -> Any:
    """``processor`` with its handling time observed in ``histogram`` (plain ``def`` stays
    plain; a reply that is not the answer itself -- a ``Later`` -- is not timed)."""
    observe = histogram.observe
    clock = time.perf_counter
    if inspect.iscoroutinefunction(processor):

        async def timed_async(conn: Any, request: Any) -> Any:
            t0 = clock()
            response = await processor(conn, request)
            observe(clock() - t0)
            return response

        return timed_async

    def timed_sync(conn: Any, request: Any) -> Any:
        t0 = clock()
        response = processor(conn, request)
        if type(response) is RemotingCommand:
            observe(clock() - t0)
        return response

    return timed_sync


# --------------------------------------------------------------- GET_BROKER_RUNTIME_INFO

#: RocketMQ StoreStatsService's put-latency buckets: (label, upper bound in seconds).
JAVA_PUT_DISTRIBUTION: Final = (
    ("[<=0ms]", 0.001), ("[0~10ms]", 0.01), ("[10~50ms]", 0.05), ("[50~100ms]", 0.1),
    ("[100~200ms]", 0.2), ("[200~500ms]", 0.5), ("[500ms~1s]", 1.0), ("[1~2s]", 2.0),
    ("[2~3s]", 3.0), ("[3~4s]", 4.0), ("[4~5s]", 5.0), ("[5~10s]", 10.0),
    ("[10s~]", float("inf")),
)
_BYTE_UNITS: Final = "KMGTPE"


def human_bytes(n: int) -> str:
    """Java ``MixAll.humanReadableByteCount(n, false)``: ``"512 B"``, ``"97.9 GiB"``."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), len(_BYTE_UNITS))
    return f"{n / 1024**exp:.1f} {_BYTE_UNITS[exp - 1]}iB"


def _used_ratio(total: int, free: int) -> float:
    """Java ``UtilAll.getDiskPartitionSpaceUsedPercent``: (total - free) / total, -1 unknown."""
    return (total - free) / total if total > 0 else -1.0


def put_latency_figures(histogram: Histogram | None) -> dict[str, str]:
    """putMessageEntireTimeMax, putLatency99/999 (ms) and putMessageDistributeTime from the
    send latency histogram (kept while metrics are on; zeros without it). A figure is the upper
    bound of its bucket, in ms; our buckets are folded into RocketMQ's."""
    counts = list(histogram.counts) if histogram is not None else []
    bounds = [*histogram.bounds, float("inf")] if histogram is not None else []
    total = sum(counts)
    java = [0] * len(JAVA_PUT_DISTRIBUTION)
    top_s = 0.0
    for upper, n in zip(bounds, counts, strict=True):
        if not n:
            continue
        top_s = upper if upper != float("inf") else bounds[-2] if len(bounds) > 1 else 0.0
        for i, (_label, java_upper) in enumerate(JAVA_PUT_DISTRIBUTION):
            if upper <= java_upper:
                java[i] += n
                break

    def quantile_ms(q: float) -> float:
        if not total:
            return 0.0
        seen = 0
        for upper, n in zip(bounds, counts, strict=True):
            seen += n
            if seen >= q * total:
                return (upper if upper != float("inf") else top_s) * 1000.0
        return top_s * 1000.0

    return {
        "putMessageEntireTimeMax": str(int(top_s * 1000)),
        "putLatency99": f"{quantile_ms(0.99):.2f}",
        "putLatency999": f"{quantile_ms(0.999):.2f}",
        "putMessageDistributeTime": "".join(
            f"{label}:{n} " for (label, _), n in zip(JAVA_PUT_DISTRIBUTION, java, strict=True)
        ),
    }


def _tps(rate: float) -> str:
    return f"{rate:.2f}"


class RuntimeStats:
    """The RocketMQ StoreStatsService / DefaultMessageStore figures of GET_BROKER_RUNTIME_INFO
    that mqadmin (brokerStatus, clusterList) and rocketmq-exporter read, from what the store
    counts (puts, failed puts, found/missed pulls, bytes put since boot) and the disk. TPS
    figures are rates over TPS_WINDOW_S sampled at each look (or since the previous look, when
    looks are further apart; the first look answers 0), RocketMQ's three windows (10 s,
    1 min, 10 min) all given that rate."""

    def __init__(self) -> None:
        self._rates = WindowRates(TPS_WINDOW_S, RATE_SAMPLE_PERIOD_S)

    def table(
        self,
        ctrl: BrokerContext,
        commitlog_disk: tuple[int, int],
        consume_queue_disk: tuple[int, int],
        now_s: float | None = None,
    ) -> dict[str, str]:
        """``*_disk``: (total, free) bytes of the partitions holding the CommitLog and the
        ConsumeQueues (the caller reads them: this module does no I/O)."""
        store = ctrl.store
        now = time.monotonic() if now_s is None else now_s
        found = getattr(store, "get_found_times", 0)
        miss = getattr(store, "get_miss_times", 0)
        rates = self._rates
        rates.observe("found", found, now)
        rates.observe("miss", miss, now)
        found_tps, miss_tps = rates.rate("found"), rates.rate("miss")
        times = ctrl.stats.put_total
        size = max(0, store.max_phys_offset - getattr(store, "boot_max_offset", 0))
        cl_total, cl_free = commitlog_disk
        cq_total, cq_free = consume_queue_disk
        earliest = store.get_earliest_message_time()
        out = {
            "putMessageTimesTotal": str(times),
            "putMessageSizeTotal": str(size),
            "putMessageAverageSize": str(size / times if times else 0.0),
            "putMessageFailedTimes": str(getattr(store, "put_failed_times", 0)),
            "getMessageEntireTimeMax": "0",  # reads are not timed
            "getFoundTps": " ".join([_tps(found_tps)] * 3),
            "getMissTps": " ".join([_tps(miss_tps)] * 3),
            "getTotalTps": " ".join([_tps(found_tps + miss_tps)] * 3),
            "commitLogDiskRatio": str(_used_ratio(cl_total, cl_free)),
            "consumeQueueDiskRatio": str(_used_ratio(cq_total, cq_free)),
            "commitLogDirCapacity": (
                f"Total : {human_bytes(cl_total)}, Free : {human_bytes(cl_free)}."
            ),
            "earliestMessageTimeStamp": str(max(earliest, 0)),
            "remainHowManyDataToFlush": human_bytes(
                max(0, store.max_phys_offset - store.flushed_offset)
            ),
            "startAcceptSendRequestTimeStamp": "0",
        }
        out.update(put_latency_figures(ctrl.send_latency))
        return out
