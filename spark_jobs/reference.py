"""A small pure-Python reference diff: the same findings as the Spark job, by plain loops over
whole files (one pass per file, no splits, no joins, no checksum shortcut: every replica is
decoded in full).  Used by the equivalence tests."""

from __future__ import annotations

import itertools
from typing import Any

from .decode import (
    A_BAD_CRC,
    A_EOF_BLANK,
    decode_cq,
    decode_segment_range,
    list_segments,
)
from .model import (
    K_CQ_DANGLING,
    K_CQ_MISMATCH,
    K_DIVERGENT,
    K_EXTRA_TAIL,
    K_LAG,
    K_MISSING,
    K_MISSING_SEGMENT,
    K_QUEUE_GAP,
    Replica,
    check_groups,
    choose_masters,
    consumer_offset_findings,
    plan_cq,
)

#: (group, node, kind, phy_offset, end_offset, count)
FindingKey = tuple[str, str, str, int | None, int | None, int]
_CMP = (1, 2, 3, 4, 5, 11)  # size, body_crc, topic, queue_id, queue_offset, term


def _rows(r: Replica, verify_crc: bool, exact: bool) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for s in list_segments(r.data_dir):
        with open(s.path, "rb") as f:
            data = f.read()
        out.extend(decode_segment_range(r.kind, data, s.start, verify_crc=verify_crc,
                                        exact=exact))  # fmt: skip
    return out


#: a finding before it is named: (replica index, kind, lo, hi, count)
_Raw = tuple[int, str, int | None, int | None, int]
#: replica index -> physical offset -> its decoded row
_Rows = dict[int, dict[int, tuple[Any, ...]]]


def reference_diff(
    replicas: list[Replica], *, verify_crc: bool = False, exact: bool = True
) -> list[FindingKey]:
    check_groups(replicas)
    raw: list[_Raw] = []
    good, blanks, seg_lo = _read_all(replicas, verify_crc, exact, raw)
    ends = {rid: max(p + row[1] for p, row in g.items()) for rid, g in good.items() if g}
    masters = choose_masters(replicas, ends)
    cmp = (*_CMP, 14) if exact else _CMP
    for rid, r in enumerate(replicas):
        m = masters[r.group]
        if rid != m:
            _against_master(rid, m, good, blanks, seg_lo, ends, cmp, raw)
    qmax = _queue_gaps(good, raw)
    _cq_findings(replicas, good, seg_lo, ends, masters, exact, raw)
    for c in consumer_offset_findings(replicas, masters, qmax):
        raw.append((c[0], c[1], None, None, c[4]))
    out = [(replicas[rid].group, replicas[rid].node, kind, lo, hi, n)
           for rid, kind, lo, hi, n in raw]  # fmt: skip
    return sorted(out, key=lambda k: (k[0], k[1], k[2], k[3] or -1, k[4] or -1, k[5]))


def _read_all(
    replicas: list[Replica], verify_crc: bool, exact: bool, raw: list[_Raw]
) -> tuple[_Rows, _Rows, dict[int, int]]:
    """Decode every replica: (good records, end-of-file blanks, first segment's start), with
    segment holes and decode anomalies appended to ``raw``."""
    good: _Rows = {}
    blanks: _Rows = {}
    seg_lo: dict[int, int] = {}
    for rid, r in enumerate(replicas):
        segs = list_segments(r.data_dir)
        seg_lo[rid] = segs[0].start if segs else 0
        for a, b in itertools.pairwise(segs):
            if a.start + a.length < b.start:
                raw.append((rid, K_MISSING_SEGMENT, a.start + a.length, b.start, 1))
        good[rid], blanks[rid] = {}, {}
        for row in _rows(r, verify_crc, exact):
            if row[12] == A_EOF_BLANK:
                blanks[rid][row[0]] = row
            elif row[12] is not None:
                raw.append((rid, row[12], row[0], row[0] + row[1], 1))
            if row[12] is None or row[12] == A_BAD_CRC:
                good[rid][row[0]] = row
    return good, blanks, seg_lo


