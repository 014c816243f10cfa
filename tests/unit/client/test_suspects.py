"""SuspectRoutes: which topics' routes to re-read after a broker failed, how often, until when."""

from __future__ import annotations

from rmq_cluster.client.suspects import SuspectRoutes


def test_a_mark_lasts_until_a_new_master_or_the_window_ends() -> None:
    s = SuspectRoutes(poll_s=0.5, window_s=30.0)
    s.mark("T", "broker-a", "10.0.0.1:10911", now=100.0)
    assert s.topics(now=100.0) == ["T"]
    masters = {"broker-a": "10.0.0.1:10911"}
    assert s.settle("T", masters.get) == []  # the same (dead) master: keep watching
    masters["broker-a"] = None  # type: ignore[assignment]
    assert s.settle("T", masters.get) == []  # no master yet
    masters["broker-a"] = "10.0.0.2:10911"
    assert s.settle("T", masters.get) == ["broker-a"]
    assert s.topics(now=101.0) == [] and len(s) == 0
    s.mark("U", "broker-b", None, now=100.0)
    assert s.topics(now=129.9) == ["U"]
    assert s.topics(now=130.0) == []


def test_fetches_are_spaced_by_the_poll_period() -> None:
    s = SuspectRoutes(poll_s=0.5, window_s=30.0)
    s.mark("T", "broker-a", None, now=10.0)
    assert s.fetch_due("T", now=10.0)
    s.fetched("T", now=10.0)
    assert not s.fetch_due("T", now=10.4)
    assert s.fetch_due("T", now=10.5)
    s.mark("T", "broker-a", None, now=20.0)  # a later failure extends the window
    assert s.topics(now=45.0) == ["T"]
