"""ha.master: the ack table, in-sync judgement and SYNC_MASTER decisions (pure)."""

from __future__ import annotations

from rmq_cluster.ha.master import (
    AckTable,
    ReportOutcome,
    SyncDecision,
    transfer_start_offset,
)

MiB = 1024 * 1024
GiB = 1024 * MiB


def test_start_offset_new_slave_starts_at_last_file() -> None:
    assert transfer_start_offset(0, 0, GiB) == 0
    assert transfer_start_offset(0, 3 * GiB + 17, GiB) == 3 * GiB
    assert transfer_start_offset(0, 3 * GiB, GiB) == 3 * GiB
    assert transfer_start_offset(12345, 3 * GiB, GiB) == 12345


def test_no_slave_is_not_available() -> None:
    t = AckTable(256 * MiB)
    assert t.sync_decision(100) is SyncDecision.SLAVE_NOT_AVAILABLE
    assert not t.is_slave_ok(100)


def test_wait_then_acked() -> None:
    t = AckTable(256 * MiB)
    t.add(1, "a", 0)
    assert t.sync_decision(100) is SyncDecision.WAIT
    assert t.on_report(1, 100, 200, 5) is ReportOutcome.ACCEPTED
    assert t.push_to_slave_max_offset == 100
    assert t.sync_decision(100) is SyncDecision.ACKED
    assert t.sync_decision(101) is SyncDecision.WAIT


def test_too_far_behind_is_not_available() -> None:
    t = AckTable(1000)
    t.add(1, "a", 0)
    t.on_report(1, 0, 5000, 0)
    assert t.sync_decision(999) is SyncDecision.WAIT
    assert t.sync_decision(1000) is SyncDecision.SLAVE_NOT_AVAILABLE
    assert not t.in_sync(1, 5000)
    t.on_report(1, 4500, 5000, 1)
    assert t.in_sync(1, 5000)


def test_max_over_slaves_and_monotonic() -> None:
    t = AckTable(256 * MiB)
    t.add(1, "a", 0)
    t.add(2, "b", 0)
    t.on_report(1, 500, 1000, 0)
    t.on_report(2, 300, 1000, 0)
    assert t.push_to_slave_max_offset == 500
    t.remove(1)
    assert t.push_to_slave_max_offset == 500  # never decreases (RocketMQ push2SlaveMaxOffset)
    assert t.connection_count == 1
    assert t.ack_of(2) == 300 and t.ack_of(1) == -1


def test_report_beyond_master_and_unknown() -> None:
    t = AckTable(256 * MiB)
    t.add(1, "a", 0)
    assert t.on_report(1, 1001, 1000, 0) is ReportOutcome.BEYOND_MASTER
    assert t.push_to_slave_max_offset == 0
    assert t.on_report(9, 10, 1000, 0) is ReportOutcome.UNKNOWN_SLAVE


def test_status_and_speed() -> None:
    t = AckTable(256 * MiB)
    t.add(1, "10.0.0.2:1234", 0)
    (s,) = t.status(1000)
    assert s.ack_offset == -1 and not s.in_sync and s.diff_bytes == 1000
    t.on_report(1, 0, 1000, 0)
    t.on_report(1, 500, 3000, 500)
    t.on_report(1, 2000, 3000, 1000)  # 2000 bytes in 1 s
    (s,) = t.status(3000)
    assert s.address == "10.0.0.2:1234"
    assert s.ack_offset == 2000 and s.diff_bytes == 1000 and s.in_sync
    assert s.transfer_bytes_per_s == 2000.0


def test_sync_decision_matches_is_slave_ok_and_the_ack_everywhere() -> None:
    """The inlined decision equals its definition: SLAVE_NOT_AVAILABLE unless is_slave_ok,
    else ACKED once push2SlaveMaxOffset reached the put's end, else WAIT."""
    fallbehind = 50
    for with_slave in (False, True):
        t = AckTable(fallbehind)
        if with_slave:
            t.add(1, "s", 0)
        for acked in (0, 10, 100):
            if with_slave and acked:
                t.on_report(1, acked, 10_000, 1)
            for end in range(0, 200, 3):
                if not t.is_slave_ok(end):
                    expected = SyncDecision.SLAVE_NOT_AVAILABLE
                elif t.push_to_slave_max_offset >= end:
                    expected = SyncDecision.ACKED
                else:
                    expected = SyncDecision.WAIT
                assert t.sync_decision(end) is expected, (with_slave, acked, end)
