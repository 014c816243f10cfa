"""node.py: three Trio drivers over an in-memory transport (virtual time, no sockets)."""

from __future__ import annotations

import random
from pathlib import Path

import trio
import trio.testing

from rmq_cluster.cluster.remoting.codes import ResponseCode as RemotingResponseCode
from rmq_cluster.dledger.core import CoreConfig, Role
from rmq_cluster.dledger.log_storage import FileLogStorage, MemoryLogStorage
from rmq_cluster.dledger.messages import Entry, ResponseCode
from rmq_cluster.dledger.node import DLedgerNode
from tests.unit.dledger.sink import Receiver, ok_answer

PEERS = ("n0", "n1", "n2")


class MemTransport:
    def __init__(self, me: str, net: MemNet) -> None:
        self.me = me
        self.net = net

    def send(self, peer: str, data: bytes, code: int) -> None:
        if (self.me, peer) not in self.net.cut and peer in self.net.nodes:
            self.net.nodes[peer].deliver(data)


class MemNet:
    def __init__(self) -> None:
        self.nodes: dict[str, DLedgerNode] = {}
        self.applied: dict[str, list[Entry]] = {p: [] for p in PEERS}
        self.cut: set[tuple[str, str]] = set()

    def isolate(self, nid: str) -> None:
        for p in PEERS:
            if p != nid:
                self.cut |= {(nid, p), (p, nid)}


def make_group(net: MemNet) -> None:
    for i, p in enumerate(PEERS):
        net.nodes[p] = DLedgerNode(
            CoreConfig("g", p, PEERS),
            MemoryLogStorage(),
            MemTransport(p, net),
            rng=random.Random(i),
            on_apply=net.applied[p].append,
            offload_io=False,
        )


async def start_group(net: MemNet, nursery: trio.Nursery) -> DLedgerNode:
    """Run every node of ``net`` in ``nursery``; the leader they elect."""
    for node in net.nodes.values():
        await nursery.start(node.run)
    return await leader_of(net)


async def leader_of(net: MemNet, among: tuple[str, ...] = PEERS) -> DLedgerNode:
    with trio.fail_after(60):
        while True:
            for p in among:
                node = net.nodes[p]
                if node.role is Role.LEADER:
                    return node
            await trio.sleep(0.1)


