"""core: hostile messages never raise, never cut the committed log, never move the term.

The issue-31 frame: a forged APPEND whose entry contradicts a follower's committed entry made
the core raise ``AssertionError('... conflict at committed index 0')`` and the node exit.
Now such a push is dropped before anything changes (term, leader, log, commit), counted in
``rejected`` and described for the driver's log; a legitimate leader's push still works.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_cluster.dledger.core import MAX_TERM, CoreConfig, DLedgerCore, Role
from rmq_cluster.dledger.log_storage import HardState, MemoryLogStorage
from rmq_cluster.dledger.messages import (
    Entry,
    HeartBeatRequest,
    LeadershipTransferRequest,
    Message,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    VoteResult,
)

PEERS = ("n0", "n1", "n2")
LOG = [Entry(0, 1, b"a"), Entry(1, 1, b"b"), Entry(2, 2, b"c"), Entry(3, 2, b"d")]


def follower(commit: int = 2) -> DLedgerCore:
    """n1 following n0 in term 2, log LOG, committed up to ``commit``."""
    st_ = MemoryLogStorage()
    st_.append(LOG)
    st_.sync()
    st_.save_hard_state(HardState(2, "n0"))
    cfg = CoreConfig("g", "n1", PEERS, heartbeat_interval=2, election_timeout=10,
                     vote_jitter_min=0, vote_jitter_max=5)
    c = DLedgerCore(cfg, st_, random.Random(1), applied=commit)
    c.step(HeartBeatRequest("g", "n0", "n1", "n0", 2, commit))
    c.advance(c.ready())
    assert (c.role, c.leader_id, c.commit) == (Role.FOLLOWER, "n0", commit)
    return c


def snapshot(c: DLedgerCore) -> tuple[object, ...]:
    return (c.term, c.vote, c.role, c.leader_id, c.commit,
            [(e.index, e.term, e.body) for e in c.storage.entries(0, 99)])


def push(term: int, prev: int, prev_term: int, commit: int, *ents: Entry,
         frm: str = "n0") -> PushEntryRequest:
    return PushEntryRequest("g", frm, "n1", frm, term, PushType.APPEND, prev, prev_term,
                            commit, ents)


@pytest.mark.parametrize("term", [2, 3, 1000])
def test_push_conflicting_with_committed_entry_is_dropped(term: int) -> None:
    c = follower(commit=2)
    before = snapshot(c)
    # the frame: entry 0 in another term (committed here), and one at the commit index
    for bad in (push(term, -1, 0, 5, Entry(0, term, b"forged")),
                push(term, 1, 1, 5, Entry(2, 1, b"forged")),  # committed 2 is term 2
                push(term, 2, 1, 5, Entry(3, term, b"forged"))):  # prev (2, 1) is committed 2
        c.step(bad)
        assert snapshot(c) == before  # not even the term or the leader moved
        rd = c.ready()
        assert not rd.messages and not rd.must_sync and rd.hard_state is None
        c.advance(rd)
    assert c.rejected == 3
    notes = c.take_rejections()
    assert len(notes) == 3 and "committed index 0" in notes[0]
    assert c.take_rejections() == []


def test_uncommitted_conflict_is_still_truncated_and_leader_goes_on() -> None:
    c = follower(commit=2)
    # a new leader (term 3) overwrites the uncommitted entry 3: Raft as before
    c.step(push(3, 2, 2, 2, Entry(3, 3, b"D"), Entry(4, 3, b"E"), frm="n2"))
    rd = c.ready()
    (resp,) = [m for m in rd.messages if isinstance(m, PushEntryResponse)]
    assert (resp.code, resp.index) == (ResponseCode.SUCCESS, 4)
    assert [e.body for e in c.storage.entries(0, 9)] == [b"a", b"b", b"c", b"D", b"E"]
    assert (c.term, c.leader_id, c.rejected) == (3, "n2", 0)


IMPOSSIBLE: list[Message] = [
    push(2, -2, 0, 0),                                         # prev below -1
    push(2, -1, 1, 0, Entry(0, 1, b"x")),                      # prev -1 holds term 0
    push(2, 3, 2, -7),                                          # commit below -1
    push(2, 3, 5, 3),                                           # prev term above the push's
    push(2, 3, 2, 3, Entry(9, 2, b"x")),                        # not following prev
    push(2, 3, 2, 3, Entry(4, 2, b"x"), Entry(6, 2, b"y")),     # a gap
    push(2, 3, 2, 3, Entry(4, 7, b"x")),                        # entry term above the push's
    push(2, 3, 2, 3, Entry(4, 0, b"x")),                        # entry term 0
    push(3, 3, 2, 3, Entry(4, 3, b"x"), Entry(5, 2, b"y")),     # terms decreasing
    push(2, 3, 2, 3, Entry(4, 1, b"x")),                        # entry term below prev's
    PushEntryRequest("g", "n0", "n1", "n0", 2, PushType.COMMIT, 3, 2, 3, (Entry(4, 2, b"x"),)),
    push(MAX_TERM + 1, 3, 2, 3),                                # term past any long
    push(-1, 3, 2, 3),
    HeartBeatRequest("g", "n0", "n1", "n0", 1 << 64, 3),
    HeartBeatRequest("g", "n0", "n1", "n0", 2, -5),
    VoteRequest("g", "n2", "n1", "n2", 1 << 63, 3, 2),
    VoteRequest("g", "n2", "n1", "n2", 9, -4, 2),
    VoteRequest("g", "n2", "n1", "n2", 9, 3, -1),
    VoteResponse("g", "n2", "n1", "n2", -3, VoteResult.ACCEPT),
    LeadershipTransferRequest("g", "n0", "n1", "n0", MAX_TERM * 2, "n1", 0),
]


@pytest.mark.parametrize("msg", IMPOSSIBLE, ids=lambda m: type(m).__name__)
def test_impossible_messages_are_dropped_with_a_reason(msg: Message) -> None:
    c = follower()
    before = snapshot(c)
    c.step(msg)
    assert snapshot(c) == before
    assert c.rejected == 1 and c.take_rejections()
    assert not c.ready().messages


def test_leader_drops_acks_past_its_log() -> None:
    c = follower(commit=3)
    c.campaign(pre_vote=False)
    c.step(VoteResponse("g", "n0", "n1", "", c.term, VoteResult.ACCEPT))
    assert c.role is Role.LEADER
    c.advance(c.ready())
    last = c.storage.last_index()
    for code in (ResponseCode.SUCCESS, ResponseCode.INCONSISTENT_STATE):
        c.step(PushEntryResponse("g", "n2", "n1", "n1", c.term, code, 10**12, 0, 10**12))
    assert c.rejected == 2 and c.commit == 3 and c.storage.last_index() == last
    c.tick()
    c.advance(c.ready())  # nothing to send that would read past the log


ints = st.one_of(st.integers(-3, 8), st.integers(-(1 << 64), 1 << 64))
entries = st.lists(st.builds(Entry, ints, ints, st.binary(max_size=4)), max_size=5)
messages = st.one_of(
    st.builds(PushEntryRequest, st.just("g"), st.sampled_from(PEERS), st.just("n1"),
              st.sampled_from(PEERS), ints, st.sampled_from(PushType), ints, ints, ints,
              entries.map(tuple)),
    st.builds(PushEntryResponse, st.just("g"), st.sampled_from(PEERS), st.just("n1"),
              st.sampled_from(PEERS), ints, st.sampled_from(ResponseCode), ints, ints, ints),
    st.builds(HeartBeatRequest, st.just("g"), st.sampled_from(PEERS), st.just("n1"),
              st.sampled_from(PEERS), ints, ints),
    st.builds(VoteRequest, st.just("g"), st.sampled_from(PEERS), st.just("n1"),
              st.sampled_from(PEERS), ints, ints, ints, st.booleans(), st.booleans()),
    st.builds(VoteResponse, st.just("g"), st.sampled_from(PEERS), st.just("n1"),
              st.sampled_from(PEERS), ints, st.sampled_from(VoteResult), st.booleans()),
    st.builds(LeadershipTransferRequest, st.just("g"), st.sampled_from(PEERS), st.just("n1"),
              st.sampled_from(PEERS), ints, st.sampled_from(PEERS), ints),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(messages, st.booleans()), max_size=20))
def test_any_message_sequence_never_raises_nor_cuts_committed(
    seq: list[tuple[Message, bool]],
) -> None:
    c = follower(commit=2)
    committed = [(e.index, e.term, e.body) for e in c.storage.entries(0, 3)]
    for msg, tick in seq:
        c.step(msg)
        if tick:
            c.tick()
        c.advance(c.ready())
        assert [(e.index, e.term, e.body) for e in c.storage.entries(0, 3)] == committed
        assert 0 <= c.term <= MAX_TERM + 1
