"""The pure DLedger (Raft) core: a deterministic state machine in etcd-raft's shape.

No trio, no clocks, no threads.  Time moves only through :meth:`DLedgerCore.tick`; randomness
comes from the injected ``random.Random``; messages go in through :meth:`DLedgerCore.step` and
come out through :meth:`DLedgerCore.ready`.

Driver loop (``dledger/node.py`` or the simulation)::

    core.tick() every tick; core.step(msg) per received message; core.propose(body) per append
    if core.has_ready():
        rd = core.ready()
        if rd.must_sync: storage.sync()                     # 1. log durable  (before sending!)
        if rd.hard_state: storage.save_hard_state(...)      # 2. term/vote durable
        send(rd.messages)                                   # 3. only now talk to peers
        apply(rd.committed_entries)                         # 4. state machine (CommitLog)
        core.advance(rd)

The core writes entries into the :class:`~dledger.log_storage.LogStorage` itself (an mmap or
memory write); ``rd.entries`` lists what it wrote since the last Ready and ``rd.must_sync`` says
that appends or truncations are waiting for ``sync()``.  Everything a node says to a peer
(vote grants, acks) is in ``rd.messages``, so persisting before sending makes every promise
durable.  A crash before step 1/2 loses only things nobody was told about.

Roles and election (DLedger's CANDIDATE / LEADER / FOLLOWER):
- A node boots as CANDIDATE.  A follower or candidate whose election timer (``election_timeout``
  plus a random ``vote_jitter`` in ticks, re-drawn each time) runs out starts a **pre-vote**:
  VoteRequest(pre_vote=True, term = currTerm + 1) changes nobody's state.  Only with a quorum of
  pre-vote ACCEPTs does it bump the term, vote for itself, persist, and send real VoteRequests.
- Voters answer with DLedger's ``VoteResult`` codes, checking in order: unknown member
  (REJECT_UNKNOWN_LEADER), request from itself (REJECT_UNEXPECTED_LEADER), older term
  (REJECT_EXPIRED_VOTE_TERM), **leader lease** — a leader, or a follower that heard from its
  leader within ``election_timeout`` ticks, refuses with REJECT_ALREADY_HAS_LEADER unless the
  request is a leadership transfer — then (real votes only) a higher term is adopted, then the
  log check (REJECT_EXPIRED_LEDGER_TERM / REJECT_SMALL_LEDGER_END_INDEX), a transferee refusing
  an equal rival (REJECT_TAKING_LEADERSHIP), one vote per term (REJECT_ALREADY_VOTED), ACCEPT.
  Deviation from DLedger: a higher-term real vote is not answered REJECT_TERM_NOT_READY; the
  pre-vote round already plays that part, so the voter adopts the term and decides at once.
- Pre-vote + lease mean a partitioned node that rejoins cannot disrupt a healthy leader.
  **Check quorum:** a leader that has not heard from a quorum within ``election_timeout`` ticks
  steps down to CANDIDATE (DLedger: "6 s without quorum heartbeat successes").
- The leader sends HeartBeat every ``heartbeat_interval`` ticks; it carries
  min(committedIndex, the peer's acknowledged index).

Replication — Raft AppendEntries semantics carried in DLedger's push messages:
- Each push has ``prev_index/prev_term``; the follower accepts it only if its log holds
  ``prev_index`` with ``prev_term`` (else INCONSISTENT_STATE with its end index as a hint).
  ``COMPARE`` = a probe with no entries, ``APPEND`` = entries, ``COMMIT`` = an entry-less push
  carrying the commit index for a prefix the peer already acknowledged.  A follower truncates
  its tail only where an APPEND entry conflicts (same index, different term) — that is the
  TRUNCATE step, done at the follower, so a delayed or duplicated push can never cut entries it
  already matched.  The leader never sends TRUNCATE pushes (answered UNSUPPORTED).
  Why not DLedger's leader-driven COMPARE→TRUNCATE: a stand-alone TRUNCATE that cuts "everything
  after X" is unsafe under reordering unless the transport is FIFO per term; prev-checked appends
  are safe on any network, which the simulation exercises (drops, duplicates, reordering).
- Per peer the leader keeps a progress record: PROBE (one outstanding push, back off using the
  follower's end hint) or REPLICATE (pipelined, up to ``max_inflight_pushes`` pushes of up to
  ``max_batch_push_bytes``).  A peer that made no progress for a heartbeat interval falls back to
  PROBE from its acknowledged index (DLedger's 1 s resend).
- Commit: sort the match indexes (the leader's own end included) descending, take element
  [quorum - 1]; it commits only if that entry is from the current term (Raft's rule).  A new
  leader therefore appends a **no-op entry** (empty body) at once; the CommitLog adapter skips
  empty bodies.
- Leadership transfer (DLedger's preferred leader): ``transfer_leadership(peer)`` stops accepting
  proposals (LEADER_TRANSFERRING), brings the peer up to date, then sends it a
  LeadershipTransferRequest; the peer campaigns at once in term + 1 with ``take_leadership``
  (bypassing the lease).  Aborted after ``leadership_transfer_timeout`` ticks.  With
  ``preferred_leader_id`` set, a leader checks every ``preferred_check_interval`` ticks and
  transfers to the preferred peer when it is active and less than
  ``max_leadership_transfer_wait_index`` entries behind.

Retention (``storage.first_index()`` > 0 once old data files were deleted, always below this
node's applied index): a follower treats a push whose ``prev_index`` lies below its first held
entry as matching (that prefix was committed here, hence equal to every later leader's) and
skips entries it no longer holds; a leader cannot serve a peer that needs entries it deleted
(no snapshots, as DLedger without them): it keeps heartbeating that peer, sends it no pushes and
lists it in ``behind_first_index``.

Hostile input (every message may come from anyone who reaches the port): :meth:`step` checks a
message in full before it changes anything (:func:`impossible`): a term outside
``[0, MAX_TERM]``, an index below -1, a push whose entries do not follow ``prev_index`` one by
one, whose terms decrease, exceed the push's term or precede ``prev_term``, an entry-carrying
COMMIT/COMPARE, a response acknowledging an index past this leader's log: no correct peer sends
those, so they are dropped, counted in ``rejected`` and described in ``rejections`` (the driver
logs them).  A push that contradicts this node's **committed** log (a different term at or
below the commit index, prev included) cannot come from a legitimate leader either (Leader
Completeness): it is dropped the same way, before its term is adopted, and nothing is answered.
A follower whose storage refuses an append (an entry larger than a data file, a full disk)
drops that push and answers nothing; the leader resends.

Not here: snapshots, membership changes.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Sequence

import attrs

from .log_storage import HardState, LogStorage, StorageError
from .messages import (
    Entry,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    Message,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    VoteResult,
    make_entry,
)

# Defaults for a 100 ms tick, from DLedgerConfig (heartBeatTimeIntervalMs 2000,
# maxHeartBeatLeak 3, vote interval 300-1000 ms, leadershipTransferWaitTimeout 1000 ms, ...).
DEFAULT_TICK_MS = 100
HEARTBEAT_INTERVAL_TICKS = 20
ELECTION_TIMEOUT_TICKS = 60
VOTE_JITTER_MIN_TICKS = 3
VOTE_JITTER_MAX_TICKS = 10
MAX_INFLIGHT_PUSHES_PER_PEER = 1000
MAX_BATCH_PUSH_BYTES = 4 * 1024
MAX_PENDING_REQUESTS = 10_000
MAX_LEADERSHIP_TRANSFER_WAIT_INDEX = 1000
LEADERSHIP_TRANSFER_TIMEOUT_TICKS = 10
PREFERRED_CHECK_INTERVAL_TICKS = 10
MAX_APPLY_BATCH_ENTRIES = 4096
MAX_TERM = 1 << 62
"""Terms above this are refused as impossible: DLedger stores terms as Java longs, and a term
anywhere near 2**63 would make the next election's term + 1 unrepresentable."""
MAX_REJECTION_NOTES = 64
"""Descriptions of refused messages kept until the driver takes them (the count goes on)."""
NO_VOTE = ""
NO_LEADER = ""


