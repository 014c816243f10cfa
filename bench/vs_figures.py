"""bench/vs_java.py's figures from its tools' output: pure (no processes, no I/O).

* the 10 ms send probe (bench/java/BenchClient.java ``probe``): one ``P <startEpochMs> <rtUs>
  <ok>`` line per send, ``M <addr>`` when the master it publishes to changes. ``probe_rt`` gives
  avg / p99 / max RT of the sends that started inside a window; ``recovery`` the time from a
  kill to the first send answered SEND_OK after it;
* the batch load (``rocketmq-batch``, ``nats-batch``): one ``BATCH ...`` line per 10 s;
* ``median_ratios``: ours over Apache's (or NATS's) per figure, each side the median of its runs.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

_PROBE_RE: Final = re.compile(r"^P (\d{1,15}) (\d{1,12}) ([01])$")
_MASTER_RE: Final = re.compile(r"^M (\S{1,200})$")
_BATCH_RE: Final = re.compile(
    r"BATCH msgs/s: (\d+) batches/s: (\d+) avg_ms: ([\d.]+) p99_ms: ([\d.]+) "
    r"max_ms: ([\d.]+) failed: (\d+)"
)


@attrs.frozen
class ProbeSend:
    """One probe send: when it started (epoch ms), how long it took (µs), SEND_OK or not."""

    start_ms: int
    rt_us: int
    ok: bool

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.rt_us / 1000


@attrs.frozen
class ProbeLog:
    sends: tuple[ProbeSend, ...]
    #: (index into ``sends`` of the first send to it, master address), in order
    masters: tuple[tuple[int, str], ...]


def parse_probe(text: str) -> ProbeLog:
    """The probe's output; any other line (the client's own logging) is skipped."""
    sends: list[ProbeSend] = []
    masters: list[tuple[int, str]] = []
    for line in text.splitlines():
        line = line.strip()
        m = _PROBE_RE.match(line)
        if m is not None:
            sends.append(ProbeSend(int(m[1]), int(m[2]), m[3] == "1"))
            continue
        m = _MASTER_RE.match(line)
        if m is not None:
            masters.append((len(sends), m[1]))
    return ProbeLog(tuple(sends), tuple(masters))


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in 0..1) of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def probe_rt(log: ProbeLog, t0_ms: float, t1_ms: float) -> dict[str, Any]:
    """avg / p99 / max RT (ms) of the probe's SEND_OK sends started in [t0_ms, t1_ms), and how
    many sends in it failed."""
    inside = [s for s in log.sends if t0_ms <= s.start_ms < t1_ms]
    ok = [s.rt_us / 1000 for s in inside if s.ok]
    if not ok:
        return {"sends": len(inside), "failed": len(inside)}
    return {
        "sends": len(inside),
        "failed": len(inside) - len(ok),
        "avg_rt_ms": round(statistics.fmean(ok), 3),
        "p99_rt_ms": round(percentile(ok, 0.99), 3),
        "max_rt_ms": round(max(ok), 3),
    }


def recovery(log: ProbeLog, kill_ms: float) -> dict[str, Any]:
    """After a kill at ``kill_ms`` (epoch ms): the time to the first SEND_OK of a send started
    after it, the sends that failed meanwhile, and the master the probe reached before and after
    (None when the probe names none)."""
    after = [s for s in log.sends if s.start_ms >= kill_ms]
    first_ok = next((i for i, s in enumerate(after) if s.ok), None)
    before_master = _master_at(log, len(log.sends) - len(after) - 1)
    if first_ok is None:
        return {"recovered": False, "failed_sends": len(after), "master_before": before_master}
    first = after[first_ok]
    return {
        "recovered": True,
        "first_send_ok_after_kill_ms": round(first.end_ms - kill_ms, 1),
        "failed_sends": sum(1 for s in after[:first_ok] if not s.ok),
        "master_before": before_master,
        "master_after": _master_at(log, len(log.sends) - len(after) + first_ok),
    }


def _master_at(log: ProbeLog, index: int) -> str | None:
    """The master the probe named last at or before send ``index``."""
    found = None
    for at, addr in log.masters:
        if at <= index:
            found = addr
    return found


def parse_batch_line(line: str) -> dict[str, float] | None:
    """One of the batch load's 10 s lines as numbers; None for any other line."""
    m = _BATCH_RE.search(line)
    if m is None:
        return None
    return {
        "msgs_per_s": int(m[1]), "batches_per_s": int(m[2]), "avg_rt_ms": float(m[3]),
        "p99_rt_ms": float(m[4]), "max_rt_ms": float(m[5]), "failed": int(m[6]),
    }


def summarize_batch(lines: Sequence[Mapping[str, float]], warmup: int) -> dict[str, Any]:
    """The batch load's figures over its lines after ``warmup``: rates and avg RT the mean of
    the lines, p99 the worst line's, max RT the largest (RTs are a whole batch's)."""
    steady = lines[warmup:]
    if not steady:
        return {}
    return {
        "lines": len(steady),
        "tps": round(statistics.fmean(x["msgs_per_s"] for x in steady)),
        "batches_per_s": round(statistics.fmean(x["batches_per_s"] for x in steady)),
        "avg_rt_ms": round(statistics.fmean(x["avg_rt_ms"] for x in steady), 3),
        "p99_rt_ms": max(x["p99_rt_ms"] for x in steady),
        "max_rt_ms": max(x["max_rt_ms"] for x in steady),
        "send_failed": sum(int(x["failed"]) for x in steady),
    }


def median_of(runs: Iterable[Mapping[str, Any]], get: Callable[[Mapping[str, Any]], Any]) -> (
    float | None
):
    """The median of ``get(run)`` over the runs where it is a number."""
    values = []
    for run in runs:
        try:
            v = get(run)
        except (KeyError, TypeError):
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            values.append(float(v))
    return statistics.median(values) if values else None


def median_ratios(
    runs: Sequence[Mapping[str, Any]],
    getters: Mapping[str, Callable[[Mapping[str, Any]], Any]],
    ours: str = "ours",
    base: str = "java",
) -> dict[str, dict[str, float | None]]:
    """Per figure: the median over the ``ours`` runs, over the ``base`` runs, and their ratio."""
    out: dict[str, dict[str, float | None]] = {}
    mine = [r for r in runs if r.get("kind") == ours and "error" not in r]
    theirs = [r for r in runs if r.get("kind") == base and "error" not in r]
    for name, get in getters.items():
        a, b = median_of(mine, get), median_of(theirs, get)
        out[name] = {
            ours: a, base: b, "ratio": round(a / b, 3) if a is not None and b else None,
        }
    return out