async def test_group_elects_commits_and_fails_over(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = MemNet()
    make_group(net)
    async with trio.open_nursery() as nursery:
        leader = await start_group(net, nursery)
        results: list[ResponseCode] = []

        async def one(i: int) -> None:
            results.append((await leader.append(f"m{i}".encode())).code)

        async with trio.open_nursery() as inner:
            for i in range(20):
                inner.start_soon(one, i)
        assert results == [ResponseCode.SUCCESS] * 20
        follower = next(n for p, n in net.nodes.items() if n is not leader)
        assert (await follower.append(b"x")).code is ResponseCode.NOT_LEADER

        # cut the leader off: the other two elect a new one; the old one cannot commit
        old = leader
        old_id = next(p for p, n in net.nodes.items() if n is old)
        net.isolate(old_id)
        res = await old.append(b"lost")
        assert res.code in (ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, ResponseCode.TERM_CHANGED,
                            ResponseCode.NOT_LEADER)
        leader = await leader_of(net, tuple(p for p in PEERS if p != old_id))
        assert (await leader.append(b"after")).code is ResponseCode.SUCCESS
        net.cut.clear()
        await old.wait_for(lambda n: n.role is Role.FOLLOWER and n.term == leader.term)
        assert (await leader.append(b"healed")).code is ResponseCode.SUCCESS
        with trio.fail_after(30):
            await old.wait_for(
                lambda _: len(net.applied[old_id]) >= len(net.applied[leader.core.id])
            )
        nursery.cancel_scope.cancel()
    bodies = [[e.body for e in net.applied[q] if e.body] for q in PEERS]
    assert bodies[0] == bodies[1] == bodies[2]
    assert b"lost" not in bodies[0] and bodies[0][-2:] == [b"after", b"healed"]


async def test_file_store_group_real_time(tmp_path: Path) -> None:
    """The production path: mmap stores, fsync in worker threads, a 10 ms tick."""
    net = MemNet()
    for i, p in enumerate(PEERS):
        net.nodes[p] = DLedgerNode(
            CoreConfig("g", p, PEERS, heartbeat_interval=2, election_timeout=10,
                       vote_jitter_min=0, vote_jitter_max=10),
            FileLogStorage(tmp_path / p, data_file_bytes=1 << 20),
            MemTransport(p, net),
            rng=random.Random(i),
            tick_ms=10,
            on_apply=net.applied[p].append,
        )
    async with trio.open_nursery() as nursery:
        leader = await start_group(net, nursery)
        for i in range(5):
            assert (await leader.append(b"f%d" % i)).code is ResponseCode.SUCCESS
        nursery.cancel_scope.cancel()
    for node in net.nodes.values():
        node.storage.close()
    reopened = FileLogStorage(tmp_path / leader.core.id, data_file_bytes=1 << 20)
    assert [e.body for e in reopened.entries(0, 100) if e.body][-5:] == [
        b"f%d" % i for i in range(5)
    ]
    assert reopened.load_hard_state().term == leader.term
    reopened.close()


def _hold(node: DLedgerNode, receiver: Receiver, i: int, body: bytes) -> int:
    """Propose ``body`` and hold a SUCCESS answer (opaque ``i``) on the commit watermark, as
    the broker's DLedger send does; the entry's index."""
    code, index, _term = node.propose_now(body)
    assert code is ResponseCode.SUCCESS
    node.commit.hold(receiver, i, ok_answer(i), index + 1)
    return index


async def test_held_answers_commit_refuse_and_time_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Answers held on ``commit`` leave once each, SUCCESS, when their entries commit; a
    follower refuses a proposal (nothing to hold); an isolated leader's held answer leaves
    once, in its failed form, never before its timeout and at most a tick after it."""
    net = MemNet()
    make_group(net)
    async with trio.open_nursery() as nursery:
        leader = await start_group(net, nursery)
        receiver = Receiver()
        indexes = [_hold(leader, receiver, i, b"s%d" % i) for i in range(30)]
        assert indexes == list(range(indexes[0], indexes[0] + 30))
        with trio.fail_after(10):
            await receiver.wait_for(30)
        assert [(a.opaque, a.code) for _t, a in receiver.answers] == [(i, 0) for i in range(30)]
        assert leader.commit.value > indexes[-1]
        follower = next(n for n in net.nodes.values() if n is not leader)
        assert follower.propose_now(b"no") == (ResponseCode.NOT_LEADER, -1, 0)

        net.isolate(next(p for p, n in net.nodes.items() if n is leader))
        lost = Receiver()
        timeout = 1.5
        leader.commit.held.timeout_s = timeout
        proposed_at = trio.current_time()
        _hold(leader, lost, 99, b"lost")
        with trio.fail_after(30):
            await lost.wait_for(1)
        ((at, answer),) = lost.answers
        # (the timeout is well inside the leader's check-quorum period: it is still leader)
        assert answer.code == RemotingResponseCode.SYSTEM_ERROR
        assert answer.remark == "DLedger append: WAIT_QUORUM_ACK_TIMEOUT"
        assert timeout <= at - proposed_at <= timeout + leader.tick_s + 1e-9
        await trio.sleep(5)
        assert len(lost.answers) == 1
        nursery.cancel_scope.cancel()


async def test_term_change_answers_held_before_the_commit_passes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An isolated leader holds answers for entries the new leader overwrites: once it
    follows the new term they are answered TERM_CHANGED, exactly once, although the commit
    mark then passes their keys (other entries now hold those indexes); never SUCCESS."""
    net = MemNet()
    make_group(net)
    async with trio.open_nursery() as nursery:
        old = await start_group(net, nursery)
        old.commit.held.timeout_s = 3600.0  # the term change must come first
        old_id = next(p for p, n in net.nodes.items() if n is old)
        net.isolate(old_id)
        receiver = Receiver()
        keys = [_hold(old, receiver, i, b"doomed%d" % i) + 1 for i in range(5)]
        leader = await leader_of(net, tuple(p for p in PEERS if p != old_id))
        for i in range(10):  # the new leader's entries take those indexes
            assert (await leader.append(b"new%d" % i)).code is ResponseCode.SUCCESS
        assert receiver.answers == []  # (still cut off: nothing answered yet)
        net.cut.clear()
        with trio.fail_after(60):
            await old.wait_for(lambda n: n.commit.value > keys[-1])
        assert [(a.opaque, a.code, a.remark) for _t, a in receiver.answers] == [
            (i, RemotingResponseCode.SYSTEM_ERROR, "DLedger append: TERM_CHANGED")
            for i in range(5)
        ]
        assert old.commit.held.waiting == 0
        await trio.sleep(5)
        assert len(receiver.answers) == 5
        nursery.cancel_scope.cancel()


async def test_apply_range_sees_what_per_entry_apply_sees(
    autojump_clock: trio.testing.MockClock, tmp_path: Path,
) -> None:
    """``on_apply_range(lo, hi)`` on one member covers exactly the committed entries that
    ``on_apply`` hands the others, in order, each once."""
    net = MemNet()
    ranges: list[tuple[int, int]] = []
    for i, p in enumerate(PEERS):
        storage = FileLogStorage(tmp_path / p, fsync=False) if p == "n0" else MemoryLogStorage()
        net.nodes[p] = DLedgerNode(
            CoreConfig("g", p, PEERS), storage, MemTransport(p, net), rng=random.Random(i),
            on_apply=net.applied[p].append,
            on_apply_range=(lambda lo, hi: ranges.append((lo, hi))) if p == "n0" else None,
            offload_io=False,
        )
    async with trio.open_nursery() as nursery:
        leader = await start_group(net, nursery)
        for i in range(50):
            await leader.append(b"a%d" % i)
        n0 = net.nodes["n0"]
        with trio.fail_after(30):
            await n0.wait_for(lambda n: bool(ranges) and ranges[-1][1] > n.core.commit)
        nursery.cancel_scope.cancel()
    assert net.applied["n0"] == []  # the range callback replaces the per-entry one
    covered = [i for lo, hi in ranges for i in range(lo, hi)]
    assert covered == list(range(len(covered)))
    log = n0.storage
    mine = [(e.index, e.term, e.body) for e in log.entries(0, len(covered))]
    other = next(p for p in PEERS if p != "n0")
    theirs = [(e.index, e.term, e.body) for e in net.applied[other]]
    n = min(len(mine), len(theirs))
    assert n >= 50 and mine[:n] == theirs[:n]
    log.close()
