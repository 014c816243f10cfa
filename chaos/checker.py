"""The chaos checker (pure: a history in, a verdict out; no trio, no sockets, no clock).

A history is the JSONL file the workload writes, one event per line (``t`` is seconds since
the run started, on the runner's monotonic clock)::

    {"t": 1.20, "type": "invoke",  "id": "p0-17", "topic": "T", "key": "k3", "seq": 5}
    {"t": 1.23, "type": "ok",      "id": "p0-17", "status": "SEND_OK", "msg_id": "...",
     "broker": "broker-a", "queue": 2, "offset": 41, "phy": 12345}
    {"t": 4.20, "type": "unknown", "id": "p0-18", "error": "timeout"}
    {"t": 1.30, "type": "fail",    "id": "p0-19", "error": "..."}
    {"t": 1.31, "type": "receive", "id": "p0-17", "broker": "broker-a", "queue": 2, "offset": 41}
    {"t": 9.00, "type": "fault",   "phase": "start", "fault": "kill-master", "group": "broker-a",
     "nodes": ["broker-a"], "window": {"broker-a": 12000}}
    {"t": 14.0, "type": "fault",   "phase": "end",   "fault": "kill-master", "group": "broker-a"}
    {"t": 20.0, "type": "phase",   "name": "heal"}

Following openmessaging-chaos (MQChecker, OrderChecker, RecoveryChecker, RTOChecker):

* **acked**: sends answered SEND_OK (the promise is about these); ``ok`` with another status
  (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE, ...) is counted apart, promised nothing;
* **lost**: acked, never received;
* **duplicated**: ids received more than once, split into *redelivered* (same broker, queue
  and offset again) and *stored twice* (a client retry stored it at two positions);
* **phantom**: received without any invoke (must never happen);
* **unknown**: timeouts and broken connections; how many were received anyway;
* **order**: per (topic, key) of an orderly topic, the acked sequence numbers must be received
  in increasing order (first receive of each id);
* **unavailability**: the longest gap without a successful send, and openchaos' windows (first
  failed/unknown invoke to the next ok);
* **recovery** per fault: fault start to the first ok on the affected group that was invoked
  after the fault started, and heal to that ok.

Verdict by mode: ``SYNC`` (SYNC_MASTER), ``DLEDGER`` and ``NONE`` (no replica; a process
kill keeps the page cache, so a restarted broker still has everything) promise 0 lost acked
messages; ``ASYNC`` allows the loss of acked messages stored in a group at or after the
slave's CommitLog max offset when its master died (the replication window, recorded by the
fault as ``window``), and reports them; a loss outside a window breaks the promise. Order
violations and phantoms always break it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

MODE_SYNC: Final = "SYNC"
MODE_ASYNC: Final = "ASYNC"
MODE_DLEDGER: Final = "DLEDGER"
MODE_NONE: Final = "NONE"
MODES: Final = (MODE_SYNC, MODE_ASYNC, MODE_DLEDGER, MODE_NONE)

STATUS_SEND_OK: Final = "SEND_OK"
VERDICT_PASS: Final = "PASS"
VERDICT_FAIL: Final = "FAIL"
#: Examples of each problem kept in the result (the counts are complete).
MAX_EXAMPLES: Final = 20

EV_INVOKE: Final = "invoke"
EV_OK: Final = "ok"
EV_FAIL: Final = "fail"
EV_UNKNOWN: Final = "unknown"
EV_RECEIVE: Final = "receive"
EV_FAULT: Final = "fault"
EV_PHASE: Final = "phase"


class HistoryError(ValueError):
    """A history line that is not an event (says which line)."""


def parse_history(lines: Iterable[str | bytes]) -> list[dict[str, Any]]:
    """Events from JSONL lines; blank lines are skipped, a bad line raises HistoryError."""
    events = []
    for n, line in enumerate(lines, 1):
        text = line.decode() if isinstance(line, bytes) else line
        if not text.strip():
            continue
        try:
            ev = json.loads(text)
        except ValueError as exc:
            raise HistoryError(f"history line {n}: not JSON: {exc}") from None
        if not isinstance(ev, dict) or "type" not in ev or "t" not in ev:
            raise HistoryError(f"history line {n}: an event needs 'type' and 't'")
        events.append(ev)
    return events


@attrs.frozen
class FaultReport:
    fault: str
    group: str | None
    nodes: tuple[str, ...]
    start_s: float
    end_s: float | None
    #: fault start -> first ok on the affected group invoked after the start (None: never).
    recovery_s: float | None
    #: fault end (heal) -> that same ok, when it came after the heal.
    heal_to_ok_s: float | None
    #: ASYNC: group -> the slave's CommitLog max offset when the master died.
    window: Mapping[str, int] = attrs.field(factory=dict)
    #: p99 latency of the successful sends invoked during the fault (any group), ms.
    latency_p99_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "group": self.group,
            "nodes": list(self.nodes),
            "start_s": _r(self.start_s),
            "end_s": _r(self.end_s),
            "recovery_s": _r(self.recovery_s),
            "heal_to_ok_s": _r(self.heal_to_ok_s),
            "window": dict(self.window),
            "latency_p99_ms": _r(self.latency_p99_ms),
        }


@attrs.frozen
class CheckResult:
    mode: str
    verdict: str
    reasons: tuple[str, ...]
    invoked: int
    acked: int
    acked_weak: int
    failed: int
    unknown: int
    unknown_received: int
    failed_but_received: int
    received: int
    received_unique: int
    lost: int
    lost_in_window: int
    lost_outside_window: int
    duplicated: int
    redelivered: int
    stored_twice: int
    phantom: int
    order_violations: int
    unavailable_max_s: float
    unavailable_windows: tuple[tuple[float, float], ...]
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    faults: tuple[FaultReport, ...]
    examples: Mapping[str, tuple[str, ...]]

    @property
    def passed(self) -> bool:
        return self.verdict == VERDICT_PASS

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "invoked": self.invoked,
            "acked": self.acked,
            "acked_weak": self.acked_weak,
            "failed": self.failed,
            "unknown": self.unknown,
            "unknown_received": self.unknown_received,
            "failed_but_received": self.failed_but_received,
            "received": self.received,
            "received_unique": self.received_unique,
            "lost": self.lost,
            "lost_in_window": self.lost_in_window,
            "lost_outside_window": self.lost_outside_window,
            "duplicated": self.duplicated,
            "redelivered": self.redelivered,
            "stored_twice": self.stored_twice,
            "phantom": self.phantom,
            "order_violations": self.order_violations,
            "unavailable_max_s": _r(self.unavailable_max_s),
            "unavailable_windows": [[_r(a), _r(b)] for a, b in self.unavailable_windows],
            "latency_p50_ms": _r(self.latency_p50_ms),
            "latency_p99_ms": _r(self.latency_p99_ms),
            "faults": [f.to_json() for f in self.faults],
            "examples": {k: list(v) for k, v in self.examples.items()},
        }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _pos(ev: Mapping[str, Any]) -> tuple[str, int, int]:
    return (str(ev.get("broker")), int(ev.get("queue", -1)), int(ev.get("offset", -1)))


def check(
    events: Sequence[Mapping[str, Any]],
    *,
    mode: str,
    orderly_topics: Iterable[str] = (),
) -> CheckResult:
    """Check a history against ``mode``'s promise (see the module text)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    orderly = set(orderly_topics)
    invokes, outcome, receives, receive_order, fault_events = _by_kind(events)

    acked = {i: o for i, o in outcome.items() if o["type"] == EV_OK
             and o.get("status", STATUS_SEND_OK) == STATUS_SEND_OK}
    weak = {i for i, o in outcome.items() if o["type"] == EV_OK and i not in acked}
    failed = {i for i, o in outcome.items() if o["type"] == EV_FAIL}
    unknown = {i for i, o in outcome.items() if o["type"] == EV_UNKNOWN}
    # an invoke without an outcome (the run ended while it was in flight) is unknown too
    unknown |= {i for i in invokes if i not in outcome}

    faults = _fault_reports(fault_events, outcome, invokes)
    windows = [f for f in faults if f.window]

    lost_ids = sorted(i for i in acked if i not in receives)
    in_window = [i for i in lost_ids if mode == MODE_ASYNC and _in_window(acked[i], windows)]
    outside = sorted(set(lost_ids) - set(in_window))  # lost_ids is sorted: the same order
    redelivered, stored_twice = _duplicates(receives)
    phantom = sorted(i for i in receives if i not in invokes)

    order_bad = _order_violations(receive_order, invokes, acked, orderly)
    latencies = _latencies(outcome, invokes, None, None)
    gap, gaps = _unavailability(events)

    reasons = _reasons(mode, lost_ids, outside, phantom, order_bad)

    examples = {
        "lost": tuple(lost_ids[:MAX_EXAMPLES]),
        "lost_outside_window": tuple(outside[:MAX_EXAMPLES]),
        "stored_twice": tuple(sorted(stored_twice)[:MAX_EXAMPLES]),
        "redelivered": tuple(sorted(redelivered)[:MAX_EXAMPLES]),
        "phantom": tuple(phantom[:MAX_EXAMPLES]),
        "order": tuple(order_bad[:MAX_EXAMPLES]),
    }
    return CheckResult(
        mode=mode,
        verdict=VERDICT_FAIL if reasons else VERDICT_PASS,
        reasons=tuple(reasons),
        invoked=len(invokes),
        acked=len(acked),
        acked_weak=len(weak),
        failed=len(failed),
        unknown=len(unknown),
        unknown_received=sum(1 for i in unknown if i in receives),
        failed_but_received=sum(1 for i in failed if i in receives),
        received=len(receive_order),
        received_unique=len(receives),
        lost=len(lost_ids),
        lost_in_window=len(in_window),
        lost_outside_window=len(outside) if mode == MODE_ASYNC else len(lost_ids),
        duplicated=len(redelivered) + len(stored_twice),
        redelivered=len(redelivered),
        stored_twice=len(stored_twice),
        phantom=len(phantom),
        order_violations=len(order_bad),
        unavailable_max_s=gap,
        unavailable_windows=tuple(gaps),
        latency_p50_ms=_percentile(latencies, 50),
        latency_p99_ms=_percentile(latencies, 99),
        faults=tuple(faults),
        examples=examples,
    )


