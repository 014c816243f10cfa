"""Pure inputs and planning for the replica-diff: replica specs, cluster.json, scan tasks, kinds.

No Spark here: the driver plans, the workers decode (``spark_jobs.decode``), Spark joins.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any, Final

import attrs

from .decode import KIND_COMMITLOG, KIND_DLEDGER, Segment, list_segments

MASTER_ROLES: Final = frozenset({"MASTER", "SYNC_MASTER", "ASYNC_MASTER", "LEADER"})
ROLES: Final = MASTER_ROLES | {"SLAVE", "FOLLOWER", "DLEDGER", "CANDIDATE"}

# finding kinds
K_DIVERGENT: Final = "divergent"  # same offset, different size/crc/topic/queue/queue offset/term
K_MISSING: Final = "missing_range"  # master records absent on the replica (not at its tail)
K_MISSING_SEGMENT: Final = "missing_segment"  # a hole in the file sequence
K_LAG: Final = "lag"  # master records beyond the replica's end
K_EXTRA_TAIL: Final = "extra_tail"  # replica records beyond the master's end
K_CQ_MISMATCH: Final = "cq_mismatch"  # CQ unit that does not point at a matching record
K_CQ_DANGLING: Final = "cq_dangling"  # CQ unit beyond the replica's CommitLog end (lagging)
K_QUEUE_GAP: Final = "queue_gap"  # queue offsets not contiguous per (topic, queue)
K_CONSUMER_BEYOND: Final = "consumer_offset_beyond_max"
K_CONSUMER_LAG: Final = "consumer_offset_lag"  # beyond the replica's max, not the master's
#: kinds that only mean "behind the master": allowed with --allow-lag
LAG_KINDS: Final = frozenset({K_LAG, K_CQ_DANGLING, K_CONSUMER_LAG})
#: ``--live --node-timeout``: one deadline over a whole exchange with one broker (connect,
#: request, answer), not per read: a broker that drips bytes is given up on when it runs out.
NODE_TIMEOUT_S: Final = 60.0
MAX_NODE_TIMEOUT_S: Final = 3600.0


class BadInput(ValueError):
    """The job's input cannot be used (exit code 2)."""


@attrs.frozen
class Replica:
    group: str
    node: str
    role: str
    store: str  # store root (commitlog/, consumequeue/, config/) or a DLedger dir
    kind: str = KIND_COMMITLOG
    data_dir: str = ""  # the directory holding the segments
    #: live audit: read nothing at or beyond this offset (the group's confirmed offset); and
    #: no ConsumeQueue / consumer-offset checks (those files change under a running broker)
    limit: int | None = None

    @property
    def declared_master(self) -> bool:
        return self.role.upper() in MASTER_ROLES


def _dledger_data_dir(store: str) -> str | None:
    if os.path.isdir(os.path.join(store, "data")) and not os.path.isdir(
        os.path.join(store, "commitlog")
    ):
        return os.path.join(store, "data")
    try:
        names = sorted(os.listdir(store))
    except OSError:
        return None
    for name in names:
        if name.startswith("dledger-") and os.path.isdir(os.path.join(store, name, "data")):
            return os.path.join(store, name, "data")
    return None


def make_replica(group: str, node: str, role: str, store: str) -> Replica:
    """A replica whose store kind is read from its directory: ``commitlog/`` (classic, also an
    Apache RocketMQ store), ``dledger-<id>/data/`` or a bare DLedger dir with ``data/``."""
    if role.upper() not in ROLES:
        raise BadInput(f"{group}:{node}: unknown role {role!r} (one of {sorted(ROLES)})")
    store = os.path.abspath(store)  # executors need not share the driver's working directory
    if not os.path.isdir(store):
        raise BadInput(f"{group}:{node}: store {store!r} is not a directory")
    dl = _dledger_data_dir(store)
    if dl is not None:
        return Replica(group, node, role.upper(), store, KIND_DLEDGER, dl)
    cl = os.path.join(store, "commitlog")
    if not os.path.isdir(cl):
        raise BadInput(f"{group}:{node}: no commitlog/ or dledger data/ under {store!r}")
    return Replica(group, node, role.upper(), store, KIND_COMMITLOG, cl)


