"""bench/vs_java.py's figures from its tools' output: pure (no processes, no I/O).

* the 10 ms send probe (bench/java/BenchClient.java ``probe``): one ``P <startEpochMs> <rtUs>
  <ok>`` line per send, ``M <addr>`` when the master it publishes to changes. ``probe_rt`` gives
  avg / p99 / max RT of the sends that started inside a window; ``recovery`` the time from a
  kill to the first send answered SEND_OK after it;
* the batch load (``rocketmq-batch``, ``nats-batch``): one ``BATCH ...`` line per 10 s;
* ``median_ratios``: ours over Apache's (or NATS's) per figure, each side the median of its runs;
* the benchmark Producer's and Consumer's 10 s lines (rocketmq-example 4.7.0), and the consumer
  case's steady state: ``caught_up_line`` finds the first Consumer line that shows it keeping up
  with the Producer (``CAUGHT_UP_S2C_MS``, ``CAUGHT_UP_TPS_FRACTION``), ``lines_mostly_in`` the
  lines a window holds; ``rebalance_adds`` reads the Java Consumer's own log of the queues it
  took at rebalance.
"""

from __future__ import annotations

import datetime
import functools
import itertools
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


# --------------------------------------------------------------------------- Producer, Consumer

#: "Send TPS: 1234 Max RT: 45 Average RT:   3.210 Send Failed: 0 Response Failed: 0"
PRODUCER_LINE_RE: Final = re.compile(r"Send TPS:\s*\d+")
_FIELD_RE: Final = re.compile(r"([A-Za-z][A-Za-z ]*?)\s*(?:\(ms\))?:\s*(-?\d+(?:\.\d+)?)")
_FIELD_NAMES: Final = {
    "Send TPS": "tps",
    "Max RT": "max_rt_ms",
    "Average RT": "avg_rt_ms",
    "Send Failed": "send_failed",
    "Response Failed": "response_failed",
}
#: "TPS: 1234 FAIL: 0 AVG(B2C) RT:   1.234 AVG(S2C) RT:   0.987 MAX(B2C) RT: 45 MAX(S2C) RT: 40"
#: (the Consumer tool of rocketmq-example 4.7.0; a line of a 10 s without a message prints NaN
#: averages and does not match); "Send TPS" lines are the Producer's.
CONSUMER_LINE_RE: Final = re.compile(
    r"(?<![A-Za-z] )\bTPS:\s*(\d+)\s+FAIL:\s*(\d+)\s+AVG\(B2C\) RT:\s*(-?[\d.]+)\s+"
    r"AVG\(S2C\) RT:\s*(-?[\d.]+)\s+MAX\(B2C\) RT:\s*(-?\d+)\s+MAX\(S2C\) RT:\s*(-?\d+)"
)
#: The Consumer's lines left out of its early figures (the first one holds its start-up).
CONSUMER_WARMUP_LINES: Final = 1
#: Both tools print a line every 10 s; its rates cover the 9 s before it (the first and last of
#: ten snapshots taken a second apart).
LINE_PERIOD_S: Final = 10.0
LINE_SPAN_S: Final = 9.0
#: A Consumer line shows the Consumer caught up when its average store-to-consume RT is below
#: this (a consumer working through a backlog is seconds behind; one keeping up, milliseconds)
CAUGHT_UP_S2C_MS: Final = 1000.0
#: ... and it consumed at least this fraction of what the Producer sent over the same 9 s.
CAUGHT_UP_TPS_FRACTION: Final = 0.9


def parse_producer_line(line: str) -> dict[str, float] | None:
    """One of the Producer tool's ten-second lines as numbers; None for any other line."""
    if PRODUCER_LINE_RE.search(line) is None:
        return None
    out: dict[str, float] = {}
    for name, value in _FIELD_RE.findall(line):
        key = _FIELD_NAMES.get(name.strip())
        if key is not None:
            out[key] = float(value) if "." in value else int(value)
    return out if "tps" in out else None