def _by_kind(events: Sequence[Mapping[str, Any]]) -> tuple[
    dict[str, Mapping[str, Any]],
    dict[str, Mapping[str, Any]],
    dict[str, list[Mapping[str, Any]]],
    list[Mapping[str, Any]],
    list[Mapping[str, Any]],
]:
    """The history sorted by event kind: (invokes by id, outcome by id, receives by id,
    receives in order, faults)."""
    invokes: dict[str, Mapping[str, Any]] = {}
    outcome: dict[str, Mapping[str, Any]] = {}
    receives: dict[str, list[Mapping[str, Any]]] = {}
    receive_order: list[Mapping[str, Any]] = []
    fault_events: list[Mapping[str, Any]] = []
    for ev in events:
        kind = ev["type"]
        if kind == EV_INVOKE:
            invokes[str(ev["id"])] = ev
        elif kind in (EV_OK, EV_FAIL, EV_UNKNOWN):
            outcome[str(ev["id"])] = ev
        elif kind == EV_RECEIVE:
            receives.setdefault(str(ev["id"]), []).append(ev)
            receive_order.append(ev)
        elif kind == EV_FAULT:
            fault_events.append(ev)
    return invokes, outcome, receives, receive_order, fault_events


def _duplicates(receives: Mapping[str, list[Mapping[str, Any]]]) -> tuple[list[str], list[str]]:
    """Ids received more than once: (redelivered from one stored copy, stored twice)."""
    redelivered: list[str] = []
    stored_twice: list[str] = []
    for i, evs in receives.items():
        if len(evs) < 2:
            continue
        if len({_pos(e) for e in evs}) > 1:
            stored_twice.append(i)
        else:
            redelivered.append(i)
    return redelivered, stored_twice


