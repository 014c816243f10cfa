"""bench/vs_figures.py: the probe's and the batch load's lines, and the medians vs_java prints."""

from __future__ import annotations

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
