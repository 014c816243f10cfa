"""bench/vs_figures.py: the probe's, the batch load's, the benchmark Producer's and Consumer's
lines, the consumer case's caught-up line and windows, and the medians vs_java prints."""

from __future__ import annotations

import datetime

import pytest

from bench import vs_figures as vf

PROBE_OUT = """\
14:02:01 INFO some client log line
M 127.0.0.1:20911
P 1000 900 1
P 1010 1100 1
P 1020 50000 1
P 1030 1000000 0
garbage P 1 2 1
M 127.0.0.1:20921
P 1040 2000 0
P 1050 3000 1
P 99999999999999999999 1 1
"""


def test_probe_lines_and_masters() -> None:
    log = vf.parse_probe(PROBE_OUT)
    assert [s.start_ms for s in log.sends] == [1000, 1010, 1020, 1030, 1040, 1050]
    assert [s.ok for s in log.sends] == [True, True, True, False, False, True]
    assert log.masters == ((0, "127.0.0.1:20911"), (4, "127.0.0.1:20921"))


def test_probe_rt_counts_only_ok_sends_inside_the_window() -> None:
    log = vf.parse_probe(PROBE_OUT)
    assert vf.probe_rt(log, 1000, 1030) == {
        "sends": 3, "failed": 0, "avg_rt_ms": round((0.9 + 1.1 + 50) / 3, 3),
        "p99_rt_ms": 50.0, "max_rt_ms": 50.0,
    }
    assert vf.probe_rt(log, 1030, 1050) == {"sends": 2, "failed": 2}


def test_recovery_is_kill_to_the_end_of_the_first_ok_send_after_it() -> None:
    log = vf.parse_probe(PROBE_OUT)
    got = vf.recovery(log, 1025)
    assert got == {
        "recovered": True, "first_send_ok_after_kill_ms": 1050 + 3 - 1025,
        "failed_sends": 2, "master_before": "127.0.0.1:20911",
        "master_after": "127.0.0.1:20921",
    }
    assert vf.recovery(log, 1055) == {
        "recovered": False, "failed_sends": 0, "master_before": "127.0.0.1:20921",
    }


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert vf.percentile(values, 0.99) == 99
    assert vf.percentile(values, 1.0) == 100
    assert vf.percentile([7.0], 0.99) == 7.0


BATCH = "BATCH msgs/s: {} batches/s: {} avg_ms: {} p99_ms: {} max_ms: {} failed: {}"


def test_batch_lines_and_summary_skip_the_warmup() -> None:
    lines = [vf.parse_batch_line(BATCH.format(*v)) for v in (
        (320, 10, "900.000", "2000.000", "2500.000", 3),
        (32000, 1000, "2.000", "9.500", "20.250", 0),
        (64000, 2000, "1.000", "7.000", "30.000", 1),
    )]
    assert vf.parse_batch_line("Send TPS: 1 Max RT(ms): 2") is None
    parsed = [x for x in lines if x is not None]
    assert vf.summarize_batch(parsed, 1) == {
        "lines": 2, "tps": 48000, "batches_per_s": 1500, "avg_rt_ms": 1.5,
        "p99_rt_ms": 9.5, "max_rt_ms": 30.0, "send_failed": 1,
    }
    assert vf.summarize_batch(parsed, 3) == {}


def test_median_ratios_per_kind_skip_errors_and_missing_figures() -> None:
    runs = [
        {"kind": "java", "steady": {"tps": 100}},
        {"kind": "java", "steady": {"tps": 300}},
        {"kind": "java", "steady": {"tps": 200}},
        {"kind": "ours", "steady": {"tps": 150}},
        {"kind": "ours", "error": "did not boot"},
        {"kind": "ours", "steady": {}},
        {"kind": "nats", "steady": {"tps": 400}},
    ]
    getters = {"tps": lambda r: r["steady"]["tps"], "p99": lambda r: r["probe"]["p99"]}
    assert vf.median_ratios(runs, getters) == {
        "tps": {"ours": 150.0, "java": 200.0, "ratio": 0.75},
        "p99": {"ours": None, "java": None, "ratio": None},
    }
    assert vf.median_ratios(runs, getters, base="nats")["tps"]["ratio"] == pytest.approx(0.375)


# --------------------------------------------------------------------------- Producer, Consumer

PRODUCER = "Send TPS: {} Max RT: {} Average RT: {:7.3f} Send Failed: {} Response Failed: {}"
CONSUMER = ("TPS: {} FAIL: {} AVG(B2C) RT: {:7.3f} AVG(S2C) RT: {:7.3f} MAX(B2C) RT: {} "
            "MAX(S2C) RT: {}")


