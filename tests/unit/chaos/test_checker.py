"""The chaos checker on hand-made histories: lost, duplicated, reordered, unknown, phantom,
unavailability, recovery, and each mode's verdict."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.chaos.checker import (
    MODE_ASYNC,
    MODE_DLEDGER,
    MODE_SYNC,
    HistoryError,
    check,
    parse_history,
)


class H:
    """A history builder: ``send`` writes invoke + outcome, ``recv`` a receive."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.t = 0.0

    def at(self, t: float) -> H:
        self.t = t
        return self

    def ev(self, kind: str, **fields: Any) -> None:
        self.events.append({"t": self.t, "type": kind, **fields})
        self.t += 0.01

    def send(self, i: str, outcome: str = "ok", *, broker: str = "broker-a", queue: int = 0,
             offset: int = 0, phy: int = 0, status: str = "SEND_OK", topic: str = "T",
             key: str | None = None, seq: int | None = None) -> None:
        inv: dict[str, Any] = {"id": i, "topic": topic}
        if key is not None:
            inv.update(key=key, seq=seq)
        self.ev("invoke", **inv)
        if outcome == "ok":
            self.ev("ok", id=i, status=status, broker=broker, queue=queue, offset=offset, phy=phy)
        elif outcome:
            self.ev(outcome, id=i, error="x")

    def recv(self, i: str, *, broker: str = "broker-a", queue: int = 0, offset: int = 0) -> None:
        self.ev("receive", id=i, broker=broker, queue=queue, offset=offset)


def test_clean_history_passes() -> None:
    h = H()
    for n in range(10):
        h.send(f"m{n}", offset=n)
    for n in range(10):
        h.recv(f"m{n}", offset=n)
    r = check(h.events, mode=MODE_SYNC)
    assert r.passed and r.acked == 10 and r.received == 10 and r.lost == 0
    assert r.duplicated == 0 and r.unknown == 0 and r.phantom == 0


def test_lost_acked_message_fails_sync_and_dledger() -> None:
    h = H()
    h.send("a", offset=0)
    h.send("b", offset=1)
    h.recv("a")
    for mode in (MODE_SYNC, MODE_DLEDGER):
        r = check(h.events, mode=mode)
        assert r.verdict == "FAIL"
        assert r.lost == 1 and r.examples["lost"] == ("b",)
        assert "lost" in r.reasons[0]


def test_weak_status_is_not_promised() -> None:
    h = H()
    h.send("a", status="FLUSH_SLAVE_TIMEOUT")
    r = check(h.events, mode=MODE_SYNC)
    assert r.passed and r.acked == 0 and r.acked_weak == 1 and r.lost == 0


def test_duplicates_redelivered_and_stored_twice() -> None:
    h = H()
    h.send("a", offset=0)
    h.send("b", offset=1)
    h.recv("a", offset=0)
    h.recv("a", offset=0)  # the same stored message twice
    h.recv("b", offset=1)
    h.recv("b", offset=7)  # a retry stored it again
    r = check(h.events, mode=MODE_SYNC)
    assert r.duplicated == 2 and r.redelivered == 1 and r.stored_twice == 1
    assert r.passed  # at-least-once allows duplicates
    assert r.received == 4 and r.received_unique == 2


def test_phantom_receive_fails() -> None:
    h = H()
    h.recv("never-sent")
    r = check(h.events, mode=MODE_SYNC)
    assert r.phantom == 1 and not r.passed


def test_unknown_accounting() -> None:
    h = H()
    h.send("a", "unknown")
    h.send("b", "unknown")
    h.send("c", "fail")
    h.send("d", "")  # invoked, no outcome: in flight when the run ended
    h.recv("a")
    h.recv("c")
    r = check(h.events, mode=MODE_SYNC)
    assert r.unknown == 3 and r.unknown_received == 1
    assert r.failed == 1 and r.failed_but_received == 1
    assert r.lost == 0 and r.passed  # nothing unknown is promised


def test_order_violation_on_orderly_topic() -> None:
    h = H()
    for seq in (1, 2, 3):
        h.send(f"o{seq}", topic="O", key="k", seq=seq, offset=seq)
    h.send("x1", topic="O", key="other", seq=1, offset=9)
    h.recv("o1")
    h.recv("o3")
    h.recv("x1")
    h.recv("o2")  # after o3: out of order for key k
    r = check(h.events, mode=MODE_SYNC, orderly_topics=["O"])
    assert r.order_violations == 1 and r.examples["order"] == ("o2",)
    assert not r.passed
    # the same history on a topic nobody declared orderly is fine
    assert check(h.events, mode=MODE_SYNC).passed


def test_order_ignores_redelivery_of_earlier_message() -> None:
    h = H()
    for seq in (1, 2):
        h.send(f"o{seq}", topic="O", key="k", seq=seq)
    h.recv("o1")
    h.recv("o2")
    h.recv("o1")  # redelivered after a rebalance: not an order violation of first receives
    r = check(h.events, mode=MODE_SYNC, orderly_topics=["O"])
    assert r.order_violations == 0 and r.redelivered == 1


def _async_history(lost_phy: int) -> H:
    h = H()
    h.at(1.0).send("a", phy=100, offset=0)
    h.send("b", phy=lost_phy, offset=1)
    h.at(2.0).ev("fault", phase="start", fault="kill-master", group="broker-a",
                 nodes=["broker-a"], window={"broker-a": 200})
    h.at(5.0).ev("fault", phase="end", fault="kill-master", group="broker-a", nodes=["broker-a"])
    h.recv("a")
    return h