def parse_replica_spec(spec: str) -> Replica:
    """``group:node:role:store_path`` (the path may contain ':')."""
    parts = spec.split(":", 3)
    if len(parts) != 4 or not all(parts):
        raise BadInput(f"bad replica {spec!r}: expected group:node:role:store_path")
    return make_replica(*parts)


def replicas_from_cluster_dir(directory: str) -> list[Replica]:
    """Brokers of a deploy cluster directory: ``cluster.json`` → ``topology.nodes`` with
    ``kind == "broker"``, ``group``, ``role``, ``broker_id``; each store at ``store/<name>/``."""
    path = os.path.join(directory, "cluster.json")
    try:
        with open(path) as f:
            obj: Any = json.load(f)
        nodes = obj["topology"]["nodes"]
    except FileNotFoundError:
        raise BadInput(f"no cluster.json in {directory!r}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"cannot read {path}: {exc!r}") from exc
    out = []
    for n in nodes:
        if n.get("kind") != "broker":
            continue
        role = str(n.get("role") or "")
        if role.upper() == "DLEDGER":
            role = "DLEDGER"
        elif n.get("broker_id") == 0 and role.upper() not in MASTER_ROLES:
            role = "MASTER"
        store = os.path.join(directory, "store", str(n["name"]))
        out.append(make_replica(str(n["group"]), str(n["name"]), role, store))
    if not out:
        raise BadInput(f"{path}: no brokers")
    return out


def check_groups(replicas: list[Replica]) -> None:
    """Every group has at most one declared master; node names are unique per group."""
    seen: set[tuple[str, str]] = set()
    for r in replicas:
        if (r.group, r.node) in seen:
            raise BadInput(f"node {r.node!r} twice in group {r.group!r}")
        seen.add((r.group, r.node))
    for g in {r.group for r in replicas}:
        members = [r for r in replicas if r.group == g]
        masters = [r for r in members if r.declared_master]
        if len(masters) > 1:
            raise BadInput(f"group {g!r} has {len(masters)} masters")
        if not masters and not all(r.kind == KIND_DLEDGER for r in members):
            raise BadInput(f"group {g!r} has no master")
        if len({r.kind for r in members}) > 1:
            raise BadInput(f"group {g!r} mixes DLedger and classic stores")


def choose_masters(replicas: list[Replica], ends: dict[int, int]) -> dict[str, int]:
    """group → index of its master: the declared one, else (a DLedger group without a declared
    leader) the node with the longest log, ties to the first listed."""
    out: dict[str, int] = {}
    for g in dict.fromkeys(r.group for r in replicas):
        idx = [i for i, r in enumerate(replicas) if r.group == g]
        declared = [i for i in idx if replicas[i].declared_master]
        out[g] = declared[0] if declared else max(idx, key=lambda i: (ends.get(i, 0), -i))
    return out


@attrs.frozen
class ScanTask:
    rid: int
    kind: str
    path: str
    seg_start: int
    lo: int
    hi: int
    verify_crc: bool
    exact: bool = False  # digests of every record and END_OF_FILE blank (byte-exact compare)
    limit: int = -1  # rows starting at or beyond this absolute offset are dropped (live)


@attrs.frozen
class SumTask:
    """Checksum ``[lo, hi)`` of one file in ``block``-byte pieces aligned on ``base + k*block``
    (absolute offsets for data files, so a master's and a replica's pieces line up)."""

    rid: int
    area: str  # "data" or "cq/<topic>/<queue>"
    path: str
    seg_start: int  # the file's absolute start offset
    lo: int  # within the file
    hi: int  # within the file; -1: to its end
    block: int


@attrs.frozen
class FileFinding:
    rid: int
    kind: str
    offset: int
    end: int
    detail: str


def plan_scan(
    replicas: list[Replica], split_bytes: int, *, verify_crc: bool,
    skip: frozenset[int] = frozenset(), exact: frozenset[int] = frozenset(),
) -> tuple[list[ScanTask], list[FileFinding], dict[int, list[Segment]]]:
    """One task per ``split_bytes`` of every segment (replicas in ``skip``: none; those in
    ``exact``: with digests), and file-level findings (holes)."""
    tasks: list[ScanTask] = []
    findings: list[FileFinding] = []
    segs_by: dict[int, list[Segment]] = {}
    for rid, r in enumerate(replicas):
        segs = list_segments(r.data_dir)
        segs_by[rid] = segs
        for a, b in itertools.pairwise(segs):
            if a.start + a.length < b.start:
                findings.append(
                    FileFinding(rid, K_MISSING_SEGMENT, a.start + a.length, b.start,
                                f"no file covers [{a.start + a.length}, {b.start})")
                )
        if rid in skip:
            continue
        for s in segs:
            length = s.length if r.limit is None else max(0, min(s.length, r.limit - s.start))
            for lo in range(0, max(length, 1), split_bytes):
                if length:
                    lim = -1 if r.limit is None else r.limit
                    tasks.append(ScanTask(rid, r.kind, s.path, s.start, lo,
                                          min(lo + split_bytes, length), verify_crc,
                                          rid in exact, lim))  # fmt: skip
    return tasks, findings, segs_by


def plan_sums(replicas: list[Replica], block: int, cq: list[CqTask]) -> list[SumTask]:
    """Checksum tasks over every data file (about ``8 * block`` bytes each) and every CQ file."""
    out = []
    per = max(block, (64 << 20) // block * block)
    for rid, r in enumerate(replicas):
        for s in list_segments(r.data_dir):
            end = s.start + s.length if r.limit is None else min(s.start + s.length, r.limit)
            first = s.start - s.start % block
            for lo in range(first, end, per):
                a, b = max(lo, s.start), min(lo + per, end)
                if a < b:
                    out.append(SumTask(rid, "data", s.path, s.start, a - s.start, b - s.start,
                                       block))  # fmt: skip
    for t in cq:
        out.append(SumTask(t.rid, f"cq/{t.topic}/{t.queue_id}", t.path, t.seg_start, 0, -1,
                           1 << 62))  # fmt: skip
    return out


@attrs.frozen
class CqTask:
    rid: int
    topic: str
    queue_id: int
    path: str
    seg_start: int


def plan_cq(replicas: list[Replica], skip: frozenset[int] = frozenset()) -> list[CqTask]:
    out = []
    for rid, r in enumerate(replicas):
        if rid in skip or r.limit is not None:
            continue
        root = os.path.join(r.store, "consumequeue")
        if not os.path.isdir(root):
            continue
        for topic in sorted(os.listdir(root)):
            tdir = os.path.join(root, topic)
            if not os.path.isdir(tdir):
                continue
            for q in sorted(os.listdir(tdir)):
                if not q.lstrip("-").isdigit():
                    continue
                for s in list_segments(os.path.join(tdir, q)):
                    out.append(CqTask(rid, topic, int(q), s.path, s.start))
    return out


def read_consumer_offsets(store: str) -> dict[tuple[str, str, int], int]:
    """``config/consumerOffset.json``: (topic, group, queueId) → offset; {} when absent."""
    path = os.path.join(store, "config", "consumerOffset.json")
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return {}
    out = {}
    for key, queues in (obj.get("offsetTable") or {}).items():
        topic, _, group = str(key).partition("@")
        for q, off in (queues or {}).items():
            out[(topic, group, int(q))] = int(off)
    return out


def consumer_offset_findings(
    replicas: list[Replica], masters: dict[str, int], qmax: dict[tuple[int, str, int], int]
) -> list[tuple[int, str, None, None, int, str, int, int, str]]:
    """Committed consumer offsets beyond a queue's max (``qmax``: (rid, topic, queue) → max
    queue offset + 1): on a replica, those still within the master's max only mean lag."""
    out = []
    for rid, r in enumerate(replicas):
        if r.limit is not None:
            continue
        m = masters[r.group]
        for (topic, cgroup, qid), off in sorted(read_consumer_offsets(r.store).items()):
            mx = qmax.get((rid, topic, qid), 0)
            if off <= mx:
                continue
            kind = K_CONSUMER_BEYOND
            if rid != m and off <= qmax.get((m, topic, qid), 0):
                kind = K_CONSUMER_LAG
            out.append((rid, kind, None, None, off - mx, topic, qid, off,
                        f"consumer group {cgroup} at {off}, queue max {mx}"))  # fmt: skip
    return out