def parse_consumer_line(line: str) -> dict[str, float] | None:
    """One of the Consumer tool's ten-second lines as numbers; None for any other line."""
    m = CONSUMER_LINE_RE.search(line)
    if m is None:
        return None
    tps, failed, avg_b2c, avg_s2c, max_b2c, max_s2c = m.groups()
    try:
        return {
            "tps": int(tps), "consume_failed": int(failed),
            "avg_b2c_rt_ms": float(avg_b2c), "avg_s2c_rt_ms": float(avg_s2c),
            "max_b2c_rt_ms": int(max_b2c), "max_s2c_rt_ms": int(max_s2c),
        }
    except ValueError:  # "1.2.3": matched the pattern's digits and dots, not a number
        return None


def summarize_producer(lines: Sequence[Mapping[str, float]], warmup: int = 1) -> dict[str, Any]:
    """The Producer's figures over its lines after ``warmup``: TPS and average RT the mean of
    the lines; max RT and failures as its last line prints them (the tool's run so far)."""
    steady = lines[warmup:]
    if not steady:
        return {}
    return {
        "lines": len(steady),
        "tps": round(statistics.fmean(x["tps"] for x in steady)),
        "avg_rt_ms": round(statistics.fmean(x.get("avg_rt_ms", 0.0) for x in steady), 3),
        "max_rt_ms": steady[-1].get("max_rt_ms"),
        "send_failed": steady[-1].get("send_failed"),
        "response_failed": steady[-1].get("response_failed"),
    }


def summarize_consumer(
    lines: Sequence[Mapping[str, float]], skip: int = CONSUMER_WARMUP_LINES
) -> dict[str, Any]:
    """The Consumer's figures over its lines after the first ``skip``: TPS and average RTs the
    mean of the lines (each its own 10 s), max RT the largest it printed."""
    steady = lines[skip:]
    if not steady:
        return {}
    return {
        "lines": len(steady),
        "tps": round(statistics.fmean(x["tps"] for x in steady)),
        "avg_b2c_rt_ms": round(statistics.fmean(x["avg_b2c_rt_ms"] for x in steady), 3),
        "avg_s2c_rt_ms": round(statistics.fmean(x["avg_s2c_rt_ms"] for x in steady), 3),
        "max_b2c_rt_ms": max(x["max_b2c_rt_ms"] for x in steady),
        "max_s2c_rt_ms": max(x["max_s2c_rt_ms"] for x in steady),
        "consume_failed": sum(x["consume_failed"] for x in steady),
    }


@attrs.frozen
class Stamped:
    """A tool's 10 s line (its figures) and when the bench read it (monotonic seconds)."""

    at: float
    figures: Mapping[str, float]


def rate_over(
    lines: Sequence[Stamped], t0: float, t1: float, key: str = "tps", span: float = LINE_SPAN_S
) -> float | None:
    """The rate ``key`` over [t0, t1]: the lines' values, each weighted by how much of the
    ``span`` seconds before it overlaps the interval; None when no line overlaps it."""
    total = weight = 0.0
    for line in lines:
        overlap = min(t1, line.at) - max(t0, line.at - span)
        if overlap > 0:
            total += overlap * line.figures[key]
            weight += overlap
    return total / weight if weight > 0 else None


def caught_up_line(
    consumer: Sequence[Stamped], producer: Sequence[Stamped], *,
    skip: int = CONSUMER_WARMUP_LINES, max_s2c_ms: float = CAUGHT_UP_S2C_MS,
    min_fraction: float = CAUGHT_UP_TPS_FRACTION, span: float = LINE_SPAN_S,
) -> int | None:
    """The index of the first Consumer line after the first ``skip`` that shows it keeping up:
    its average S2C RT below ``max_s2c_ms`` and its TPS at least ``min_fraction`` of the
    Producer's over the same ``span`` seconds. A line is judged only once the Producer has
    printed a line at or after it (its span covered on both sides); None: none (yet)."""
    last_sent = producer[-1].at if producer else None
    for i, line in enumerate(consumer):
        if last_sent is None or line.at > last_sent:
            return None
        if i < skip or line.figures["avg_s2c_rt_ms"] >= max_s2c_ms:
            continue
        sent = rate_over(producer, line.at - span, line.at, span=span)
        if sent is not None and line.figures["tps"] >= min_fraction * sent:
            return i
    return None