def test_producer_lines_and_summary_skip_the_warmup() -> None:
    lines = [vf.parse_producer_line(PRODUCER.format(*v)) for v in (
        (900, 3000, 30.5, 0, 0), (4000, 3000, 8.0, 1, 0), (5000, 3100, 6.0, 2, 1),
    )]
    assert lines[1] == {"tps": 4000, "max_rt_ms": 3000, "avg_rt_ms": 8.0, "send_failed": 1,
                        "response_failed": 0}
    assert vf.parse_producer_line(CONSUMER.format(1, 0, 1.0, 1.0, 2, 2)) is None
    parsed = [x for x in lines if x is not None]
    assert vf.summarize_producer(parsed, 1) == {
        "lines": 2, "tps": 4500, "avg_rt_ms": 7.0, "max_rt_ms": 3100, "send_failed": 2,
        "response_failed": 1,
    }
    assert vf.summarize_producer(parsed, 3) == {}


def test_consumer_lines_skip_nan_averages_and_the_producers_lines() -> None:
    assert vf.parse_consumer_line(CONSUMER.format(3000, 1, 25.5, 24.25, 90, 80)) == {
        "tps": 3000, "consume_failed": 1, "avg_b2c_rt_ms": 25.5, "avg_s2c_rt_ms": 24.25,
        "max_b2c_rt_ms": 90, "max_s2c_rt_ms": 80,
    }
    # a 10 s without a message: the tool divides 0 by 0
    assert vf.parse_consumer_line(
        "TPS: 0 FAIL: 0 AVG(B2C) RT:     NaN AVG(S2C) RT:     NaN MAX(B2C) RT: 0 MAX(S2C) RT: 0"
    ) is None
    assert vf.parse_consumer_line(PRODUCER.format(1, 2, 3.0, 0, 0)) is None
    assert vf.parse_consumer_line(CONSUMER.replace("{:7.3f}", "{}").format(
        1, 0, "1.2.3", "1.0", 2, 2)) is None


def _consumer(tps: int, s2c: float) -> dict[str, float]:
    line = vf.parse_consumer_line(CONSUMER.format(tps, 0, s2c + 1, s2c, int(2 * s2c), int(2 * s2c)))
    assert line is not None
    return line


def test_consumer_summary_skips_its_first_lines() -> None:
    lines = [_consumer(0, 0.0), _consumer(18000, 19000.0), _consumer(4000, 20.0)]
    assert vf.summarize_consumer(lines) == {
        "lines": 2, "tps": 11000, "avg_b2c_rt_ms": 9511.0, "avg_s2c_rt_ms": 9510.0,
        "max_b2c_rt_ms": 38000, "max_s2c_rt_ms": 38000, "consume_failed": 0,
    }
    assert vf.summarize_consumer(lines, 2)["tps"] == 4000
    assert vf.summarize_consumer(lines, 3) == {}


def _stamped(at: float, **figures: float) -> vf.Stamped:
    return vf.Stamped(at, figures)


def test_rate_over_weights_each_line_by_the_overlap_of_its_span() -> None:
    sent = [_stamped(10.0, tps=1000), _stamped(20.0, tps=4000)]
    # [12, 20]: only the second line's span (11, 20] overlaps, 8 s of it
    assert vf.rate_over(sent, 12.0, 20.0) == 4000
    # [5, 15]: 5 s of the first span (1, 10], 4 s of the second (11, 20]
    assert vf.rate_over(sent, 5.0, 15.0) == pytest.approx((5 * 1000 + 4 * 4000) / 9)
    assert vf.rate_over(sent, 20.0, 30.0) is None
    assert vf.rate_over([], 0.0, 10.0) is None


def _s2c(at: float, tps: float, s2c: float) -> vf.Stamped:
    return _stamped(at, tps=tps, avg_s2c_rt_ms=s2c)


def test_caught_up_is_the_first_line_after_the_first_close_behind_and_keeping_pace() -> None:
    sent = [_stamped(float(t), tps=4000) for t in (10, 20, 30, 40, 50, 60)]
    consumed = [
        _s2c(15.0, 4000, 10.0),     # the first line: left out whatever it says
        _s2c(25.0, 18000, 19000.0),  # catching up: far behind
        _s2c(35.0, 3000, 20.0),     # close behind, but 0.75 of the sent rate
        _s2c(45.0, 3700, 20.0),     # 0.925: caught up
        _s2c(55.0, 4000, 15.0),
    ]
    assert vf.caught_up_line(consumed, sent) == 3
    assert vf.caught_up_line(consumed, sent, min_fraction=0.95) == 4
    assert vf.caught_up_line(consumed, sent, skip=0) == 0
    assert vf.caught_up_line(consumed, sent, max_s2c_ms=20.0) == 4
    assert vf.caught_up_line(consumed, sent, max_s2c_ms=10.0) is None


