"""The master's SyncStateSet policy (broker/replicas_manager.py: next_sync_state_set)."""

from __future__ import annotations

from rmq_cluster.broker.replicas_manager import next_sync_state_set


def test_join_stay_and_leave() -> None:
    last: dict[int, float] = {}
    # 2 caught up: joins; 3 never did: stays out
    assert next_sync_state_set(1, {2: True, 3: False}, {1}, last, 0.0, 3.0) == {1, 2}
    # 2 falls behind: kept while it caught up less than keep_s ago
    assert next_sync_state_set(1, {2: False, 3: False}, {1, 2}, last, 2.9, 3.0) == {1, 2}
    assert next_sync_state_set(1, {2: False, 3: False}, {1, 2}, last, 3.0, 3.0) == {1}
    # a replica that is not a member does not get in on an old catch-up
    assert next_sync_state_set(1, {2: False}, {1}, last, 1.0, 3.0) == {1}
    # unreachable replicas are simply not caught up; the master is always in
    assert next_sync_state_set(1, {}, {1, 2}, {}, 10.0, 3.0) == {1}
    assert next_sync_state_set(1, {1: False}, {1}, {}, 0.0, 3.0) == {1}
