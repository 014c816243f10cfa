"""The replica-diff's differing blocks compared in the driver: no Spark, no trio.

After the byte comparison (``compare.py``) a divergent group has a few *windows* (the differing
block runs widened to whole records).  Only the records starting in them are decoded, on the
group's master and on each differing replica, and compared here record by record, with the
rules the full Spark path (``replica_diff.run_diff`` with ``--check-stores``) applies:

* both have a record at an offset: ``divergent`` when a decoded field (size, body CRC, topic,
  queue, queue offset, term) or, in exact mode, a byte differs, naming the field;
* only the replica: ``divergent`` inside the master's range, ``extra_tail`` beyond its end;
* only the master: ``lag`` beyond the replica's end, ``missing`` (runs of consecutive master
  records, per window) inside it;
* END_OF_FILE blanks that differ; a record's own decode anomaly;
* the ConsumeQueues that differ: units (offset, size, tags code) unlike the master's.

A window holds a few blocks (4 MiB each by default), so this is milliseconds of work: a
divergent audit costs the byte comparison plus these windows, not a Spark job per stage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from .decode import A_BAD_CRC, A_EOF_BLANK, ROW_FIELDS
from .model import (
    K_CQ_MISMATCH,
    K_DIVERGENT,
    K_EXTRA_TAIL,
    K_LAG,
    K_MISSING,
    CqTask,
    Replica,
    ScanTask,
)

_F: Final = {name: i for i, name in enumerate(ROW_FIELDS)}
#: The decoded fields compared, in the order a finding names them.
_FIELDS: Final = ("size", "body_crc", "topic", "queue_id", "queue_offset", "term")
_GOOD: Final = (None, A_BAD_CRC)

Row = tuple[Any, ...]
Finding = tuple[int, str, int | None, int | None, int, str | None, int | None, int | None, str]


def _f(row: Row, name: str) -> Any:
    return row[_F[name]]


def differing_fields(m: Row, r: Row, exact: bool) -> str:
    """What differs between a master record and the replica's record at the same offset
    ("" when nothing does): the decoded fields, else (exact) the bytes no field names."""
    named = [n for n in _FIELDS if _f(m, n) != _f(r, n)]
    if named or not exact:
        return ",".join(named)
    if _f(m, "dig_head") != _f(r, "dig_head"):
        return "header bytes"
    if _f(m, "dig_body") != _f(r, "dig_body"):
        return "body"
    if _f(m, "digest") != _f(r, "digest"):
        return "topic/properties or entry header"
    return ""


def _at(rid: int, kind: str, row: Row, detail: str, queue: bool = True) -> Finding:
    phy, size = _f(row, "phy_offset"), _f(row, "size")
    return (rid, kind, phy, phy + size, 1,
            _f(row, "topic") if queue else None, _f(row, "queue_id") if queue else None,
            _f(row, "queue_offset") if queue else None, detail)  # fmt: skip


def _run(rid: int, kind: str, rows: list[Row], detail: str) -> Finding:
    first, last = rows[0], rows[-1]
    return (rid, kind, _f(first, "phy_offset"), _f(last, "phy_offset") + _f(last, "size"),
            len(rows), None, None, None, f"{len(rows)} {detail}")  # fmt: skip


def compare_records(
    rid: int, master: dict[int, Row], mine: dict[int, Row], bounds: tuple[int, int, int, int],
    wins: list[tuple[int, int]], exact: bool,
) -> list[Finding]:
    """One replica's good records against its master's, over the decoded windows.
    ``bounds``: (replica first offset, replica end, master first offset, master end)."""
    r_lo, r_end, m_lo, m_end = bounds
    out: list[Finding] = []
    extra: list[Row] = []
    lag: list[Row] = []
    for phy in sorted(master.keys() | mine.keys()):
        m, r = master.get(phy), mine.get(phy)
        if m is not None and r is not None:
            what = differing_fields(m, r, exact)
            if what:
                out.append(_at(rid, K_DIVERGENT, r, f"differs from master in {what}"))
        elif r is not None:
            if m_lo <= phy < m_end:
                out.append(_at(rid, K_DIVERGENT, r, "no master record starts at this offset"))
            elif phy >= m_end:
                extra.append(r)
        elif m is not None and phy >= r_end:
            lag.append(m)
    if extra:
        out.append(_run(rid, K_EXTRA_TAIL, extra, "records beyond the master's end"))
    if lag:
        out.append(_run(rid, K_LAG, lag, "master records not yet on the replica"))
    out.extend(_missing(rid, master, mine, r_lo, r_end, wins))
    return out


def _missing(rid: int, master: dict[int, Row], mine: dict[int, Row], r_lo: int, r_end: int,
             wins: list[tuple[int, int]]) -> Iterator[Finding]:  # fmt: skip
    """Runs of consecutive master records the replica lacks inside its range, per window."""
    for a, b in wins:
        run: list[Row] = []
        for phy in sorted(p for p in master if a <= p < b):
            if r_lo <= phy < r_end and phy not in mine:
                run.append(master[phy])
                continue
            if run:
                yield _run(rid, K_MISSING, run, "master records missing")
                run = []
        if run:
            yield _run(rid, K_MISSING, run, "master records missing")


def compare_blanks(rid: int, master: dict[int, Row], mine: dict[int, Row]) -> list[Finding]:
    out: list[Finding] = []
    for phy, r in sorted(mine.items()):
        m = master.get(phy)
        if m is not None and (_f(m, "size"), _f(m, "digest")) != (_f(r, "size"), _f(r, "digest")):
            out.append(_at(rid, K_DIVERGENT, r,
                           "END_OF_FILE blank (header or padding) differs from master's",
                           queue=False))  # fmt: skip
    return out


def compare_cq_units(rid: int, master: dict[tuple[str, int, int], tuple[int, int, int]],
                     mine: dict[tuple[str, int, int], tuple[int, int, int]]) -> list[Finding]:
    """Units of the same (topic, queue, index) whose (offset, size, tags code) differ."""
    out: list[Finding] = []
    for key, (phy, size, tags) in sorted(mine.items()):
        m = master.get(key)
        if m is not None and m != (phy, size, tags):
            topic, qid, idx = key
            out.append((rid, K_CQ_MISMATCH, phy, phy + size, 1, topic, qid, idx,
                        f"cq unit {idx} differs from master's (offset, size or tags code)"))
    return out


def _decode(tasks: Iterable[ScanTask], scan: Callable[[ScanTask], Iterator[Row]]
            ) -> tuple[dict[int, dict[int, Row]], dict[int, dict[int, Row]], list[Finding]]:
    good: dict[int, dict[int, Row]] = {}
    blanks: dict[int, dict[int, Row]] = {}
    own: list[Finding] = []
    for task in tasks:
        for rid, *rest in scan(task):
            row = tuple(rest)
            anomaly = _f(row, "anomaly")
            if anomaly in _GOOD:
                good.setdefault(rid, {})[_f(row, "phy_offset")] = row
            elif anomaly == A_EOF_BLANK:
                blanks.setdefault(rid, {})[_f(row, "phy_offset")] = row
            else:
                own.append(_at(rid, anomaly, row, _f(row, "detail") or ""))
    return good, blanks, own


def window_findings(
    replicas: list[Replica], masters: dict[str, int], skip: frozenset[int],
    bounds: dict[int, tuple[int, int]], wins: dict[str, list[tuple[int, int]]],
    tasks: list[ScanTask], cq_tasks: list[CqTask], exact: bool,
    scan: Callable[[ScanTask], Iterator[Row]],
    scan_cq: Callable[[CqTask], Iterator[tuple[Any, ...]]],
) -> list[Finding]:
    """Every finding of the decoded windows: (rid, kind, offset, end, count, topic, queue,
    queue offset, detail).  ``bounds``: replica -> (first offset, end)."""
    good, blanks, out = _decode(tasks, scan)
    units: dict[int, dict[tuple[str, int, int], tuple[int, int, int]]] = {}
    for t in cq_tasks:
        for rid, topic, qid, idx, phy, size, tags in scan_cq(t):
            units.setdefault(rid, {})[(topic, qid, idx)] = (phy, size, tags)
    for rid, r in enumerate(replicas):
        m = masters[r.group]
        if rid == m or rid in skip or r.group not in wins:
            continue
        box = (*bounds[rid], *bounds[m])
        out += compare_records(rid, good.get(m, {}), good.get(rid, {}), box, wins[r.group], exact)
        out += compare_blanks(rid, blanks.get(m, {}), blanks.get(rid, {}))
        out += compare_cq_units(rid, units.get(m, {}), units.get(rid, {}))
    return out
