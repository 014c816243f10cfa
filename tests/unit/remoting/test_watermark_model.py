"""The one waiting primitive (``HeldAnswers``: a watermark and what is held on it) against a
model, over Hypothesis schedules of holds, task waits, advances (higher or lower), clock ticks
and expiries. Pure: no trio, no sockets.

Checked after every step: the mark never goes back; an advance releases exactly the held items
whose key it reaches, an expiry exactly those whose deadline passed; each item goes out once,
per receiver in the order it was held; ``waiting`` counts what is left."""

from __future__ import annotations

import math
from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand
from rmq_cluster.cluster.remoting.held import HeldAnswers
from rmq_cluster.cluster.remoting.processors import LATER

CODE = 7
EXPIRED = 17
TERM_CHANGED = 19
TIMEOUT_S = 5.0


def _expired(ok: RemotingCommand, key: int) -> RemotingCommand:
    return ok.response(EXPIRED, f"late {key}", ok.ext_fields)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Receiver:
    """A connection (frames) or a task's wakeup (empty frames): records what it got."""

    def __init__(self) -> None:
        self.got: list[tuple[str, int]] = []  # ("ok" | "late" | "wake", opaque or count)

    def _held_released(self, frames: bytearray, n: int) -> None:
        answers = FrameDecoder().feed(bytes(frames))
        if not answers:
            self.got.extend(("wake", 0) for _ in range(n))
            return
        assert len(answers) == n
        for a in answers:
            assert (a.remark or "").split()[-1] == a.ext_fields["k"]
            self.got.append(({0: "ok", EXPIRED: "late", TERM_CHANGED: "changed"}[a.code],
                             a.opaque))


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("hold"), st.integers(0, 2), st.integers(0, 4)),  # conn, key step
        st.tuples(st.just("wait"), st.integers(0, 40), st.sampled_from([1.0, 3.0, math.inf])),
        st.tuples(st.just("advance"), st.integers(-5, 12), st.just(0)),  # relative to the mark
        st.tuples(st.just("tick"), st.integers(0, 4), st.just(0)),
        st.tuples(st.just("expire"), st.just(0), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(_OPS, st.booleans())
def test_each_held_item_goes_out_once_at_its_mark_or_its_deadline(
    ops: list[Any], stop: bool
) -> None:
    clock = _Clock()
    held = HeldAnswers(_expired, TIMEOUT_S, clock, mark=3)
    conns = [_Receiver() for _ in range(3)]
    waits: list[_Receiver] = []
    # what is pending: id -> (receiver, key, deadline); hold order per receiver
    pending: dict[int, tuple[_Receiver, int, float]] = {}
    order: dict[int, list[int]] = {}
    expected: dict[int, list[tuple[str, int]]] = {id(r): [] for r in conns}
    key = 3
    opaque = 0
    for op, a, b in ops:
        before = held.mark
        if op == "hold":
            key = max(key + b, held.mark + 1)  # the caller answers a passed key inline
            opaque += 1
            r = conns[a]
            req = RemotingCommand.request(CODE, {"k": key})
            got = held.hold(r, opaque, req.response(0, f"ok {key}", {"k": str(key)}), key)
            assert got is LATER
            pending[opaque] = (r, key, clock.now + TIMEOUT_S)
            order.setdefault(id(r), []).append(opaque)
        elif op == "wait":
            opaque += 1
            w = _Receiver()
            waits.append(w)
            expected[id(w)] = []
            target = held.mark + 1 + a
            held.wait(w, target, clock.now + b)
            pending[opaque] = (w, target, clock.now + b)
        elif op == "advance":
            mark = held.mark + a
            n = held.advance(mark)
            due = [o for o, (_r, k, _d) in pending.items() if k <= max(mark, before)]
            assert n == (len(due) if mark > before else 0)
            for o in sorted(due):
                r, _k, _d = pending.pop(o)
                expected[id(r)].append(("wake", 0) if r in waits else ("ok", o))
        elif op == "tick":
            clock.now += a
        else:
            n = held.expire(clock.now)
            due = [o for o, (_r, _k, d) in pending.items() if d <= clock.now]
            assert n == len(due)
            for o in sorted(due):
                r, _k, _d = pending.pop(o)
                expected[id(r)].append(("wake", 0) if r in waits else ("late", o))
        assert held.mark >= before  # never goes back
        assert held.waiting == len(pending)
        for r in (*conns, *waits):
            assert r.got == expected[id(r)]  # exactly these, once each, in hold order
    if stop:  # the watermark stops moving: everything left goes out in its expired form
        assert held.expire_all() == len(pending)
        assert held.waiting == 0 and held.next_deadline() is None
        for r in conns:
            assert [o for _what, o in r.got] == order.get(id(r), [])


# ------------------------------------------------------------------ the quorum case (DLedger)

def _term_changed(ok: RemotingCommand, key: int) -> RemotingCommand:
    # (``key`` may be raised: a new term's shorter log, on a receiver that still holds older
    # answers, gives a lower index; it is released no earlier)
    return ok.response(TERM_CHANGED, f"term {ok.ext_fields['k']}", ok.ext_fields)


_QUORUM_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("propose"), st.integers(0, 2), st.integers(1, 3)),  # conn, entries
        st.tuples(st.just("commit"), st.integers(0, 4), st.just(0)),  # entries more committed
        # a new term: (the new leader keeps this many uncommitted entries, appends this many)
        st.tuples(st.just("elect"), st.integers(0, 4), st.integers(0, 4)),
        st.tuples(st.just("tick"), st.integers(0, 4), st.just(0)),
        st.tuples(st.just("expire"), st.just(0), st.just(0)),
    ),
    max_size=60,
)


