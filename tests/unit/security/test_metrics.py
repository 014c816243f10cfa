"""Metrics registry: instruments, collected families, exposition text and the strict parser."""

from __future__ import annotations

import math

import pytest

from rmq_cluster.cluster.metrics import (
    ExpositionError,
    RateTracker,
    Registry,
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


def test_rate_tracker() -> None:
    r = RateTracker(forget_after=1)
    assert r.rate("k", 100, 10.0) == 0.0
    assert r.rate("k", 150, 12.0) == 25.0
    assert r.rate("k", 150, 12.0) == 25.0  # no time passed: last rate
    r.end_look()
    r.end_look()
    r.end_look()
    assert r.rate("k", 1000, 20.0) == 0.0  # forgotten: starts again


def test_bad_names_refused() -> None:
    reg = Registry()
    with pytest.raises(ValueError, match="bad metric name"):
        reg.counter("1bad", "x")
    reg.counter("ok_total", "x")
    with pytest.raises(ValueError, match="already registered"):
        reg.gauge("ok_total", "x")