def _reasons(
    mode: str, lost_ids: list[str], outside: list[str], phantom: list[str], order_bad: list[str]
) -> list[str]:
    """Why the history breaks ``mode``'s promise; empty when it keeps it."""
    reasons: list[str] = []
    if mode == MODE_ASYNC:
        if outside:
            reasons.append(
                f"{len(outside)} acked messages lost outside the replication window"
            )
    elif lost_ids:
        reasons.append(f"{len(lost_ids)} acked (SEND_OK) messages lost")
    if phantom:
        reasons.append(f"{len(phantom)} messages received that were never sent")
    if order_bad:
        reasons.append(f"{len(order_bad)} per-key order violations")
    return reasons


def _in_window(ok: Mapping[str, Any], windows: Sequence[FaultReport]) -> bool:
    """An acked message is inside a replication window when it was acked before the master
    died and stored at or after the slave's max offset at that moment."""
    phy = ok.get("phy")
    group = ok.get("broker")
    if phy is None or group is None:
        return False
    return any(
        group in f.window and int(phy) >= int(f.window[group]) and float(ok["t"]) <= (
            f.end_s if f.end_s is not None else float("inf"))
        for f in windows
    )


def _order_violations(
    receive_order: Sequence[Mapping[str, Any]],
    invokes: Mapping[str, Mapping[str, Any]],
    acked: Mapping[str, Mapping[str, Any]],
    orderly: set[str],
) -> list[str]:
    """Ids of acked orderly messages received after a later message of the same key."""
    if not orderly:
        return []
    seen: set[str] = set()
    highest: dict[tuple[str, str], int] = {}
    bad: list[str] = []
    for ev in receive_order:
        i = str(ev["id"])
        inv = invokes.get(i)
        if i in seen or inv is None or i not in acked or inv.get("topic") not in orderly:
            continue
        seen.add(i)
        key = (str(inv.get("topic")), str(inv.get("key")))
        seq = int(inv.get("seq", 0))
        top = highest.get(key)
        if top is not None and seq < top:
            bad.append(i)
        else:
            highest[key] = seq
    return bad


