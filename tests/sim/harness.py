"""Seeded in-memory network + cluster driver for the DLedger core, with invariant checks.

Everything is driven by one ``random.Random(seed)``, so a failing seed replays exactly.
"""

from __future__ import annotations

import heapq
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs

from rmq_cluster.dledger.core import CoreConfig, DLedgerCore, Ready, Role
from rmq_cluster.dledger.log_storage import FileLogStorage, LogStorage, MemoryLogStorage
from rmq_cluster.dledger.messages import Entry, Message, decode, encode

GROUP = "g"
SIM_HEARTBEAT_TICKS = 2
SIM_ELECTION_TICKS = 10
SIM_JITTER_MAX_TICKS = 10
SIM_DATA_FILE_BYTES = 512
SIM_INDEX_FILE_BYTES = 32 * 8
LIVENESS_TICKS = 400
FILE_STORE_EVERY = 10
"""Every 10th seed runs on the mmap file store (with torn tails); the rest in memory."""


def _scratch_dir() -> str | None:
    """tmpfs when available: file-store seeds create and rewrite many small files."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


class InvariantError(AssertionError):
    pass


@attrs.define
class Faults:
    drop: float = 0.0
    dup: float = 0.0
    max_delay: int = 1
    """Messages arrive 1..max_delay ticks later; > 1 reorders."""


class Net:
    def __init__(self, rng: random.Random, faults: Faults, codec: bool = False) -> None:
        self.rng = rng
        self.faults = faults
        self.now = 0
        self.queue: list[tuple[int, int, Message]] = []
        self.seq = 0
        self.groups: list[set[str]] | None = None
        self.codec = codec

    def connected(self, a: str, b: str) -> bool:
        if self.groups is None:
            return True
        return any(a in g and b in g for g in self.groups)

    def send(self, msg: Message) -> None:
        f = self.faults
        if not self.connected(msg.local_id, msg.remote_id):
            return
        if f.drop and self.rng.random() < f.drop:
            return
        copies = 2 if f.dup and self.rng.random() < f.dup else 1
        if self.codec:
            msg = decode(encode(msg))
        for _ in range(copies):
            delay = 1 if f.max_delay <= 1 else self.rng.randint(1, f.max_delay)
            self.seq += 1
            heapq.heappush(self.queue, (self.now + delay, self.seq, msg))

    def due(self) -> list[Message]:
        out = []
        while self.queue and self.queue[0][0] <= self.now:
            _, _, msg = heapq.heappop(self.queue)
            if self.connected(msg.local_id, msg.remote_id):
                out.append(msg)
        return out


class SimNode:
    def __init__(self, cluster: Cluster, nid: str) -> None:
        self.cluster = cluster
        self.id = nid
        self.storage: LogStorage = cluster.new_storage(nid)
        self.core: DLedgerCore | None = None
        self.applied: list[tuple[int, bytes]] = []
        self.checked_commit = -1
        self.start()

    def start(self) -> None:
        c = self.cluster
        cfg = CoreConfig(
            GROUP, self.id, c.ids,
            preferred_leader_id=c.preferred,
            heartbeat_interval=SIM_HEARTBEAT_TICKS,
            election_timeout=SIM_ELECTION_TICKS,
            vote_jitter_min=0,
            vote_jitter_max=SIM_JITTER_MAX_TICKS,
            max_inflight_pushes=c.max_inflight,
            max_batch_push_bytes=c.max_batch_bytes,
            leadership_transfer_timeout=10,
            preferred_check_interval=10,
        )
        self.core = DLedgerCore(cfg, self.storage, random.Random(c.rng.random()))
        self.applied = []
        self.checked_commit = -1

    @property
    def alive(self) -> bool:
        return self.core is not None

    def log(self) -> list[tuple[int, bytes]]:
        s = self.storage
        if isinstance(s, MemoryLogStorage):
            return [(e.term, e.body) for e in s._log]
        return [(e.term, e.body) for e in s.entries(0, s.last_index() + 1)]


class Cluster:
    """n nodes ``n1..nN`` over a :class:`Net`; ``file_store`` puts logs in a temp dir."""

    def __init__(
        self,
        n: int,
        seed: int,
        *,
        faults: Faults | None = None,
        file_store: bool = False,
        preferred: str = "",
        codec: bool = False,
        max_inflight: int = 8,
        max_batch_bytes: int = 64,
    ) -> None:
        self.seed = seed
        self.max_inflight = max_inflight
        self.max_batch_bytes = max_batch_bytes
        self.rng = random.Random(seed)
        self.ids = tuple(f"n{i}" for i in range(1, n + 1))
        self.preferred = preferred
        self.net = Net(self.rng, faults or Faults(), codec=codec)
        self.tmp: Path | None = (
            Path(tempfile.mkdtemp(prefix="dlsim", dir=_scratch_dir())) if file_store else None
        )
        self.leaders: dict[int, str] = {}
        self.committed: list[tuple[int, bytes]] = []
        self.commit_term: list[int] = []
        """Per committed index: the lowest term of a node seen committing it (it was committed
        by a leader of that term or earlier)."""
        self.tick_no = 0
        self.nodes = {nid: SimNode(self, nid) for nid in self.ids}

    # -- plumbing
    def new_storage(self, nid: str) -> LogStorage:
        if self.tmp is None:
            return MemoryLogStorage()
        return FileLogStorage(
            self.tmp / nid,
            data_file_bytes=SIM_DATA_FILE_BYTES,
            index_file_bytes=SIM_INDEX_FILE_BYTES,
            fsync=False,  # crashes are simulated (synced_pos + torn tails), not power losses
        )

    def close(self) -> None:
        for node in self.nodes.values():
            node.storage.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def handle_ready(self, node: SimNode, *, crash_mid: bool = False) -> None:
        core = node.core
        assert core is not None
        while core.has_ready():
            rd: Ready = core.ready()
            if crash_mid and (rd.must_sync or rd.hard_state):
                self.crash(node.id, torn=True)
                return
            if rd.must_sync:
                node.storage.sync()
            if rd.hard_state is not None:
                node.storage.save_hard_state(rd.hard_state)
            for m in rd.messages:
                self.net.send(m)
            self.check_commit(node)
            self.apply(node, rd.committed_entries)
            core.advance(rd)

    def apply(self, node: SimNode, entries: tuple[Entry, ...]) -> None:
        for e in entries:
            if e.index != len(node.applied):
                raise InvariantError(f"{node.id} applied {e.index} after {len(node.applied) - 1}")
            if e.index >= len(self.committed):
                raise InvariantError(f"{node.id} applied {e.index} beyond known commit")
            if self.committed[e.index] != (e.term, e.body):
                raise InvariantError(f"{node.id} applied a different entry at {e.index}")
            node.applied.append((e.term, e.body))

    # -- actions
    def tick(self, n: int = 1, *, crash_p: float = 0.0) -> None:
        for _ in range(n):
            self.tick_no += 1
            self.net.now += 1
            for node in self.nodes.values():
                if node.core is not None:
                    node.core.tick()
            msgs = self.net.due()
            self.rng.shuffle(msgs)
            for m in msgs:
                node = self.nodes[m.remote_id]
                if node.core is not None:
                    node.core.step(m)
            for node in self.nodes.values():
                if node.core is not None:
                    mid = crash_p > 0 and self.rng.random() < crash_p
                    self.handle_ready(node, crash_mid=mid)
            self.check()

    def deliver(self) -> None:
        """One network step without ticking any core timer (scenarios drive elections)."""
        self.net.now += 1
        msgs = self.net.due()
        for m in msgs:
            node = self.nodes[m.remote_id]
            if node.core is not None:
                node.core.step(m)
        for node in self.nodes.values():
            if node.core is not None:
                self.handle_ready(node)
        self.check()

    def propose(self, nid: str, body: bytes) -> Any:
        node = self.nodes[nid]
        assert node.core is not None, f"{nid} is down"
        res = node.core.propose(body)
        self.handle_ready(node)
        return res

    def partition(self, *groups: set[str]) -> None:
        self.net.groups = [set(g) for g in groups]

    def heal(self) -> None:
        self.net.groups = None

    def crash(self, nid: str, *, torn: bool = False) -> None:
        node = self.nodes[nid]
        node.core = None
        s = node.storage
        if isinstance(s, MemoryLogStorage):
            s.crash()
        else:
            assert isinstance(s, FileLogStorage)
            lo, hi = s.synced_pos, s.write_pos
            s.close()
            if torn and hi > lo:
                self.tear(nid, lo, hi)
            node.storage = self.new_storage(nid)

    def tear(self, nid: str, lo: int, hi: int) -> None:
        """Garble or cut the unsynced part ``[lo, hi)`` of the data files."""
        assert self.tmp is not None
        at = self.rng.randrange(lo, hi)
        start = at - at % SIM_DATA_FILE_BYTES
        path = self.tmp / nid / "data" / f"{start:020d}"
        with open(path, "r+b") as f:
            f.seek(at - start)
            if self.rng.random() < 0.5:
                f.write(bytes(SIM_DATA_FILE_BYTES - (at - start)))  # cut: zeros to the end
            else:
                old = f.read(1)
                f.seek(at - start)
                f.write(bytes([(old[0] if old else 0) ^ 0x5A]))

    def restart(self, nid: str) -> None:
        node = self.nodes[nid]
        assert node.core is None
        node.start()

    # -- queries
    def leader(self) -> str | None:
        """The unique highest-term leader among live nodes, if any."""
        best: tuple[int, str] | None = None
        for node in self.nodes.values():
            core = node.core
            if core is not None and core.role is Role.LEADER and (
                best is None or core.term > best[0]
            ):
                best = (core.term, node.id)
        return best[1] if best else None

    # -- invariants
    def check(self) -> None:
        live = [n for n in self.nodes.values() if n.core is not None]
        logs: dict[str, list[tuple[int, bytes]]] = {}
        for node in live:
            core = node.core
            assert core is not None
            if core.role is Role.LEADER:
                prev = self.leaders.setdefault(core.term, node.id)
                if prev != node.id:
                    raise InvariantError(f"two leaders in term {core.term}: {prev}, {node.id}")
            log = logs[node.id] = node.log()
            self.check_commit(node, log)
            if core.role is Role.LEADER:
                # leader completeness: whatever was committed in an earlier term is here
                pairs = zip(self.committed, self.commit_term, strict=True)
                for i, (entry, term) in enumerate(pairs):
                    if term < core.term and (i >= len(log) or log[i] != entry):
                        raise InvariantError(f"leader {node.id} lacks committed entry {i}")
        items = list(logs.items())
        for i, (a, la) in enumerate(items):
            for b, lb in items[i + 1 :]:
                for k in range(min(len(la), len(lb)) - 1, -1, -1):
                    if la[k][0] == lb[k][0]:
                        if la[: k + 1] != lb[: k + 1]:
                            raise InvariantError(f"log matching broken between {a} and {b} <= {k}")
                        break

    def check_commit(self, node: SimNode, log: list[tuple[int, bytes]] | None = None) -> None:
        """A committed entry never changes: record it globally, compare on every node."""
        core = node.core
        assert core is not None
        if core.commit <= node.checked_commit:
            return
        if log is None:
            log = node.log()
        if core.commit >= len(log):
            raise InvariantError(f"{node.id} commit {core.commit} beyond its log")
        for i in range(node.checked_commit + 1, core.commit + 1):
            if i < len(self.committed):
                if self.committed[i] != log[i]:
                    raise InvariantError(f"{node.id} committed a different entry at {i}")
                self.commit_term[i] = min(self.commit_term[i], core.term)
            else:
                self.committed.append(log[i])
                self.commit_term.append(core.term)
        node.checked_commit = core.commit

    def run_until_live(self, limit: int = LIVENESS_TICKS) -> int:
        """Healed network: a leader appears and a fresh proposal is applied everywhere."""
        body = f"live-{self.seed}".encode()
        proposed: tuple[int, int] | None = None
        for t in range(limit):
            ldr = self.leader()
            if ldr is not None:
                core = self.nodes[ldr].core
                assert core is not None
                if proposed is None or core.term != proposed[1]:
                    res = self.propose(ldr, body)
                    if res.index >= 0:
                        proposed = (res.index, res.term)
            if proposed is not None and all(
                len(n.applied) > proposed[0] and n.applied[proposed[0]] == (proposed[1], body)
                for n in self.nodes.values()
            ):
                return t
            self.tick()
        raise InvariantError(f"not live after {limit} ticks (seed {self.seed})")


@attrs.frozen
class SeedResult:
    live_ticks: int
    committed: int
    max_term: int
    digest: int
    """hash of the committed sequence and the leader of every term (determinism checks)."""


def run_seed(seed: int, *, file_store: bool | None = None, ticks: int = 120) -> SeedResult:
    """One random schedule: faults, partitions, crashes, proposals; then heal + liveness."""
    rng = random.Random(seed * 7919 + 1)
    n = 5 if rng.random() < 0.3 else 3
    if file_store is None:
        file_store = seed % FILE_STORE_EVERY == 0
    crash_mid_p = 0.02 if file_store else 0.005
    faults = Faults(
        drop=rng.choice([0.0, 0.05, 0.2]),
        dup=rng.choice([0.0, 0.05, 0.2]),
        max_delay=rng.choice([1, 2, 4]),
    )
    preferred = f"n{rng.randint(1, n)}" if seed % 7 == 3 else ""
    with Cluster(
        n,
        seed,
        faults=faults,
        file_store=file_store,
        codec=seed % 50 == 1,
        preferred=preferred,
        max_inflight=rng.choice([1, 8]),
        max_batch_bytes=rng.choice([1, 64]),  # 1: one entry per push
    ) as c:
        ids = list(c.ids)
        k = 0
        for _ in range(ticks):
            r = rng.random()
            if r < 0.02:
                g = set(rng.sample(ids, rng.randint(1, n - 1)))
                c.partition(g, set(ids) - g)
            elif r < 0.04:
                c.heal()
            elif r < 0.055:
                live = [i for i in ids if c.nodes[i].alive]
                if len(live) > 1:
                    c.crash(rng.choice(live), torn=True)
            elif r < 0.08:
                dead = [i for i in ids if not c.nodes[i].alive]
                if dead:
                    c.restart(rng.choice(dead))
            elif r < 0.09:
                ldr = c.leader()
                if ldr is not None:
                    core = c.nodes[ldr].core
                    assert core is not None
                    core.transfer_leadership(rng.choice([i for i in ids if i != ldr]))
                    c.handle_ready(c.nodes[ldr])
            if rng.random() < 0.3:
                ldr = c.leader() if rng.random() < 0.8 else rng.choice(ids)
                if ldr is not None and c.nodes[ldr].alive:
                    k += 1
                    c.propose(ldr, f"{seed}-{k}".encode())
            c.tick(crash_p=crash_mid_p)
        c.heal()
        c.net.faults = Faults(max_delay=faults.max_delay)
        for nid in ids:
            if not c.nodes[nid].alive:
                c.restart(nid)
        live = c.run_until_live()
        return SeedResult(
            live,
            len(c.committed),
            max(c.leaders, default=0),
            hash((tuple(c.committed), tuple(sorted(c.leaders.items())))),
        )
