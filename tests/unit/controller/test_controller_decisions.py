"""The controller trusts only what it saw (controller/state.py), whoever sends the request:
the forged-election sequence of issue 31 (REGISTER + HEARTBEAT + ALTER_SYNC_STATE_SET +
ELECT_MASTER for a replica that never held the data) changes nothing, a live master is never
demoted to a replica that is not caught up, a live replica is never moved to another address,
and no event moves an epoch backwards."""

from __future__ import annotations

from rmq_cluster.cluster.protocol.controller import NO_MASTER, ControllerResponseCode
from rmq_cluster.controller.state import (
    CATCHUP_SLACK_MS,
    MAX_EPOCH,
    AlterEvent,
    ApplyOutcome,
    ElectEvent,
    GroupState,
    Heartbeat,
    Liveness,
    Refusal,
    RegisterEvent,
    ReplicasState,
    check_heartbeat,
    decide_alter,
    decide_elect,
    decide_register,
)

G = "broker-a"
RC = ControllerResponseCode


def addr(i: int) -> str:
    return f"127.0.0.1:{10000 + i}"


def group_with_master(epoch: int = 1) -> ReplicasState:
    """Replicas 1 (master) and 2 in the SyncStateSet at master epoch ``epoch``."""
    s = ReplicasState()
    for i in (1, 2):
        assert s.apply(RegisterEvent("c", G, i, addr(i))) is ApplyOutcome.APPLIED
    for e in range(1, epoch + 1):
        assert s.apply(ElectEvent(G, 1, e)) is ApplyOutcome.APPLIED
    g = s.group(G)
    assert g is not None
    assert s.apply(AlterEvent(G, 1, epoch, frozenset({1, 2}), g.sse_epoch + 1)) \
        is ApplyOutcome.APPLIED
    return s


def beat(live: Liveness, i: int, at: int, offset: int, epoch: int = 1) -> None:
    live.beat(G, i, Heartbeat(at, 1000, epoch, offset, addr(i)))


def real_beats(now: int) -> Liveness:
    """The real replicas heartbeat: master 1 and slave 2 at 12 500 bytes, epoch 1."""
    live = Liveness(since_ms=now - 10_000)
    for t in range(now - 2000, now + 1, 200):
        beat(live, 1, t, 12_500)
        beat(live, 2, t, 12_500)
    return live


def refused(got: object, code: int) -> bool:
    return isinstance(got, Refusal) and got.code == code


def test_the_forged_election_sequence_changes_nothing() -> None:
    now = 100_000
    s = group_with_master()
    live = real_beats(now)
    # REGISTER of replica 3 (it never held the data): a new member, allowed
    reg = decide_register(s, RegisterEvent("c", G, 3, "127.0.0.1:9"), live, now)
    assert isinstance(reg, RegisterEvent)
    s.apply(reg)
    before = s.group(G)
    # not heard at all: it may not join, nor be elected
    alter = decide_alter(s, G, 1, 1, frozenset({1, 2, 3}), 2, live=live, now_ms=now)
    assert refused(alter, RC.CONTROLLER_INVALID_REPLICAS)
    assert refused(decide_elect(s, G, live, now, designated=3), RC.CONTROLLER_BROKER_NOT_ALIVE)
    # its (honest) heartbeats show an empty log: still neither
    beat(live, 3, now, 0, epoch=0)
    alter = decide_alter(s, G, 1, 1, frozenset({1, 2, 3}), 2, live=live, now_ms=now)
    assert refused(alter, RC.CONTROLLER_INVALID_REPLICAS)
    beat(live, 3, now, 0, epoch=1)  # the right epoch, nothing in the log
    alter = decide_alter(s, G, 1, 1, frozenset({1, 3}), 2, live=live, now_ms=now)
    assert refused(alter, RC.CONTROLLER_INVALID_REPLICAS)
    assert refused(decide_elect(s, G, live, now, designated=3), RC.CONTROLLER_INVALID_REPLICAS)
    assert s.group(G) == before


def test_a_live_master_is_demoted_only_to_a_caught_up_sync_state_set_member() -> None:
    now = 100_000
    s = group_with_master()
    # the SyncStateSet somehow holds 3 (e.g. it was caught up once); it is far behind now
    assert s.apply(RegisterEvent("c", G, 3, addr(3))) is ApplyOutcome.APPLIED
    assert s.apply(AlterEvent(G, 1, 1, frozenset({1, 2, 3}), 3)) is ApplyOutcome.APPLIED
    live = real_beats(now)
    beat(live, 3, now, 100)
    assert refused(decide_elect(s, G, live, now, designated=3), RC.CONTROLLER_INVALID_REPLICAS)
    # 2 is caught up with where the master was CATCHUP_SLACK_MS ago: a legitimate transfer
    beat(live, 1, now + 100, 20_000)
    assert decide_elect(s, G, live, now + 100, designated=2) == ElectEvent(G, 2, 2)
    # once the master is dead, any heard alive SyncStateSet member may be designated
    later = now + 5000
    live2 = Liveness(since_ms=0)
    beat(live2, 3, later, 100)
    assert decide_elect(s, G, live2, later, designated=3) == ElectEvent(G, 3, 2)


