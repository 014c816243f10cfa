"""core: vote checks and result codes, pre-vote, lease, proposals, Ready ordering contract."""

from __future__ import annotations

import random

from rmq_cluster.dledger.core import CoreConfig, DLedgerCore, Role
from rmq_cluster.dledger.log_storage import HardState, MemoryLogStorage
from rmq_cluster.dledger.messages import (
    Entry,
    HeartBeatRequest,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    VoteResult,
)

PEERS = ("n0", "n1", "n2")


def make(self_id: str = "n0", *, log: list[Entry] | None = None, hs: HardState | None = None,
         peers: tuple[str, ...] = PEERS) -> DLedgerCore:
    st = MemoryLogStorage()
    if log:
        st.append(log)
        st.sync()
    if hs:
        st.save_hard_state(hs)
    cfg = CoreConfig("g", self_id, peers, heartbeat_interval=2, election_timeout=10,
                     vote_jitter_min=0, vote_jitter_max=5)
    return DLedgerCore(cfg, st, random.Random(1))


def vote(core: DLedgerCore, frm: str, term: int, end: int, end_term: int, *,
         pre: bool = False) -> VoteResult:
    core.step(VoteRequest("g", frm, core.id, frm, term, end, end_term, pre_vote=pre))
    rd = core.ready()
    core.advance(rd)
    resps = [m for m in rd.messages if isinstance(m, VoteResponse)]
    assert len(resps) == 1
    return resps[0].vote_result


def test_boots_as_candidate_with_persisted_term() -> None:
    c = make(hs=HardState(4, "n1"))
    assert c.role is Role.CANDIDATE and c.term == 4 and c.vote == "n1"


def test_voter_checks() -> None:
    log = [Entry(0, 1, b"a"), Entry(1, 2, b"b")]
    c = make(log=log, hs=HardState(2, ""))
    assert vote(c, "n9", 3, 1, 2) is VoteResult.REJECT_UNKNOWN_LEADER
    assert vote(c, "n0", 3, 1, 2) is VoteResult.REJECT_UNEXPECTED_LEADER
    assert vote(c, "n1", 1, 5, 2) is VoteResult.REJECT_EXPIRED_VOTE_TERM
    assert vote(c, "n1", 3, 9, 1) is VoteResult.REJECT_EXPIRED_LEDGER_TERM
    assert c.term == 3  # a higher-term real vote is adopted even when refused
    assert vote(c, "n1", 3, 0, 2) is VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    assert vote(c, "n1", 3, 1, 2) is VoteResult.ACCEPT
    assert c.vote == "n1"
    assert vote(c, "n2", 3, 5, 2) is VoteResult.REJECT_ALREADY_VOTED
    assert vote(c, "n1", 3, 1, 2) is VoteResult.ACCEPT  # a repeated request is fine


def test_vote_is_in_the_ready_that_carries_the_grant() -> None:
    c = make()
    c.step(VoteRequest("g", "n1", "n0", "n1", 1, -1, 0))
    rd = c.ready()
    assert rd.hard_state == HardState(1, "n1")
    assert any(isinstance(m, VoteResponse) for m in rd.messages)


def test_pre_vote_changes_nothing() -> None:
    c = make(hs=HardState(2, "n0"))
    assert vote(c, "n1", 3, -1, 0, pre=True) is VoteResult.ACCEPT
    assert (c.term, c.vote) == (2, "n0")
    assert vote(c, "n1", 2, -1, 0, pre=True) is VoteResult.REJECT_EXPIRED_VOTE_TERM


def test_follower_in_lease_refuses() -> None:
    c = make()
    c.step(HeartBeatRequest("g", "n1", "n0", "n1", 1))
    c.advance(c.ready())
    assert c.role is Role.FOLLOWER and c.leader_id == "n1"
    assert vote(c, "n2", 2, 9, 9, pre=True) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert vote(c, "n2", 2, 9, 9) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert c.term == 1
    for _ in range(10):
        c.tick()
    assert vote(c, "n2", 2, 9, 9, pre=True) is VoteResult.ACCEPT


def elect(c: DLedgerCore) -> None:
    c.campaign()
    for peer in ("n1", "n2"):
        c.step(VoteResponse("g", peer, "n0", "", c.term + 1, VoteResult.ACCEPT, pre_vote=True))
    assert c.term == 1 and not c.pre_voting
    c.step(VoteResponse("g", "n1", "n0", "", 1, VoteResult.ACCEPT))
    assert c.role is Role.LEADER


def test_propose_codes_and_commit_rule() -> None:
    f = make("n1")
    assert f.propose(b"x").code is ResponseCode.NOT_LEADER
    c = make()
    elect(c)
    res = c.propose(b"x")
    assert (res.code, res.index, res.term) == (ResponseCode.SUCCESS, 1, 1)
    rd = c.ready()
    assert rd.must_sync and [e.body for e in rd.entries] == [b"", b"x"]
    pushes = [m for m in rd.messages if isinstance(m, PushEntryRequest)]
    assert {m.remote_id for m in pushes} == {"n1", "n2"}
    c.advance(rd)
    c.step(PushEntryResponse("g", "n1", "n0", "n0", 1, ResponseCode.SUCCESS, 1))
    assert c.commit == 1
    rd = c.ready()
    assert [e.body for e in rd.committed_entries] == [b"", b"x"]


def test_follower_truncates_conflicting_tail_only() -> None:
    log = [Entry(0, 1, b"a"), Entry(1, 1, b"b"), Entry(2, 1, b"c")]
    c = make("n1", log=log, hs=HardState(1, ""))
    # a stale (reordered) push that matches must not cut anything
    c.step(PushEntryRequest("g", "n0", "n1", "n0", 2, PushType.APPEND, 0, 1, -1,
                            (Entry(1, 1, b"b"),)))
    assert c.storage.last_index() == 2
    c.advance(c.ready())
    c.step(PushEntryRequest("g", "n0", "n1", "n0", 2, PushType.APPEND, 0, 1, 0,
                            (Entry(1, 2, b"B"),)))
    assert [e.body for e in c.storage.entries(0, 9)] == [b"a", b"B"]
    rd = c.ready()
    assert rd.must_sync
    resp = next(m for m in rd.messages if isinstance(m, PushEntryResponse))
    assert (resp.code, resp.index) == (ResponseCode.SUCCESS, 1)
    assert rd.commit_index == 0


def test_push_with_missing_prev_is_inconsistent() -> None:
    c = make("n1")
    c.step(PushEntryRequest("g", "n0", "n1", "n0", 1, PushType.APPEND, 4, 1, -1,
                            (Entry(5, 1, b"x"),)))
    rd = c.ready()
    resp = next(m for m in rd.messages if isinstance(m, PushEntryResponse))
    assert resp.code is ResponseCode.INCONSISTENT_STATE and resp.end_index == -1


def test_leader_steps_down_without_quorum() -> None:
    c = make()
    elect(c)
    c.advance(c.ready())
    for _ in range(10):
        c.tick()
    assert c.role is Role.CANDIDATE and c.term == 1


def test_single_node_commits_alone() -> None:
    c = make(peers=("n0",))
    c.campaign()
    assert c.role is Role.LEADER
    c.propose(b"x")
    rd = c.ready()
    assert [e.body for e in rd.committed_entries] == [b"", b"x"]