def test_a_consumer_line_is_judged_only_once_the_producer_printed_past_it() -> None:
    consumed = [_s2c(15.0, 4000, 10.0), _s2c(25.0, 4000, 10.0)]
    sent = [_stamped(10.0, tps=4000), _stamped(20.0, tps=4000)]
    assert vf.caught_up_line(consumed, sent) is None  # the span (16, 25] is half unseen
    assert vf.caught_up_line(consumed, [*sent, _stamped(30.0, tps=4000)]) == 1
    assert vf.caught_up_line(consumed, []) is None
    # what the Producer sent over the Consumer line's own 9 s: a rate that dropped counts
    slower = [_stamped(10.0, tps=8000), _stamped(20.0, tps=8000), _stamped(30.0, tps=2000)]
    # (16, 25]: 4 s of the 20 s line's span at 8000, 4 s of the 30 s one's at 2000 -> 5000
    assert vf.caught_up_line(consumed, slower) is None
    assert vf.caught_up_line(consumed, slower, min_fraction=0.8) == 1


def test_lines_between_is_half_open() -> None:
    lines = [_stamped(float(t), tps=t) for t in (10, 20, 30)]
    assert vf.lines_between(lines, 10.0, 30.0) == [{"tps": 20}, {"tps": 30}]
    assert vf.lines_between(lines, 30.0, 99.0) == []


def test_lines_mostly_in_a_window_match_another_tools_phase() -> None:
    lines = [_stamped(float(t), tps=t) for t in (17, 27, 37, 47)]
    # the window [20, 40]: the 27 line spans (18, 27], the 37 one (28, 37]: both inside; the
    # 47 one (38, 47] mostly after it, the 17 one (8, 17] before it
    assert vf.lines_mostly_in(lines, 20.0, 40.0) == [{"tps": 27}, {"tps": 37}]
    # [23, 30]: shorter than the lines' spacing; the 27 line's span is mostly before it, so
    # the one with most of its span after the window's start
    assert vf.lines_mostly_in(lines, 23.0, 30.0) == [{"tps": 37}]
    assert vf.lines_mostly_in(lines, 50.0, 60.0) == []


def test_window_getters_name_the_window_and_read_its_part() -> None:
    getters = {"tps": lambda r: r["steady"]["tps"]}
    runs = [
        {"kind": "java", "steady": {"tps": 4500}, "caught_up_window": {"steady": {"tps": 9000}}},
        {"kind": "ours", "steady": {"tps": 3600}, "caught_up_window": {"steady": {"tps": 9900}}},
    ]
    both = {**vf.window_getters(getters, "early_", None),
            **vf.window_getters(getters, "caught_up_", "caught_up_window")}
    assert vf.median_ratios(runs, both) == {
        "early_tps": {"ours": 3600.0, "java": 4500.0, "ratio": 0.8},
        "caught_up_tps": {"ours": 9900.0, "java": 9000.0, "ratio": 1.1},
    }
    # a run without the window (a failed one) is left out of that window's median
    assert vf.median_ratios([*runs, {"kind": "ours", "steady": {"tps": 1}}],
                            both)["caught_up_tps"]["ours"] == 9900.0


def _log_time(epoch_s: float) -> str:
    stamp = datetime.datetime.fromtimestamp(epoch_s)
    return stamp.strftime("%Y-%m-%d %H:%M:%S,") + f"{stamp.microsecond // 1000:03d}"


def test_rebalance_adds_from_the_client_log() -> None:
    start = 1_790_000_000.0
    mq = "MessageQueue [topic={}, brokerName=broker-a, queueId={}]"
    log = "\n".join([
        f"{_log_time(start + 1)} INFO RocketmqClient - doRebalance, g_7, add a new mq, "
        + mq.format("BenchmarkTest", 0),
        f"{_log_time(start + 1.5)} INFO RocketmqClient - doRebalance, g_7, add a new mq, "
        + mq.format("%RETRY%g_7", 0),
        f"{_log_time(start + 2)} INFO RocketmqClient - doRebalance, g_7, compute offset "
        "failed, " + mq.format("BenchmarkTest", 1),
        f"{_log_time(start + 2)} WARN RocketmqClient - doRebalance, g_7, add new mq failed, "
        + mq.format("BenchmarkTest", 2),
        f"{_log_time(start + 3.25)} INFO RocketmqClient - doRebalance, g_7, add a new mq, "
        + mq.format("BenchmarkTest", 2),
        f"{_log_time(start + 30)} INFO RocketmqClient - doRebalance, g_7, add a new mq, "
        + mq.format("BenchmarkTest", 0),  # taken again after a removal: counted once
        "garbage - doRebalance, g_7, add a new mq, " + mq.format("BenchmarkTest", 9),
    ])
    assert vf.rebalance_adds(log, "BenchmarkTest", start) == {
        "queues_added": 2, "first_add_s": 1.0, "last_add_s": 3.25, "failed_adds": 2,
        "add_gap_ms": {"p50": 2250.0, "p99": 2250.0, "max": 2250.0},
    }
    assert vf.rebalance_adds("", "BenchmarkTest", start) == {
        "queues_added": 0, "first_add_s": None, "last_add_s": None, "failed_adds": 0,
        "add_gap_ms": None,
    }