class Role(enum.Enum):
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    FOLLOWER = "FOLLOWER"


@attrs.frozen
class CoreConfig:
    group: str
    self_id: str
    peers: tuple[str, ...]
    """Every member id, this node's included."""
    preferred_leader_id: str = ""
    heartbeat_interval: int = HEARTBEAT_INTERVAL_TICKS
    election_timeout: int = ELECTION_TIMEOUT_TICKS
    vote_jitter_min: int = VOTE_JITTER_MIN_TICKS
    vote_jitter_max: int = VOTE_JITTER_MAX_TICKS
    max_inflight_pushes: int = MAX_INFLIGHT_PUSHES_PER_PEER
    max_batch_push_bytes: int = MAX_BATCH_PUSH_BYTES
    max_pending_requests: int = MAX_PENDING_REQUESTS
    max_leadership_transfer_wait_index: int = MAX_LEADERSHIP_TRANSFER_WAIT_INDEX
    leadership_transfer_timeout: int = LEADERSHIP_TRANSFER_TIMEOUT_TICKS
    preferred_check_interval: int = PREFERRED_CHECK_INTERVAL_TICKS
    max_apply_batch: int = MAX_APPLY_BATCH_ENTRIES

    def __attrs_post_init__(self) -> None:
        if self.self_id not in self.peers:
            raise ValueError(f"self_id {self.self_id!r} not in peers {self.peers!r}")
        if len(set(self.peers)) != len(self.peers):
            raise ValueError("duplicate peer ids")
        if not 0 < self.heartbeat_interval < self.election_timeout:
            raise ValueError("need 0 < heartbeat_interval < election_timeout")
        if not 0 <= self.vote_jitter_min < self.vote_jitter_max:
            raise ValueError("need 0 <= vote_jitter_min < vote_jitter_max")