def test_alter_adds_only_heard_alive_caught_up_replicas_at_the_master_epoch() -> None:
    now = 100_000
    s = group_with_master()
    assert s.apply(RegisterEvent("c", G, 3, addr(3))) is ApplyOutcome.APPLIED
    live = real_beats(now)
    g = s.group(G)
    assert g is not None
    # the master grew since; 3 reaches where it was CATCHUP_SLACK_MS before 3's heartbeat
    beat(live, 1, now, 30_000)
    beat(live, 3, now, 12_500)
    ok = decide_alter(s, G, 1, 1, frozenset({1, 2, 3}), g.sse_epoch, live=live, now_ms=now)
    assert isinstance(ok, AlterEvent)
    beat(live, 3, now + 1, 12_499)  # one byte short
    behind = decide_alter(s, G, 1, 1, frozenset({1, 2, 3}), g.sse_epoch, live=live,
                          now_ms=now + 1)
    assert refused(behind, RC.CONTROLLER_INVALID_REPLICAS)
    # 3 caught up but silent for longer than its timeout: not alive
    beat(live, 3, now + 2, 40_000)
    late = now + 2 + 1000
    beat(live, 1, late, 30_000)
    assert refused(decide_alter(s, G, 1, 1, frozenset({1, 3}), g.sse_epoch, live=live,
                                now_ms=late), RC.CONTROLLER_INVALID_REPLICAS)
    # dropping a member needs no catch-up; the sender must be the master at its epochs
    assert isinstance(decide_alter(s, G, 1, 1, frozenset({1}), g.sse_epoch, live=live,
                                   now_ms=now), AlterEvent)
    assert refused(decide_alter(s, G, 2, 1, frozenset({2}), g.sse_epoch, live=live, now_ms=now),
                   RC.CONTROLLER_INVALID_MASTER)
    assert refused(decide_alter(s, G, 1, 0, frozenset({1}), g.sse_epoch, live=live, now_ms=now),
                   RC.CONTROLLER_FENCED_MASTER_EPOCH)
    # a master this leader never heard cannot change the set
    quiet = Liveness(since_ms=now)
    assert refused(decide_alter(s, G, 1, 1, frozenset({1}), g.sse_epoch, live=quiet, now_ms=now),
                   RC.CONTROLLER_INVALID_MASTER)
    assert CATCHUP_SLACK_MS > 0


def test_elections_pick_only_replicas_this_leader_heard() -> None:
    s = group_with_master()
    now = 100_000
    # a leader that just took over counts everyone alive for one timeout (no election), but a
    # replica it never heard is no candidate once the master is known dead
    fresh = Liveness(since_ms=now)
    assert decide_elect(s, G, fresh, now) is None
    assert refused(decide_elect(s, G, fresh, now, designated=2), RC.CONTROLLER_BROKER_NOT_ALIVE)
    later = now + 1500
    assert decide_elect(s, G, fresh, later) == ElectEvent(G, NO_MASTER, 2)
    beat(fresh, 2, later, 12_500)
    assert decide_elect(s, G, fresh, later) == ElectEvent(G, 2, 2)


def test_a_live_replica_is_never_moved_to_another_address() -> None:
    now = 100_000
    s = group_with_master()
    live = real_beats(now)
    moved = RegisterEvent("c", G, 1, "10.9.9.9:10911")
    assert refused(decide_register(s, moved, live, now), RC.CONTROLLER_INVALID_REQUEST)
    assert decide_register(s, RegisterEvent("c", G, 1, addr(1)), live, now) is None
    # a replica that stopped heartbeating may come back elsewhere
    assert decide_register(s, moved, live, now + 5000) == moved
    g = s.group(G)
    assert check_heartbeat(g, 1, addr(1)) is None
    assert refused(check_heartbeat(g, 1, "10.9.9.9:10911"), RC.CONTROLLER_INVALID_REQUEST)
    assert refused(check_heartbeat(g, 9, addr(9)), RC.CONTROLLER_BROKER_METADATA_NOT_EXIST)
    assert refused(check_heartbeat(None, 1, addr(1)),
                   RC.CONTROLLER_BROKER_METADATA_NOT_EXIST)


def test_epochs_never_move_backwards() -> None:
    s = group_with_master(epoch=3)
    before = s.group(G)
    assert before is not None
    for ev in (ElectEvent(G, 2, 1), ElectEvent(G, 2, 3), ElectEvent(G, NO_MASTER, 2),
               AlterEvent(G, 1, 2, frozenset({1}), before.sse_epoch + 1),
               AlterEvent(G, 1, 3, frozenset({1}), before.sse_epoch),
               AlterEvent(G, 1, 3, frozenset({1}), before.sse_epoch - 1)):
        assert s.apply(ev) is ApplyOutcome.STALE, ev
    assert s.apply(RegisterEvent("c", G, 2, addr(2))) is ApplyOutcome.APPLIED
    assert s.group(G) == before
    last = ReplicasState()
    last.groups[G] = GroupState("c", G, ((1, addr(1)),), 1, MAX_EPOCH, frozenset({1}), 1)
    live = Liveness(since_ms=0)
    assert refused(decide_elect(last, G, live, 10_000), RC.CONTROLLER_INVALID_REQUEST)