def _against_master(
    rid: int, m: int, good: _Rows, blanks: _Rows, seg_lo: dict[int, int],
    ends: dict[int, int], cmp: tuple[int, ...], raw: list[_Raw],
) -> None:  # fmt: skip
    """Replica ``rid`` record by record against its master ``m``: divergent records, an
    extra tail, a lag, and islands of master records missing on the replica."""
    M, R = good[m], good[rid]
    r_lo, m_lo = seg_lo[rid], seg_lo[m]
    r_end, m_end = ends.get(rid, r_lo), ends.get(m, m_lo)
    extra = [p for p in R if p not in M and p >= m_end]
    for p, blank in blanks[rid].items():
        mb = blanks[m].get(p)
        if mb is not None and (mb[1], mb[14]) != (blank[1], blank[14]):
            raw.append((rid, K_DIVERGENT, p, p + blank[1], 1))
    for p in sorted(R):
        if p in M:
            if any(M[p][i] != R[p][i] for i in cmp):
                raw.append((rid, K_DIVERGENT, p, p + R[p][1], 1))
        elif m_lo <= p < m_end:
            raw.append((rid, K_DIVERGENT, p, p + R[p][1], 1))
    if extra:
        raw.append((rid, K_EXTRA_TAIL, min(extra), max(p + R[p][1] for p in extra), len(extra)))
    lag = [p for p in M if p not in R and p >= r_end]
    if lag:
        raw.append((rid, K_LAG, min(lag), max(p + M[p][1] for p in lag), len(lag)))
    island: list[int] = []  # a run of consecutive master records absent on the replica
    for q in [*sorted(M), None]:
        if q is not None and q not in R and r_lo <= q < r_end:
            island.append(q)
        elif island:
            raw.append((rid, K_MISSING, island[0], island[-1] + M[island[-1]][1], len(island)))
            island = []


def _queue_gaps(good: _Rows, raw: list[_Raw]) -> dict[tuple[int, str, int], int]:
    """Holes in each queue's offsets (transaction prepare/rollback records excepted); the
    next queue offset of every (replica, topic, queue)."""
    qmax: dict[tuple[int, str, int], int] = {}
    for rid, g in good.items():
        queues: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for p, row in g.items():
            key = (row[3], row[4])
            qmax[(rid, *key)] = max(qmax.get((rid, *key), 0), row[5] + 1)
            if (row[7] & 0xC) not in (4, 12):
                queues.setdefault(key, []).append((row[5], p, row[1]))
        for items in queues.values():
            items.sort()
            for (pq, _, _), (q, p, size) in itertools.pairwise(items):
                if q != pq + 1:
                    raw.append((rid, K_QUEUE_GAP, p, p + size, max(q - pq - 1, 0)))
    return qmax


def _cq_findings(
    replicas: list[Replica], good: _Rows, seg_lo: dict[int, int], ends: dict[int, int],
    masters: dict[str, int], exact: bool, raw: list[_Raw],
) -> None:  # fmt: skip
    """ConsumeQueue units pointing at no record (dangling) or the wrong one (mismatch), and,
    when ``exact``, a replica's units that differ from its master's."""
    units: dict[tuple[int, str, int, int], Any] = {}
    for t in plan_cq(replicas):
        with open(t.path, "rb") as fh:
            for u in decode_cq(fh.read(), t.seg_start):
                units[(t.rid, t.topic, t.queue_id, u.cq_index)] = u
    for (rid, topic, qid, idx), u in units.items():
        r_lo, r_end = seg_lo[rid], ends.get(rid, seg_lo[rid])
        if u.phy_offset < r_lo:
            continue
        rec = good[rid].get(u.phy_offset)
        if rec is None or (rec[1], rec[3], rec[4], rec[5]) != (u.size, topic, qid, idx):
            kind = K_CQ_DANGLING if u.phy_offset >= r_end else K_CQ_MISMATCH
            raw.append((rid, kind, u.phy_offset, u.phy_offset + u.size, 1))
        elif exact and rid != masters[replicas[rid].group]:
            mu = units.get((masters[replicas[rid].group], topic, qid, idx))
            if mu is not None and (mu.phy_offset, mu.size, mu.tags_code) != (
                u.phy_offset, u.size, u.tags_code
            ):
                raw.append((rid, K_CQ_MISMATCH, u.phy_offset, u.phy_offset + u.size, 1))