@attrs.frozen
class Ready:
    """One batch of work for the driver: persist, then send, then apply, then advance().

    The entries are named by index ranges (``[lo, hi)``) over the storage rather than listed:
    the per-message paths of a broker never build an Entry object for them.  ``entries`` and
    ``committed_entries`` read them from the storage on demand; committed entries never change,
    ``entries`` (written since the last Ready) must be read before the next step/propose."""

    hard_state: HardState | None
    unsynced: tuple[int, int]
    """[lo, hi): entries written (appended or overwritten) since the last Ready."""
    must_sync: bool
    messages: tuple[Message, ...]
    committed: tuple[int, int]
    """[lo, hi): committed entries to apply, in order."""
    role: Role
    leader_id: str
    term: int
    commit_index: int
    storage: LogStorage = attrs.field(repr=False, eq=False)

    @property
    def entries(self) -> tuple[Entry, ...]:
        lo, hi = self.unsynced
        return tuple(self.storage.entries(lo, hi)) if lo < hi else ()

    @property
    def committed_entries(self) -> tuple[Entry, ...]:
        lo, hi = self.committed
        return tuple(self.storage.entries(lo, hi)) if lo < hi else ()


@attrs.frozen
class ProposeResult:
    code: ResponseCode
    index: int = -1
    term: int = 0


class _Progress:
    __slots__ = ("active", "heard", "inflight", "match", "next", "probe_sent", "progressed",
                 "replicate", "sent_commit")

    def __init__(self, next_index: int) -> None:
        self.match = -1
        self.next = next_index
        self.replicate = False
        self.probe_sent = False
        self.inflight: deque[int] = deque()
        self.active = False  # heard from since the last check-quorum round
        self.heard = False  # heard from since the last preferred-leader check
        self.progressed = False
        self.sent_commit = -1

    def to_probe(self, next_index: int) -> None:
        self.replicate = False
        self.probe_sent = False
        self.next = max(next_index, self.match + 1)
        self.inflight.clear()