def lines_between(lines: Sequence[Stamped], t0: float, t1: float) -> list[Mapping[str, float]]:
    """The figures of the lines read in (t0, t1]."""
    return [s.figures for s in lines if t0 < s.at <= t1]


def lines_mostly_in(
    lines: Sequence[Stamped], t0: float, t1: float, span: float = LINE_SPAN_S
) -> list[Mapping[str, float]]:
    """The figures of the lines whose ``span`` seconds lie mostly inside [t0, t1] (read in
    (t0 + span/2, t1 + span/2]); a window shorter than that: the first line read after
    t0 + span/2. A tool on its own 10 s phase, its lines matched to another's window."""
    half = span / 2
    inside = lines_between(lines, t0 + half, t1 + half)
    if inside:
        return inside
    after = [s for s in lines if s.at > t0 + half]
    return [after[0].figures] if after else []


def window_getters(
    getters: Mapping[str, Callable[[Mapping[str, Any]], Any]], prefix: str, key: str | None
) -> dict[str, Callable[[Mapping[str, Any]], Any]]:
    """``getters`` named ``prefix + name``, each reading the run's ``key`` part (None: the run
    itself): one table of figures for each window a run measured."""
    if key is None:
        return {prefix + name: get for name, get in getters.items()}
    return {prefix + name: functools.partial(_in_part, key, get) for name, get in getters.items()}


def _in_part(key: str, get: Callable[[Mapping[str, Any]], Any], run: Mapping[str, Any]) -> Any:
    return get(run[key])


# --------------------------------------------------------------------------- the Consumer's log

#: "2026-11-30 08:01:02,345 INFO RocketmqClient - doRebalance, G, add a new mq, MessageQueue
#: [topic=T, brokerName=broker-a, queueId=7]" (4.9.7 client log: RebalanceImpl, its layout)
_ADD_MQ_RE: Final = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .{0,200}? - doRebalance, \S{1,300}, add a new mq, "
    r"MessageQueue \[topic=(\S{1,300}), brokerName=\S{1,300}, queueId=(\d{1,9})\]"
)
_OFFSET_FAILED_RE: Final = re.compile(
    r" - doRebalance, \S{1,300}, (?:compute offset failed|add new mq failed), "
    r"MessageQueue \[topic=(\S{1,300}),"
)
_LOG_TIME_FORMAT: Final = "%Y-%m-%d %H:%M:%S,%f"


def rebalance_adds(text: str, topic: str, start_epoch_s: float) -> dict[str, Any]:
    """From a 4.x client's log: the queues of ``topic`` its rebalance took (each once), when the
    first and the last was taken (seconds after ``start_epoch_s``; the log's local time), how
    many additions failed (offset query failed or timed out: retried on the next rebalance,
    20 s later), and the time from one addition to the next (p50 / p99 / max ms: one
    synchronous QUERY_CONSUMER_OFFSET each, as the client saw it; the log's ms resolution)."""
    added: dict[int, float] = {}
    failed = 0
    for line in text.splitlines():
        m = _ADD_MQ_RE.match(line)
        if m is not None:
            if m[2] == topic:
                at = datetime.datetime.strptime(m[1], _LOG_TIME_FORMAT).timestamp()
                added.setdefault(int(m[3]), at)
            continue
        f = _OFFSET_FAILED_RE.search(line)
        if f is not None and f[1] == topic:
            failed += 1
    times = sorted(added.values())
    # one addition to the next: an offset query's round trip as the client saw it
    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(times)]
    return {
        "queues_added": len(added),
        "first_add_s": round(times[0] - start_epoch_s, 2) if times else None,
        "last_add_s": round(times[-1] - start_epoch_s, 2) if times else None,
        "failed_adds": failed,
        "add_gap_ms": {
            "p50": round(percentile(gaps, 0.5), 1), "p99": round(percentile(gaps, 0.99), 1),
            "max": round(max(gaps), 1),
        } if gaps else None,
    }
