"""The controller's pure state machine and decisions (controller/state.py) and its wire bodies
(cluster/protocol/controller.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.protocol.controller import (
    NO_MASTER,
    ControllerBodyError,
    ControllerResponseCode,
    EpochEntry,
    EpochEntryCache,
    SyncStateSet,
    decode_replicas_table,
    encode_replicas_table,
)
from rmq_cluster.controller.state import (
    AlterEvent,
    ApplyOutcome,
    ElectEvent,
    EventError,
    Heartbeat,
    Liveness,
    Refusal,
    RegisterEvent,
    ReplicasState,
    decide_alter,
    decide_elect,
    decode_event,
    encode_event,
    sync_state_data,
)

G = "broker-a"


def _state(*ids: int) -> ReplicasState:
    s = ReplicasState()
    for i in ids:
        assert s.apply(RegisterEvent("c", G, i, f"127.0.0.1:{10000 + i}")) is ApplyOutcome.APPLIED
    return s


def _live(now: int, **offsets: int) -> Liveness:
    live = Liveness(since_ms=-10_000, default_timeout_ms=1000)
    for key, off in offsets.items():
        live.beat(G, int(key[1:]), Heartbeat(now, 1000, 1, off, "127.0.0.1:1"))
    return live


def test_first_election_picks_an_alive_replica_then_bumps_epoch_and_resets_sss() -> None:
    s = _state(1, 2)
    ev = decide_elect(s, G, _live(0, b1=100, b2=50), 0)
    assert ev == ElectEvent(G, 1, 1)
    assert s.apply(ev) is ApplyOutcome.APPLIED
    g = s.group(G)
    assert g is not None
    assert (g.master_id, g.master_epoch, g.sync_state_set, g.sse_epoch) == (1, 1, {1}, 1)
    assert g.master_address == "127.0.0.1:10001"
    # the master is alive: nothing to do
    assert decide_elect(s, G, _live(0, b1=100, b2=50), 0) is None


def test_master_loss_elects_only_from_the_sync_state_set() -> None:
    s = _state(1, 2, 3)
    s.apply(ElectEvent(G, 1, 1))
    alter = decide_alter(s, G, 1, 1, frozenset({1, 2}), 1, live=_live(0, b1=9, b2=9), now_ms=0)
    assert isinstance(alter, AlterEvent)
    assert s.apply(alter) is ApplyOutcome.APPLIED
    live = _live(5000, b2=10, b3=999)  # 1 silent; 3 is ahead but not in sync
    ev = decide_elect(s, G, live, 5000)
    assert ev == ElectEvent(G, 2, 2)
    s.apply(ev)
    g = s.group(G)
    assert g is not None and (g.master_id, g.master_epoch, g.sync_state_set) == (2, 2, {2})
    # unclean election may take 3 when no SSS member lives
    live = _live(9000, b3=999)
    assert decide_elect(s, G, live, 9000) == ElectEvent(G, NO_MASTER, 3)
    assert decide_elect(s, G, live, 9000, unclean=True) == ElectEvent(G, 3, 3)


def test_no_candidate_clears_the_master_and_fences_its_epoch_then_a_member_returns() -> None:
    s = _state(1, 2)
    s.apply(ElectEvent(G, 1, 1))
    ev = decide_elect(s, G, _live(5000, b2=0), 5000)
    assert ev == ElectEvent(G, NO_MASTER, 2)
    s.apply(ev)
    g = s.group(G)
    assert g is not None and g.master_id == NO_MASTER and g.sync_state_set == {1}
    # the old master is fenced: its ALTER with epoch 1 is refused
    refusal = decide_alter(s, G, 1, 1, frozenset({1, 2}), live=_live(5000, b1=0), now_ms=5000)
    assert isinstance(refusal, Refusal)
    assert refusal.code == ControllerResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    # nothing more until an SSS member is alive again
    assert decide_elect(s, G, _live(6000, b2=0), 6000) is None
    assert decide_elect(s, G, _live(7000, b1=5), 7000) == ElectEvent(G, 1, 3)


def test_stale_events_change_nothing() -> None:
    s = _state(1, 2)
    s.apply(ElectEvent(G, 1, 1))
    before = s.group(G)
    assert s.apply(ElectEvent(G, 2, 1)) is ApplyOutcome.STALE  # decided on an older view
    assert s.apply(AlterEvent(G, 1, 1, frozenset({1, 2}), 5)) is ApplyOutcome.STALE
    assert s.apply(AlterEvent(G, 1, 1, frozenset({2}), 2)) is ApplyOutcome.STALE  # no master
    assert s.apply(AlterEvent(G, 1, 1, frozenset({1, 9}), 2)) is ApplyOutcome.STALE  # stranger
    assert s.group(G) == before


def test_alter_refusals_name_the_problem() -> None:
    s = _state(1, 2)
    s.apply(ElectEvent(G, 1, 1))
    cases = {
        (2, 1, frozenset({1, 2}), None): ControllerResponseCode.CONTROLLER_INVALID_MASTER,
        (1, 1, frozenset({2}), None): ControllerResponseCode.CONTROLLER_INVALID_REPLICAS,
        (1, 1, frozenset({1, 7}), None): ControllerResponseCode.CONTROLLER_INVALID_REPLICAS,
        (1, 1, frozenset({1, 2}), 0): ControllerResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
    }
    live = _live(0, b1=0, b2=0)
    for (master, epoch, ids, seen), code in cases.items():
        got = decide_alter(s, G, master, epoch, ids, seen, live=live, now_ms=0)
        assert isinstance(got, Refusal) and got.code == code, (master, ids, seen)
    assert isinstance(decide_alter(s, "nope", 1, 1, frozenset({1}), live=live, now_ms=0),
                      Refusal)


def test_designated_election() -> None:
    s = _state(1, 2)
    s.apply(ElectEvent(G, 1, 1))
    s.apply(AlterEvent(G, 1, 1, frozenset({1, 2}), 2))
    live = _live(0, b1=1, b2=1)
    assert decide_elect(s, G, live, 0, designated=2) == ElectEvent(G, 2, 2)
    assert decide_elect(s, G, live, 0, designated=1) is None
    assert isinstance(decide_elect(s, G, _live(0, b1=1), 5000, designated=2), Refusal)


def test_replicas_view_and_sync_state_data_round_trip() -> None:
    s = _state(1, 2)
    s.apply(ElectEvent(G, 1, 1))
    table = sync_state_data(s, [G, "unknown"], _live(0, b1=0), 0)
    back = decode_replicas_table(encode_replicas_table(table))
    info = back[G]
    assert info.master_broker_id == 1 and info.master_epoch == 1
    assert [(r.broker_id, r.alive) for r in info.in_sync] == [(1, True)]
    assert [(r.broker_id, r.alive) for r in info.not_in_sync] == [(2, False)]


def test_liveness_counts_everyone_alive_for_one_timeout_after_a_leader_change() -> None:
    live = Liveness(since_ms=1000, default_timeout_ms=500)
    assert live.alive(G, 1, 1400)
    assert not live.alive(G, 1, 1600)
    live.beat(G, 1, Heartbeat(1600, 300, 1, 0, "a:1"))
    assert live.alive(G, 1, 1800) and not live.alive(G, 1, 1900)


events = st.one_of(
    st.builds(RegisterEvent, st.just("c"), st.sampled_from([G, "broker-b"]),
              st.integers(0, 4), st.sampled_from(["127.0.0.1:1", "h:2"])),
    st.builds(ElectEvent, st.sampled_from([G, "broker-b"]), st.integers(-1, 4),
              st.integers(0, 6)),
    st.builds(AlterEvent, st.sampled_from([G, "broker-b"]), st.integers(0, 4),
              st.integers(0, 6), st.frozensets(st.integers(0, 4), max_size=4),
              st.integers(0, 6)),
)


@given(st.lists(events, max_size=40))
def test_replaying_the_log_gives_the_same_state_and_epochs_never_go_back(evs: list) -> None:
    a, b = ReplicasState(), ReplicasState()
    epochs: dict[str, tuple[int, int]] = {}
    for ev in evs:
        assert decode_event(encode_event(ev)) == ev
        a.apply(ev)
        for name, g in a.groups.items():
            old = epochs.get(name, (0, 0))
            assert (g.master_epoch, g.sse_epoch) >= old
            assert g.master_epoch >= old[0] and g.sse_epoch >= old[1]
            if g.master_id != NO_MASTER:
                assert g.master_id in g.sync_state_set
            assert g.sync_state_set <= set(g.member_map)
            epochs[name] = (g.master_epoch, g.sse_epoch)
    for ev in evs:
        b.apply(decode_event(encode_event(ev)))
    assert a.groups == b.groups


@pytest.mark.parametrize("body", [
    b"", b"[]", b'{"t":"elect","group":"g","master":-2,"epoch":1}',
    b'{"t":"register","cluster":"c","group":"g","id":1,"addr":"nohostport"}',
    b'{"t":"register","cluster":"c","group":"a b","id":1,"addr":"h:1"}',
    b'{"t":"alter","group":"g","master":1,"epoch":1,"set":"x","sseEpoch":1}',
    b'{"t":"drop","group":"g"}',
])
def test_hostile_event_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(EventError):
        decode_event(body)


@pytest.mark.parametrize("body", [
    b"nope", b"[]", b'{"syncStateSet":[-1]}', b'{"syncStateSet":[true]}',
    b'{"syncStateSet":' + str(list(range(100))).encode() + b"}",
    b'{"syncStateSet":[1],"syncStateSetEpoch":"1"}',
])
def test_hostile_sync_state_set_bodies(body: bytes) -> None:
    with pytest.raises(ControllerBodyError):
        SyncStateSet.decode(body)


def test_epoch_cache_body_round_trip_and_order_check() -> None:
    cache = EpochEntryCache("c", G, 1, (EpochEntry(1, 0, 10), EpochEntry(2, 10, 30)), 30)
    assert EpochEntryCache.decode(cache.encode()) == cache
    bad = EpochEntryCache("c", G, 1, (EpochEntry(2, 0, 10), EpochEntry(1, 10, 30)), 30)
    with pytest.raises(ControllerBodyError):
        EpochEntryCache.decode(bad.encode())