class _Ledger:
    """A DLedger log as its leader's shell sees it: entries (their terms), the commit (the
    number of committed entries), the term; a new leader keeps a prefix of the uncommitted
    tail and overwrites the rest with entries of its own term."""

    def __init__(self) -> None:
        self.terms: list[int] = []
        self.commit = 0
        self.term = 1


@settings(max_examples=150, deadline=None)
@given(_QUORUM_OPS)
def test_quorum_commit_releases_only_entries_of_their_term(ops: list[Any]) -> None:
    """``settle`` over a DLedger schedule (proposals, commits, elections that overwrite the
    uncommitted tail, deadlines): every held answer goes out exactly once; SUCCESS only once
    the commit reached its entry and that entry is still the one proposed (same index, same
    term), never after its term ended; TERM_CHANGED for everything held when a term ends;
    the timeout form at its deadline otherwise."""
    clock = _Clock()
    held = HeldAnswers(_expired, TIMEOUT_S, clock, mark=0)
    log = _Ledger()
    conns = [_Receiver() for _ in range(3)]
    # what is held: opaque -> (receiver, index, term it was proposed in, deadline)
    pending: dict[int, tuple[_Receiver, int, int, float]] = {}
    expected: dict[int, list[tuple[str, int]]] = {id(r): [] for r in conns}
    opaque = 0
    ended = False  # the term the held answers were proposed in ended (the next settle sees it)
    for op, a, b in ops:
        if op == "propose":
            log.terms.extend([log.term] * b)
            index = len(log.terms) - 1
            opaque += 1
            ok = RemotingCommand.request(CODE, {}).response(0, f"ok {index + 1}",
                                                            {"k": str(index + 1)})
            assert held.hold(conns[a], opaque, ok, index + 1) is LATER
            pending[opaque] = (conns[a], index, log.term, clock.now + TIMEOUT_S)
        elif op == "elect":  # seen by the shell with its next commit (one Ready)
            del log.terms[log.commit + a:]  # the new leader's log: a prefix of the tail ...
            log.term += 1
            log.terms.extend([log.term] * b)  # ... and its own entries after it
            ended = True
        elif op == "commit":
            new_commit = min(len(log.terms), log.commit + a)
            n = held.settle(new_commit, ended, _term_changed)
            due: list[tuple[int, str]] = []
            for o, (_r, index, term, _d) in sorted(pending.items()):
                if ended:
                    due.append((o, "changed"))
                elif index < new_commit:
                    assert log.terms[index] == term  # (the model's own claim: same entry)
                    due.append((o, "ok"))
            assert n == len(due)
            for o, what in due:
                expected[id(pending.pop(o)[0])].append((what, o))
            log.commit = new_commit
            ended = False
        elif op == "tick":
            clock.now += a
        else:
            n = held.expire(clock.now)
            late = [o for o, (_r, _i, _t, d) in sorted(pending.items()) if d <= clock.now]
            assert n == len(late)
            for o in late:
                expected[id(pending.pop(o)[0])].append(("late", o))
        assert held.mark == log.commit and held.waiting == len(pending)
        for r in conns:
            assert r.got == expected[id(r)]
