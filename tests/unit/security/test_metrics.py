"""Metrics registry: instruments, collected families, exposition text and the strict parser."""

from __future__ import annotations

import math

import pytest

from rmq_cluster.cluster.metrics import (
    ExpositionError,
    Registry,
    WindowRates,
    parse_exposition,
    sample_value,
)


def test_render_and_parse_round_trip() -> None:
    reg = Registry({"node": "b1"})
    c = reg.counter("rmq_things_total", "Things")
    c.inc()
    c.inc(4)
    g = reg.gauge("rmq_level", "Level", {"kind": 'a"b\\c\nd'})
    g.set(2.5)
    h = reg.histogram("rmq_latency_seconds", "Latency", (0.001, 0.01, 0.1))
    for v in (0.0005, 0.005, 0.005, 5.0):
        h.observe(v)
    reg.collect("rocketmq_producer_offset", "gauge", "Offsets",
                lambda: [({"topic": "T1"}, 10), ({"topic": "T2"}, 3)])
    reg.collect("rmq_acl_denials", "counter", "Denials", lambda: [(None, 7)])
    text = reg.render()
    fams = parse_exposition(text)
    assert fams["rmq_things_total"][0] == "counter"
    assert sample_value(fams, "rmq_things_total", node="b1") == 5
    assert sample_value(fams, "rmq_level", kind='a"b\\c\nd') == 2.5
    assert sample_value(fams, "rmq_latency_seconds_bucket", le="0.001") == 1
    assert sample_value(fams, "rmq_latency_seconds_bucket", le="0.01") == 3
    assert sample_value(fams, "rmq_latency_seconds_bucket", le="+Inf") == 4
    assert sample_value(fams, "rmq_latency_seconds_count") == 4
    assert math.isclose(sample_value(fams, "rmq_latency_seconds_sum") or 0, 5.0105)
    assert sample_value(fams, "rocketmq_producer_offset") == 13
    assert sample_value(fams, "rocketmq_producer_offset", topic="T2", node="b1") == 3
    assert sample_value(fams, "rmq_acl_denials") == 7  # rendered as rmq_acl_denials_total
    assert "rmq_acl_denials_total{" in text


@pytest.mark.parametrize(
    "bad",
    [
        "x 1\n",  # sample before TYPE
        "# TYPE x counter\nx 1",  # no final newline
        "# TYPE x counter\n# TYPE x counter\n",
        "# TYPE x widget\n",
        "# TYPE x gauge\nx{a=\"1\"} one\n",
        "# TYPE x gauge\nx{a=1} 1\n",
        "# TYPE x gauge\nx{a=\"1\",a=\"2\"} 1\n",
        "# TYPE x gauge\ny 1\n",
        "# TYPE x counter\nx -1\n",
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 1\n",
    ],
)
def test_strict_parser_rejects(bad: str) -> None:
    with pytest.raises(ExpositionError):
        parse_exposition(bad)


def test_failing_collector_does_not_hide_others() -> None:
    reg = Registry()

    def broken() -> list[tuple[None, float]]:
        raise RuntimeError("boom")

    reg.collect("a_broken", "gauge", "x", broken)
    reg.gauge("b_fine", "y").set(1)
    fams = parse_exposition(reg.render())
    assert "a_broken" not in fams and sample_value(fams, "b_fine") == 1


def test_window_rates_cover_the_stated_window() -> None:
    r = WindowRates(10.0, 1.0)
    assert r.rate("k") == 0.0
    r.observe("k", 0, 100.0)
    assert r.rate("k") == 0.0  # one sample: nothing to measure yet
    for t in range(1, 31):  # 50 per second for 30 s, sampled every second
        r.observe("k", 50 * t, 100.0 + t)
    assert r.rate("k") == 50.0
    r.observe("k", 10_000, 130.5)  # too soon after the last sample: ignored
    assert r.rate("k") == 50.0
    for t in range(31, 36):  # 5 s at 150 per second: half of the window
        r.observe("k", 1500 + 150 * (t - 30), 100.0 + t)
    assert r.rate("k") == (2250 - 1250) / 10  # the last 10 s exactly: 25 s -> 35 s
    assert r.rate("k") == r.rate("k")  # reading moves nothing


def test_window_rates_young_keys_resets_and_forgetting() -> None:
    r = WindowRates(10.0, 1.0)
    r.observe("young", 500, 0.0)
    r.observe("young", 530, 3.0)
    assert r.rate("young") == 10.0  # younger than the window: over its life
    r.observe("young", 5, 4.0)  # a reset
    assert r.rate("young") == 0.0
    r.forget(20.0)
    assert len(r) == 0
    with pytest.raises(ValueError):
        WindowRates(1.0, 2.0)


def test_bad_names_refused() -> None:
    reg = Registry()
    with pytest.raises(ValueError, match="bad metric name"):
        reg.counter("1bad", "x")
    reg.counter("ok_total", "x")
    with pytest.raises(ValueError, match="already registered"):
        reg.gauge("ok_total", "x")