def _unavailability(
    events: Sequence[Mapping[str, Any]],
) -> tuple[float, list[tuple[float, float]]]:
    """(longest gap between successful sends, openchaos windows from the first failed or
    unknown send to the next ok), over the span of the workload's sends."""
    invoke_t: dict[str, float] = {}
    oks: list[float] = []
    bad: list[float] = []
    for ev in events:
        kind = ev["type"]
        if kind == EV_INVOKE:
            invoke_t[str(ev["id"])] = float(ev["t"])
        elif kind == EV_OK:
            oks.append(float(ev["t"]))
        elif kind in (EV_FAIL, EV_UNKNOWN):
            bad.append(invoke_t.get(str(ev["id"]), float(ev["t"])))
    if not invoke_t:
        return 0.0, []
    first = min(invoke_t.values())
    last = max([*oks, *bad, max(invoke_t.values())])
    marks = sorted([first, *oks, last])
    gap = max((b - a for a, b in itertools.pairwise(marks)), default=0.0)
    windows: list[tuple[float, float]] = []
    oks.sort()
    bad.sort()
    j = 0
    for start in bad:
        if windows and start <= windows[-1][1]:
            continue
        while j < len(oks) and oks[j] < start:
            j += 1
        end = oks[j] if j < len(oks) else last
        windows.append((start, end))
    return gap, windows