def test_async_loss_inside_replication_window_is_allowed_and_reported() -> None:
    r = check(_async_history(lost_phy=250).events, mode=MODE_ASYNC)
    assert r.passed and r.lost == 1 and r.lost_in_window == 1 and r.lost_outside_window == 0
    # the same loss breaks SYNC's promise
    assert not check(_async_history(lost_phy=250).events, mode=MODE_SYNC).passed


def test_async_loss_outside_the_window_fails() -> None:
    r = check(_async_history(lost_phy=150).events, mode=MODE_ASYNC)
    assert not r.passed and r.lost_outside_window == 1 and r.lost_in_window == 0


def test_unavailability_gap_and_windows() -> None:
    h = H()
    h.at(0.0).send("a")
    h.at(1.0).send("b")
    h.at(2.0).send("c", "unknown")
    h.at(5.0).send("d", "fail")
    h.at(6.0).send("e")
    h.at(6.5).send("f")
    r = check(h.events, mode=MODE_SYNC)
    # last ok at 1.01, next ok at 6.01
    assert r.unavailable_max_s == pytest.approx(5.0, abs=0.02)
    assert len(r.unavailable_windows) == 1
    start, end = r.unavailable_windows[0]
    assert start == pytest.approx(2.0) and end == pytest.approx(6.01)


def test_recovery_after_fault_counts_sends_to_the_faulted_group() -> None:
    h = H()
    h.at(0.0).send("a", broker="broker-a")
    h.at(1.0).ev("fault", phase="start", fault="kill-master", group="broker-a",
                 nodes=["broker-a"])
    h.at(1.5).send("b", broker="broker-b")  # the other group keeps working
    h.at(4.0).ev("fault", phase="end", fault="kill-master", group="broker-a", nodes=["broker-a"])
    h.at(4.5).send("c", broker="broker-a")
    r = check(h.events, mode=MODE_SYNC)
    (f,) = r.faults
    assert f.recovery_s == pytest.approx(3.5, abs=0.02)
    assert f.heal_to_ok_s == pytest.approx(0.51, abs=0.02)


def test_parse_history_round_trip_and_errors() -> None:
    h = H()
    h.send("a")
    h.recv("a")
    lines = [json.dumps(e) for e in h.events]
    assert parse_history(["", *lines]) == h.events
    with pytest.raises(HistoryError, match="line 2"):
        parse_history([lines[0], "{not json"])
    with pytest.raises(HistoryError, match="'type'"):
        parse_history(['{"t": 1}'])
    with pytest.raises(ValueError, match="mode"):
        check([], mode="MAYBE")


@given(
    n=st.integers(min_value=1, max_value=40),
    drop=st.sets(st.integers(min_value=0, max_value=39)),
    dup=st.sets(st.integers(min_value=0, max_value=39)),
)
def test_counts_match_what_was_dropped_and_duplicated(n: int, drop: set[int],
                                                      dup: set[int]) -> None:
    h = H()
    for i in range(n):
        h.send(f"m{i}", offset=i)
    for i in range(n):
        if i not in drop:
            h.recv(f"m{i}", offset=i)
            if i in dup:
                h.recv(f"m{i}", offset=i)
    r = check(h.events, mode=MODE_SYNC)
    lost = {i for i in drop if i < n}
    assert r.lost == len(lost)
    assert r.duplicated == len({i for i in dup if i < n} - lost)
    assert r.passed == (not lost)


def test_latency_percentiles_overall_and_during_a_fault() -> None:
    h = H()
    for n in range(10):
        h.at(float(n)).ev("invoke", id=f"m{n}", topic="T")
        slow = 0.5 if 3 <= n < 6 else 0.01
        h.at(n + slow).ev("ok", id=f"m{n}", status="SEND_OK", broker="broker-a", queue=0,
                          offset=n, phy=n)
    h.at(3.0).ev("fault", phase="start", fault="slow-network", group="broker-a",
                 nodes=["broker-a"])
    h.at(6.0).ev("fault", phase="end", fault="slow-network", group="broker-a",
                 nodes=["broker-a"])
    r = check(h.events, mode=MODE_SYNC)
    assert r.latency_p50_ms == pytest.approx(10.0, abs=1)
    assert r.latency_p99_ms == pytest.approx(500.0, abs=1)
    assert r.faults[0].latency_p99_ms == pytest.approx(500.0, abs=1)


def test_chaos_check_command_exit_status(tmp_path: Any, capsys: Any) -> None:
    """``rmq-cluster chaos check`` re-checks a history: 0 when the promise held, 1 when not,
    2 for an unreadable file."""
    from rmq_cluster.cli.main import main

    good = H()
    good.send("a")
    good.recv("a")
    bad = H()
    bad.send("a")
    for name, h in (("good", good), ("bad", bad)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in h.events))
    assert main(["chaos", "check", str(tmp_path / "good.jsonl"), "--mode", "SYNC"]) == 0
    assert main(["chaos", "check", str(tmp_path / "bad.jsonl"), "--mode", "SYNC", "--json"]) == 1
    out = capsys.readouterr().out
    assert '"lost": 1' in out and '"verdict": "FAIL"' in out
    (tmp_path / "torn.jsonl").write_text('{"t": 1, "type": "invoke", "id": "a"}\n{torn')
    assert main(["chaos", "check", str(tmp_path / "torn.jsonl"), "--mode", "SYNC"]) == 2
    assert "line 2" in capsys.readouterr().err