class DLedgerCore:
    def __init__(
        self,
        config: CoreConfig,
        storage: LogStorage,
        rng: random.Random,
        *,
        applied: int = -1,
    ) -> None:
        self.cfg = config
        self.id = config.self_id
        self.others = tuple(p for p in config.peers if p != config.self_id)
        self.quorum = len(config.peers) // 2 + 1
        self.storage = storage
        self.rng = rng
        hs = storage.load_hard_state()
        self.term = hs.term
        self.vote = hs.vote
        self._persisted_hs = hs
        self.role = Role.CANDIDATE
        self.leader_id = NO_LEADER
        self.commit = min(applied, storage.last_index())
        self.applied = applied
        self.election_elapsed = 0
        self.randomized_timeout = 0
        self._reset_election_timer()
        self.heartbeat_elapsed = 0
        self.check_quorum_elapsed = 0
        self.preferred_elapsed = 0
        self.pre_voting = False
        self.taking_leadership = False
        self.votes: dict[str, bool] = {}
        self.progress: dict[str, _Progress] = {}
        self.transferee = ""
        self.transfer_elapsed = 0
        self.transfer_sent = False
        self._outbox: list[Message] = []
        self._unsynced_lo = -1  # first index written since the last Ready (-1: none)
        # FileLogStorage.append_one: the leader's per-message append without an Entry object
        self._append_one = getattr(storage, "append_one", None)
        self._must_sync = False
        self._want_send: set[str] = set()
        self._ready_pending = False
        #: peers that need entries this leader's retention deleted (they cannot catch up)
        self.behind_first_index: set[str] = set()
        #: messages dropped as impossible or contradicting the committed log (never reset)
        self.rejected = 0
        self._rejections: list[str] = []

    # ------------------------------------------------------------------ public API
    def tick(self) -> None:
        """Advance logical time by one tick."""
        if self.role is Role.LEADER:
            self._tick_leader()
            return
        self.election_elapsed += 1
        if self.election_elapsed >= self.randomized_timeout:
            self.campaign()

    def propose(self, body: bytes) -> ProposeResult:
        """Append ``body`` as a new entry (leader only).  It is committed once an entry with
        this (index, term) appears in ``committed_entries``; another term there = TERM_CHANGED."""
        index = self.propose_index(body)
        if index < 0:
            return ProposeResult(ResponseCode(-index))
        return ProposeResult(ResponseCode.SUCCESS, index, self.term)

    def propose_index(self, body: bytes) -> int:
        """:meth:`propose` without a result object (the per-message path): the new entry's
        index (its term is ``self.term``), or ``-code`` (a :class:`ResponseCode`) if refused."""
        if self.role is not Role.LEADER:
            return -ResponseCode.NOT_LEADER
        if self.transferee:
            return -ResponseCode.LEADER_TRANSFERRING
        index = self.storage.last_index() + 1
        if index - 1 - self.commit >= self.cfg.max_pending_requests:
            return -ResponseCode.LEADER_PENDING_FULL
        append_one = self._append_one
        if append_one is None or not append_one(index, self.term, body):
            self.storage.append((make_entry(index, self.term, body),))
        if self._unsynced_lo < 0:
            self._unsynced_lo = index
        self._must_sync = True
        if self.others:
            self._want_send.update(self.others)
        else:
            self._maybe_commit()
        return index

    def campaign(self, *, pre_vote: bool = True, take_leadership: bool = False) -> None:
        """Start an election now (the timer calls this; tests and transfers may too)."""
        self.role = Role.CANDIDATE
        self.leader_id = NO_LEADER
        self.progress.clear()
        self.transferee = ""
        self._reset_election_timer()
        self.taking_leadership = take_leadership
        self.pre_voting = pre_vote
        if pre_vote:
            cterm = self.term + 1
        else:
            self.term += 1
            self.vote = self.id
            cterm = self.term
        self.votes = {self.id: True}
        if self._granted() >= self.quorum:
            self._on_campaign_won()
            return
        last = self.storage.last_index()
        last_term = self.storage.last_term()
        for peer in self.others:
            self._send(
                VoteRequest(
                    self.cfg.group, self.id, peer, self.id, cterm, last, last_term,
                    pre_vote=pre_vote, take_leadership=take_leadership,
                )
            )

    def transfer_leadership(self, transferee: str) -> ResponseCode:
        """Hand leadership to ``transferee`` once it has caught up (DLedger's preferred leader)."""
        if self.role is not Role.LEADER:
            return ResponseCode.NOT_LEADER
        if transferee not in self.others:
            return ResponseCode.UNKNOWN_MEMBER
        if self.transferee:
            return ResponseCode.LEADER_TRANSFERRING
        self.transferee = transferee
        self.transfer_elapsed = 0
        self.transfer_sent = False
        self._maybe_send_transfer()
        self._want_send.add(transferee)
        return ResponseCode.SUCCESS

    def step(self, msg: Message) -> None:
        """Feed one message received from a peer (anything: impossible ones are dropped)."""
        if msg.group != self.cfg.group or msg.remote_id != self.id:
            return
        reason = impossible(msg) or self._contradiction(msg)
        if reason:
            self._reject(msg, reason)
            return
        if isinstance(msg, VoteRequest):
            self._on_vote_request(msg)
            return
        if msg.local_id not in self.others:
            return
        if isinstance(msg, VoteResponse):
            self._on_vote_response(msg)
        elif isinstance(msg, PushEntryRequest | HeartBeatRequest | LeadershipTransferRequest):
            self._on_leader_message(msg)
        elif isinstance(msg, PushEntryResponse | HeartBeatResponse):
            if msg.term > self.term:
                self._become_follower(msg.term, NO_LEADER)
                return
            if msg.term < self.term or self.role is not Role.LEADER:
                return
            pr = self.progress[msg.local_id]
            pr.active = pr.heard = True
            if isinstance(msg, PushEntryResponse):
                self._on_push_response(msg, pr)

    def take_rejections(self) -> list[str]:
        """Descriptions of the messages dropped since the last call (for the driver's log)."""
        notes, self._rejections = self._rejections, []
        return notes

    def has_ready(self) -> bool:
        return bool(
            self._outbox
            or self._want_send
            or self._must_sync
            or self.applied < self.commit
            or self.term != self._persisted_hs.term
            or self.vote != self._persisted_hs.vote
            or self._commit_to_send()
        )

    def ready(self) -> Ready:
        """Collect the pending work.  Call :meth:`advance` with it before the next ready()."""
        if self._ready_pending:
            raise RuntimeError("ready() called again before advance()")
        if self.role is Role.LEADER:
            for peer in sorted(self._want_send):
                self._send_append(peer)
            self._send_commits()
        self._want_send.clear()
        hs_out = None
        persisted = self._persisted_hs
        if self.term != persisted.term or self.vote != persisted.vote:
            hs_out = self._persisted_hs = self._hard_state()
        committed = (0, 0)
        if self.applied < self.commit:
            hi = min(self.commit, self.applied + self.cfg.max_apply_batch) + 1
            committed = (self.applied + 1, hi)
        lo = self._unsynced_lo
        rd = Ready(
            hard_state=hs_out,
            unsynced=(lo, self.storage.last_index() + 1) if lo >= 0 else (0, 0),
            must_sync=self._must_sync,
            messages=tuple(self._outbox),
            committed=committed,
            role=self.role,
            leader_id=self.leader_id,
            term=self.term,
            commit_index=self.commit,
            storage=self.storage,
        )
        self._outbox = []
        self._unsynced_lo = -1
        self._must_sync = False
        self._ready_pending = True
        return rd

    def advance(self, rd: Ready) -> None:
        """The driver persisted, sent and applied ``rd``."""
        self._ready_pending = False
        lo, hi = rd.committed
        if lo < hi:
            self.applied = max(self.applied, hi - 1)

    # ------------------------------------------------------------------ internals
    def _reject(self, msg: Message, reason: str) -> None:
        self.rejected += 1
        if len(self._rejections) < MAX_REJECTION_NOTES:
            self._rejections.append(
                f"{type(msg).__name__} from {msg.local_id!r} term {msg.term}: {reason}"
            )

    def _contradiction(self, msg: Message) -> str:
        """Why ``msg`` (well-formed) cannot be from a legitimate peer given this node's own
        state, or ''.  A push that disagrees with the committed log; a response that
        acknowledges more than this leader holds."""
        if isinstance(msg, PushEntryRequest):
            return self._contradicts_committed(msg)
        if (
            isinstance(msg, PushEntryResponse)
            and msg.term == self.term
            and self.role is Role.LEADER
            and msg.index > self.storage.last_index()
        ):
            return f"acknowledges index {msg.index} past this leader's end"
        return ""

    def _contradicts_committed(self, req: PushEntryRequest) -> str:
        if req.term < self.term:
            return ""  # answered EXPIRED_TERM, changes nothing
        top = min(self.commit, self.storage.last_index())
        lo = self.storage.first_index() - 1
        prev = req.prev_index
        if lo <= prev <= top and prev >= 0 and self.storage.term_at(prev) != req.prev_term:
            return f"prev ({prev}, term {req.prev_term}) contradicts committed index {prev}"
        for e in req.entries:
            if e.index > top:
                break
            if e.index > lo and self.storage.term_at(e.index) != e.term:
                return (f"entry ({e.index}, term {e.term}) conflicts with committed index "
                        f"{e.index} (term {self.storage.term_at(e.index)}, commit {self.commit})")
        return ""

    def _hard_state(self) -> HardState:
        return HardState(self.term, self.vote)

    def _send(self, msg: Message) -> None:
        self._outbox.append(msg)

    def _reset_election_timer(self) -> None:
        self.election_elapsed = 0
        self.randomized_timeout = self.cfg.election_timeout + self.rng.randrange(
            self.cfg.vote_jitter_min, self.cfg.vote_jitter_max
        )

    def _append(self, entries: Sequence[Entry]) -> None:
        self.storage.append(entries)
        if entries and (self._unsynced_lo < 0 or entries[0].index < self._unsynced_lo):
            self._unsynced_lo = entries[0].index
        self._must_sync = True

    def _in_lease(self) -> bool:
        if self.role is Role.LEADER:
            return True
        return (
            self.role is Role.FOLLOWER
            and self.leader_id != NO_LEADER
            and self.election_elapsed < self.cfg.election_timeout
        )

    def _become_follower(self, term: int, leader: str) -> None:
        if term > self.term:
            self.term = term
            self.vote = NO_VOTE
        self.role = Role.FOLLOWER
        self.leader_id = leader
        self.progress.clear()
        self.transferee = ""
        self.pre_voting = False
        self.taking_leadership = False
        self.votes = {}
        self._want_send.clear()
        self._reset_election_timer()

    # -- election
    def _granted(self) -> int:
        return sum(1 for ok in self.votes.values() if ok)

    def _on_campaign_won(self) -> None:
        if self.pre_voting:
            self.campaign(pre_vote=False, take_leadership=self.taking_leadership)
        else:
            self._become_leader()

    def _on_vote_request(self, req: VoteRequest) -> None:
        result = self._vote_decision(req)
        term = req.term if (req.pre_vote and result is VoteResult.ACCEPT) else self.term
        self._send(
            VoteResponse(
                req.group, self.id, req.local_id, self.leader_id, term, result,
                pre_vote=req.pre_vote,
            )
        )

    def _vote_decision(self, req: VoteRequest) -> VoteResult:
        cand = req.local_id
        if cand not in self.cfg.peers or req.leader_id != cand:
            return VoteResult.REJECT_UNKNOWN_LEADER
        if cand == self.id:
            return VoteResult.REJECT_UNEXPECTED_LEADER
        if req.term < self.term or (req.pre_vote and req.term == self.term):
            return VoteResult.REJECT_EXPIRED_VOTE_TERM
        if not req.take_leadership and self._in_lease() and self.leader_id != cand:
            return VoteResult.REJECT_ALREADY_HAS_LEADER
        if not req.pre_vote and req.term > self.term:
            self._become_follower(req.term, NO_LEADER)
        my_last_term = self.storage.last_term()
        my_last = self.storage.last_index()
        if req.ledger_end_term < my_last_term:
            return VoteResult.REJECT_EXPIRED_LEDGER_TERM
        if req.ledger_end_term == my_last_term and req.ledger_end_index < my_last:
            return VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        if (
            self.taking_leadership
            and self.role is Role.CANDIDATE
            and not req.take_leadership
            and req.ledger_end_term == my_last_term
            and req.ledger_end_index == my_last
        ):
            return VoteResult.REJECT_TAKING_LEADERSHIP
        if req.pre_vote:
            return VoteResult.ACCEPT
        if self.vote not in (NO_VOTE, cand):
            if self.leader_id != NO_LEADER:
                return VoteResult.REJECT_ALREADY_HAS_LEADER
            return VoteResult.REJECT_ALREADY_VOTED
        self.vote = cand
        self._reset_election_timer()
        return VoteResult.ACCEPT

    def _on_vote_response(self, resp: VoteResponse) -> None:
        accepted = resp.vote_result is VoteResult.ACCEPT
        if resp.term > self.term and not (resp.pre_vote and accepted):
            self._become_follower(resp.term, NO_LEADER)
            return
        if self.role is not Role.CANDIDATE or resp.pre_vote != self.pre_voting:
            return
        expected = self.term + 1 if self.pre_voting else self.term
        if accepted and resp.term != expected:
            return
        self.votes[resp.local_id] = accepted
        if accepted and self._granted() >= self.quorum:
            self._on_campaign_won()

    def _become_leader(self) -> None:
        self.role = Role.LEADER
        self.leader_id = self.id
        self.pre_voting = False
        self.taking_leadership = False
        self.votes = {}
        self.heartbeat_elapsed = 0
        self.check_quorum_elapsed = 0
        self.preferred_elapsed = 0
        last = self.storage.last_index()
        self.progress = {p: _Progress(last + 1) for p in self.others}
        self._append([Entry(last + 1, self.term, b"")])
        self._want_send.update(self.others)
        self._maybe_commit()

    # -- leader
    def _tick_leader(self) -> None:
        self.heartbeat_elapsed += 1
        self.check_quorum_elapsed += 1
        if self.transferee:
            self.transfer_elapsed += 1
            if self.transfer_elapsed > self.cfg.leadership_transfer_timeout:
                self.transferee = ""
        if self.check_quorum_elapsed >= self.cfg.election_timeout:
            self.check_quorum_elapsed = 0
            active = 1 + sum(1 for pr in self.progress.values() if pr.active)
            for pr in self.progress.values():
                pr.active = False
            if active < self.quorum:
                self.role = Role.CANDIDATE
                self.leader_id = NO_LEADER
                self.progress.clear()
                self.transferee = ""
                self._want_send.clear()
                self._reset_election_timer()
                return
        if self.heartbeat_elapsed >= self.cfg.heartbeat_interval:
            self.heartbeat_elapsed = 0
            last = self.storage.last_index()
            for peer, pr in self.progress.items():
                self._send(
                    HeartBeatRequest(
                        self.cfg.group, self.id, peer, self.id, self.term,
                        min(self.commit, pr.match),
                    )
                )
                if not pr.replicate:
                    pr.probe_sent = False
                    self._want_send.add(peer)
                elif pr.match < last and not pr.progressed:
                    pr.to_probe(pr.match + 1)
                    self._want_send.add(peer)
                pr.progressed = False
        pref = self.cfg.preferred_leader_id
        if pref and pref != self.id and pref in self.progress and not self.transferee:
            self.preferred_elapsed += 1
            if self.preferred_elapsed >= self.cfg.preferred_check_interval:
                self.preferred_elapsed = 0
                pr = self.progress[pref]
                lag = self.storage.last_index() - pr.match
                live, pr.heard = pr.heard, False
                if live and pr.match >= 0 and lag < self.cfg.max_leadership_transfer_wait_index:
                    self.transfer_leadership(pref)

    def _send_append(self, peer: str) -> None:
        pr = self.progress[peer]
        last = self.storage.last_index()
        if pr.next < self.storage.first_index() and pr.next <= last:
            self.behind_first_index.add(peer)  # its next entries are gone here
            return
        self.behind_first_index.discard(peer)
        if not pr.replicate:
            if pr.probe_sent:
                return
            pr.probe_sent = True
            self._push(peer, pr, pr.next, last)
            return
        while len(pr.inflight) < self.cfg.max_inflight_pushes and pr.next <= last:
            sent_to = self._push(peer, pr, pr.next, last)
            pr.inflight.append(sent_to)
            pr.next = sent_to + 1

    def _push(self, peer: str, pr: _Progress, start: int, last: int) -> int:
        ents = self.storage.entries(start, last + 1, self.cfg.max_batch_push_bytes)
        prev = start - 1
        end = prev + len(ents)
        commit = min(self.commit, end)
        pr.sent_commit = max(pr.sent_commit, commit)
        self._send(
            PushEntryRequest(
                self.cfg.group, self.id, peer, self.id, self.term,
                PushType.APPEND if ents else PushType.COMPARE,
                prev, self.storage.term_at(prev), commit, tuple(ents),
            )
        )
        return end

    def _commit_to_send(self) -> bool:
        if self.role is not Role.LEADER:
            return False
        return any(min(self.commit, pr.match) > pr.sent_commit for pr in self.progress.values())

    def _send_commits(self) -> None:
        for peer, pr in self.progress.items():
            commit = min(self.commit, pr.match)
            if commit > pr.sent_commit:
                pr.sent_commit = commit
                self._send(
                    PushEntryRequest(
                        self.cfg.group, self.id, peer, self.id, self.term, PushType.COMMIT,
                        pr.match, self.storage.term_at(pr.match), commit,
                    )
                )

    def _on_push_response(self, resp: PushEntryResponse, pr: _Progress) -> None:
        if resp.code is ResponseCode.SUCCESS:
            if resp.index > pr.match:
                pr.match = resp.index
                pr.progressed = True
            if not pr.replicate:
                pr.replicate = True
                pr.next = pr.match + 1
                pr.inflight.clear()
            else:
                pr.next = max(pr.next, pr.match + 1)
                while pr.inflight and pr.inflight[0] <= pr.match:
                    pr.inflight.popleft()
            self._maybe_commit()
            self._maybe_send_transfer()
            self._want_send.add(resp.local_id)
        elif resp.code is ResponseCode.INCONSISTENT_STATE:
            rejected = resp.index
            if rejected <= pr.match:
                return  # stale
            if pr.replicate or rejected == pr.next - 1:
                pr.to_probe(min(rejected, resp.end_index + 1))
                self._want_send.add(resp.local_id)

    def _maybe_commit(self) -> None:
        matches = sorted(
            [self.storage.last_index(), *(pr.match for pr in self.progress.values())],
            reverse=True,
        )
        n = matches[self.quorum - 1]
        if n > self.commit and self.storage.term_at(n) == self.term:
            self.commit = n

    def _maybe_send_transfer(self) -> None:
        if not self.transferee or self.transfer_sent:
            return
        pr = self.progress[self.transferee]
        last = self.storage.last_index()
        if pr.match == last:
            self.transfer_sent = True
            self._send(
                LeadershipTransferRequest(
                    self.cfg.group, self.id, self.transferee, self.id, self.term,
                    self.transferee, last,
                )
            )

    # -- follower
    def _on_leader_message(
        self, msg: PushEntryRequest | HeartBeatRequest | LeadershipTransferRequest
    ) -> None:
        if msg.term < self.term:
            if isinstance(msg, PushEntryRequest):
                self._send(
                    PushEntryResponse(
                        msg.group, self.id, msg.local_id, self.leader_id, self.term,
                        ResponseCode.EXPIRED_TERM, msg.prev_index,
                        0, self.storage.last_index(),
                    )
                )
            elif isinstance(msg, HeartBeatRequest):
                self._send(
                    HeartBeatResponse(
                        msg.group, self.id, msg.local_id, self.leader_id, self.term,
                        ResponseCode.EXPIRED_TERM,
                    )
                )
            return
        if msg.leader_id != msg.local_id:
            return
        if msg.term > self.term or self.role is not Role.FOLLOWER or not self.leader_id:
            if self.role is Role.LEADER and msg.term == self.term:
                return  # impossible with a correct election; never follow a rival
            self._become_follower(msg.term, msg.local_id)
        elif self.leader_id != msg.local_id:
            if isinstance(msg, HeartBeatRequest):
                self._send(
                    HeartBeatResponse(
                        msg.group, self.id, msg.local_id, self.leader_id, self.term,
                        ResponseCode.INCONSISTENT_LEADER,
                    )
                )
            return
        self.election_elapsed = 0
        if isinstance(msg, HeartBeatRequest):
            self._advance_commit(min(msg.commit_index, self.storage.last_index()))
            self._send(
                HeartBeatResponse(msg.group, self.id, msg.local_id, self.leader_id, self.term)
            )
        elif isinstance(msg, LeadershipTransferRequest):
            caught_up = self.storage.last_index() >= msg.take_leadership_ledger_index
            if msg.transferee_id == self.id and caught_up:
                self.campaign(pre_vote=False, take_leadership=True)
        else:
            self._on_push(msg)

    def _advance_commit(self, index: int) -> None:
        if index > self.commit:
            self.commit = index

    def _on_push(self, req: PushEntryRequest) -> None:
        last = self.storage.last_index()
        prev = req.prev_index
        if req.type is PushType.TRUNCATE:
            self._push_reply(req, ResponseCode.UNSUPPORTED, prev)
            return
        first = self.storage.first_index()
        if prev > last or (prev >= first - 1 and self.storage.term_at(prev) != req.prev_term):
            # (below first - 1: deleted by retention, committed here, so it matches)
            if req.type is not PushType.COMMIT:
                self._push_reply(req, ResponseCode.INCONSISTENT_STATE, prev)
            return
        if req.type is PushType.COMMIT:
            self._advance_commit(min(req.commit_index, prev))
            return
        ents = req.entries
        try:
            self._follow_entries(ents, first, last)
        except (StorageError, OSError) as exc:  # too big for a data file, disk full
            self._reject(req, f"storage refused the entries: {exc}")
            return
        match = prev + len(ents)
        self._advance_commit(min(req.commit_index, match))
        self._push_reply(req, ResponseCode.SUCCESS, match)

    def _follow_entries(self, ents: Sequence[Entry], first: int, last: int) -> None:
        """Make the log hold ``ents`` (contiguous, checked by :meth:`step`): skip what
        matches, truncate at the first conflict (never at or below the commit index:
        :meth:`_contradicts_committed` refused those), append the rest."""
        for i, e in enumerate(ents):
            if e.index < first:
                continue  # committed and deleted here: the leader's is the same
            if e.index > last:
                self._append(ents[i:])
                return
            if self.storage.term_at(e.index) != e.term:
                self.storage.truncate_suffix(e.index)
                if self._unsynced_lo >= e.index:
                    self._unsynced_lo = -1  # every entry written since the last Ready is gone
                self._must_sync = True
                self._append(ents[i:])
                return

    def _push_reply(self, req: PushEntryRequest, code: ResponseCode, index: int) -> None:
        self._send(
            PushEntryResponse(
                req.group, self.id, req.local_id, self.leader_id, self.term, code, index,
                0, self.storage.last_index(),
            )
        )