def _percentile(values: Sequence[float], pct: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def _latencies(
    outcome: Mapping[str, Mapping[str, Any]],
    invokes: Mapping[str, Mapping[str, Any]],
    t0: float | None,
    t1: float | None,
) -> list[float]:
    """Milliseconds from invoke to ok of the sends invoked in [t0, t1) (None: unbounded)."""
    out = []
    for i, o in outcome.items():
        inv = invokes.get(i)
        if o["type"] != EV_OK or inv is None:
            continue
        t = float(inv["t"])
        if (t0 is None or t >= t0) and (t1 is None or t < t1):
            out.append((float(o["t"]) - t) * 1000.0)
    return out


def _fault_reports(
    fault_events: Sequence[Mapping[str, Any]],
    outcome: Mapping[str, Mapping[str, Any]],
    invokes: Mapping[str, Mapping[str, Any]],
) -> list[FaultReport]:
    open_faults: list[dict[str, Any]] = []
    closed: list[dict[str, Any]] = []
    for ev in fault_events:
        if ev.get("phase") == "start":
            open_faults.append({"start": ev, "end": None})
        elif ev.get("phase") == "end":
            for f in reversed(open_faults):
                if f["start"].get("fault") == ev.get("fault") and f["end"] is None:
                    f["end"] = ev
                    open_faults.remove(f)
                    closed.append(f)
                    break
    everything = sorted(closed + open_faults, key=lambda f: float(f["start"]["t"]))
    oks = sorted(
        (float(o["t"]), str(o.get("broker")), float(invokes.get(i, o).get("t", o["t"])))
        for i, o in outcome.items()
        if o["type"] == EV_OK
    )
    reports = []
    for f in everything:
        start = f["start"]
        t0 = float(start["t"])
        t1 = float(f["end"]["t"]) if f["end"] is not None else None
        group = start.get("group")
        first_ok = next(
            (t for t, broker, t_inv in oks
             if t_inv >= t0 and (group is None or broker == group)),
            None,
        )
        recovery = None if first_ok is None else first_ok - t0
        heal = None if first_ok is None or t1 is None else max(0.0, first_ok - t1)
        window = {str(k): int(v) for k, v in (start.get("window") or {}).items()}
        reports.append(
            FaultReport(
                fault=str(start.get("fault")),
                group=group,
                nodes=tuple(start.get("nodes") or ()),
                start_s=t0,
                end_s=t1,
                recovery_s=recovery,
                heal_to_ok_s=heal,
                window=window,
                latency_p99_ms=_percentile(_latencies(outcome, invokes, t0, t1), 99),
            )
        )
    return reports


def recorded_run(events: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The run's ``phase start`` event (profile, fault, seed, mode, orderly topics); ``{}``
    when the history has none."""
    for ev in events:
        if ev.get("type") == EV_PHASE and ev.get("name") == "start":
            return ev
    return {}


def recorded_mode(events: Sequence[Mapping[str, Any]]) -> str:
    """The mode the run recorded (HistoryError when it recorded none or a bad one)."""
    mode = recorded_run(events).get("mode")
    if mode is None:
        raise HistoryError("the history records no mode (no 'phase start' event with a "
                           "mode): pass --mode")
    if mode not in MODES:
        raise HistoryError(f"the history records mode {mode!r}, not one of {', '.join(MODES)}")
    return str(mode)


def recorded_orderly_topics(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The orderly topics the run recorded (none when it recorded none)."""
    topics = recorded_run(events).get("orderly_topics") or []
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise HistoryError("the history's orderly_topics is not a list of topic names")
    return topics


def check_file(path: str, *, mode: str | None = None,
               orderly_topics: Iterable[str] | None = None) -> CheckResult:
    """Check a history file (reading it is the only IO here); ``mode`` and
    ``orderly_topics`` default to what the run recorded in the history."""
    with open(path, encoding="utf-8") as f:
        events = parse_history(f)
    return check(
        events,
        mode=recorded_mode(events) if mode is None else mode,
        orderly_topics=recorded_orderly_topics(events) if orderly_topics is None
        else orderly_topics,
    )


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def summary_rows(result: CheckResult) -> list[tuple[str, str]]:
    """(label, value) rows for the summary table."""
    rows = [
        ("mode", result.mode),
        ("verdict", result.verdict),
        ("invoked", str(result.invoked)),
        ("acked (SEND_OK)", str(result.acked)),
        ("ok, other status", str(result.acked_weak)),
        ("failed", str(result.failed)),
        ("unknown (received)", f"{result.unknown} ({result.unknown_received})"),
        ("received (unique)", f"{result.received} ({result.received_unique})"),
        ("lost acked", str(result.lost)),
        ("  in replication window", str(result.lost_in_window)),
        ("duplicated", f"{result.duplicated} (redelivered {result.redelivered}, "
                       f"stored twice {result.stored_twice})"),
        ("phantom", str(result.phantom)),
        ("order violations", str(result.order_violations)),
        ("longest gap without ok (s)", f"{result.unavailable_max_s:.3f}"),
        ("send latency p50 / p99 (ms)", f"{_ms(result.latency_p50_ms)} / "
                                        f"{_ms(result.latency_p99_ms)}"),
    ]
    for n, f in enumerate(result.faults, 1):
        rec = "-" if f.recovery_s is None else f"{f.recovery_s:.2f}s"
        heal = "-" if f.heal_to_ok_s is None else f"{f.heal_to_ok_s:.2f}s"
        rows.append((f"fault {n}: {f.fault} {','.join(f.nodes)}",
                     f"at {f.start_s:.1f}s, recovered {rec}, after heal {heal}"))
    for reason in result.reasons:
        rows.append(("broken", reason))
    return rows
