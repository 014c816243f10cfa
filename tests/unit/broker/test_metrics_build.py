"""A /metrics build in steps (issue 31, item 8): between two safe points it reads at most
``BUILD_STEP_QUEUES`` queues, and run on the event loop it lets other tasks run every slice."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import trio

from rmq_cluster.broker.metrics import BUILD_STEP_QUEUES, BrokerMetrics
from rmq_cluster.broker.stats import BrokerStats
from rmq_cluster.cluster.metrics import parse_exposition, run_to_end, sample_value
from rmq_cluster.cluster.metrics_server import BUILD_SLICE_S, run_steps
from rmq_cluster.cluster.protocol.route import TopicConfig

TOPICS, QUEUES = 50, 1024


class CountingQueue:
    """A ConsumeQueue stand-in that counts how often its max offset is read."""

    reads = 0

    def __init__(self, max_offset: int) -> None:
        self._max = max_offset

    @property
    def max_offset_in_queue(self) -> int:
        CountingQueue.reads += 1
        return self._max


def _metrics() -> BrokerMetrics:
    queues = {(f"T{t}", q): CountingQueue(3) for t in range(TOPICS) for q in range(QUEUES)}
    store = SimpleNamespace(
        cqs=SimpleNamespace(queues=queues),
        get_max_offset_in_queue=lambda topic, q: queues[(topic, q)].max_offset_in_queue,
        max_phys_offset=0, min_phys_offset=0, dispatch_behind_bytes=0,
    )
    ctrl = SimpleNamespace(
        bcfg=SimpleNamespace(broker_cluster_name="C", broker_name="b"), broker_addr="h:1",
        store_or_none=store, stats=BrokerStats(), hold=SimpleNamespace(parked=0), server=None,
        acl=None, ha=None, clients=SimpleNamespace(consumers={}),
        topics=SimpleNamespace(table={f"T{t}": TopicConfig(f"T{t}", QUEUES, QUEUES)
                                      for t in range(TOPICS)}),
        offsets=SimpleNamespace(table={"T1@G": {q: 1 for q in range(QUEUES)}}),
    )
    return BrokerMetrics(ctrl)


def test_a_build_reads_few_queues_between_two_safe_points() -> None:
    metrics = _metrics()
    steps = metrics.build()
    most = 0
    while True:
        CountingQueue.reads = 0
        try:
            next(steps)
        except StopIteration as stop:
            text = str(stop.value)
            break
        most = max(most, CountingQueue.reads)
    assert most <= BUILD_STEP_QUEUES
    fams = parse_exposition(text)
    assert sample_value(fams, "rocketmq_producer_offset", topic="T5") == 3 * QUEUES
    assert sample_value(fams, "rocketmq_group_diff", topic="T1", group="G") == 2 * QUEUES
    assert metrics.builds == 1
    assert run_to_end(metrics.build()).count("rocketmq_producer_offset{") == TOPICS


async def test_a_build_run_on_the_loop_lets_other_tasks_run() -> None:
    metrics = _metrics()
    ticks: list[float] = []
    done = trio.Event()

    async def ticker() -> None:
        while not done.is_set():
            ticks.append(trio.current_time())
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        started = trio.current_time()
        await run_steps(metrics.build())
        took = trio.current_time() - started
        done.set()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(ticks) >= took / (BUILD_SLICE_S * 10)  # it ran all along the build
    assert max(gaps) < 0.25  # never held for a whole build (a busy machine may preempt us)


def test_rates_come_from_samples_not_from_builds() -> None:
    """A topic's and a group's rates are measured between the broker's samples over the stated
    window; building an exposition (a scrape) moves nothing."""
    metrics = _metrics()
    queues = metrics.ctrl.store_or_none.cqs.queues
    offsets = metrics.ctrl.offsets.table["T1@G"]
    for t in range(12):  # T5 grows 40/s on one queue, G commits 20/s on T1
        queues[("T5", 0)]._max = 3 + 40 * t
        offsets[0] = 1 + 20 * t
        run_to_end(metrics.sample(float(t)))
        for _ in range(3):
            run_to_end(metrics.build())
    fams = parse_exposition(metrics.render())
    assert sample_value(fams, "rocketmq_producer_tps", topic="T5") == 40.0
    assert sample_value(fams, "rocketmq_producer_tps", topic="T6") == 0.0
    assert sample_value(fams, "rocketmq_consumer_tps", topic="T1", group="G") == 20.0
    assert "over the last 10 s" in metrics.render()


def test_day_figures_roll_at_each_local_midnight() -> None:
    """BrokerStats.roll_day: this morning's totals become yesterday's at the next midnight;
    a gap over two midnights leaves both at the totals (nothing was counted in between)."""
    import datetime

    from rmq_cluster.broker.stats import BrokerStats

    def ms(day: int, hour: int) -> int:
        return int(datetime.datetime(2026, 1, day, hour).timestamp() * 1000)

    s = BrokerStats()
    s.put_total, s.get_total = 5, 1
    s.roll_day(ms(1, 10))  # boot day: nothing has turned yet
    assert s.today_morning == s.yesterday_morning == (0, 0)
    s.roll_day(ms(1, 23))
    assert s.today_morning == (0, 0)
    s.put_total = 7
    s.roll_day(ms(2, 0))
    assert (s.today_morning, s.yesterday_morning) == ((7, 1), (0, 0))
    s.put_total = 9
    s.roll_day(ms(3, 1))
    assert (s.today_morning, s.yesterday_morning) == ((9, 1), (7, 1))
    s.put_total = 12
    s.roll_day(ms(6, 1))
    assert s.today_morning == s.yesterday_morning == (12, 1)