# ---------------------------------------------------------------------- message checks


def _term_ok(term: int) -> bool:
    return 0 <= term <= MAX_TERM


def impossible(msg: Message) -> str:
    """Why no correct peer could have sent ``msg`` (whatever this node's state), or ''."""
    if not _term_ok(msg.term):
        return f"term {msg.term} outside [0, {MAX_TERM}]"
    if isinstance(msg, PushEntryRequest):
        return _impossible_push(msg)
    if isinstance(msg, VoteRequest):
        if msg.ledger_end_index < -1 or not _term_ok(msg.ledger_end_term):
            return f"ledger end ({msg.ledger_end_index}, {msg.ledger_end_term}) out of range"
    elif isinstance(msg, PushEntryResponse | HeartBeatRequest):
        index = msg.index if isinstance(msg, PushEntryResponse) else msg.commit_index
        if index < -1:
            return f"index {index} below -1"
    return ""


def _impossible_push(req: PushEntryRequest) -> str:
    prev, prev_term = req.prev_index, req.prev_term
    if prev < -1 or req.commit_index < -1:
        return f"prev index {prev} / commit index {req.commit_index} below -1"
    if not 0 <= prev_term <= req.term or (prev == -1 and prev_term != 0):
        return f"prev term {prev_term} impossible at index {prev} in term {req.term}"
    if req.entries and req.type is not PushType.APPEND:
        return f"a {req.type.value} push carrying {len(req.entries)} entries"
    floor = prev_term
    for n, e in enumerate(req.entries):
        if e.index != prev + 1 + n:
            return f"entry index {e.index} where {prev + 1 + n} must follow"
        if not floor <= e.term <= req.term or e.term < 1:
            return f"entry ({e.index}, term {e.term}) out of term order (push term {req.term})"
        floor = e.term
    return ""
