"""bench/grpc_sdk.py's figures: what a client side prints, and what the bench makes of it (pure:
the standard library only, so the SDK's own venv can import it too).

A client side (the Python SDK, the Java SDK, our Python client and Apache's 4.x Java client, each
in a process of its own) prints one JSON line::

    {"client": "...", "phases": [{"name": "send_1", "count": 2000, "wall_s": 1.9,
                                  "latencies_ms": [...], "cpu_ticks": {"proxy": 41, ...}}]}

``cpu_ticks``: the utime + stime clock ticks (/proc/<pid>/stat) each named process spent during
the phase, -1 when it could not be read. ``phase_row`` turns a phase into figures; ``summarize``
takes the rows of every run to medians over the repeats, ours/Apache ratios and the proxy's
added latency (the same language's send through the proxy minus its send straight to the
broker over remoting, one in flight, p50 and p99).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: the phases a client side may report
PHASES = ("send_1", "send_k", "receive_ack")
#: through the proxy (gRPC) and straight to the broker (remoting), per language
PAIRS = {"python": ("python-sdk", "python-remoting"), "java": ("java-sdk", "java-remoting")}
#: the keys of a row that are not figures
ROW_LABELS = ("stack", "repeat", "client", "phase")
#: a client side's output line is refused past this many bytes (a latency list of 10^5 sends)
MAX_LINE_BYTES = 8 << 20


class FiguresError(ValueError):
    """A client side's output is not what it must be."""


# --------------------------------------------------------------------------- the client side


def cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid`` in clock ticks (-1 if it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return -1
    fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state is field 3
    try:
        return int(fields[11]) + int(fields[12])  # fields 14 and 15
    except (IndexError, ValueError):
        return -1


def parse_pids(spec: str) -> dict[str, int]:
    """``"proxy=12,broker=34"`` -> ``{"proxy": 12, "broker": 34}``."""
    out: dict[str, int] = {}
    for part in filter(None, spec.split(",")):
        name, _, pid = part.partition("=")
        out[name] = int(pid)
    return out


def read_ticks(pids: Mapping[str, int]) -> dict[str, int]:
    return {name: cpu_ticks(pid) for name, pid in pids.items()}


def phase_record(name: str, count: int, wall_s: float, latencies_ms: Sequence[float],
                 before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, Any]:
    ticks = {k: -1 if before[k] < 0 or after[k] < 0 else after[k] - before[k] for k in before}
    return {"name": name, "count": count, "wall_s": wall_s,
            "latencies_ms": [round(x, 4) for x in latencies_ms], "cpu_ticks": ticks}


# --------------------------------------------------------------------------- the bench's side


def parse_client_output(stdout: str) -> dict[str, Any]:
    """The last JSON line of a client side's stdout, checked: ``FiguresError`` otherwise."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise FiguresError("no JSON line in the client's output")
    if len(lines[-1]) > MAX_LINE_BYTES:
        raise FiguresError(f"the client's line is over {MAX_LINE_BYTES} bytes")
    try:
        out = json.loads(lines[-1])
    except ValueError as exc:
        raise FiguresError(f"the client's line is no JSON: {exc}") from None
    if not isinstance(out, dict) or not isinstance(out.get("phases"), list):
        raise FiguresError("the client's line has no phases")
    for phase in out["phases"]:
        _check_phase(phase)
    return out


def _check_phase(phase: object) -> None:
    if not isinstance(phase, dict) or phase.get("name") not in PHASES:
        raise FiguresError(f"not a phase: {str(phase)[:200]}")
    count, wall = phase.get("count"), phase.get("wall_s")
    if not isinstance(count, int) or count < 0 or not isinstance(wall, (int, float)) or wall <= 0:
        raise FiguresError(f"phase {phase['name']}: bad count or wall_s ({count}, {wall})")
    lat, ticks = phase.get("latencies_ms"), phase.get("cpu_ticks")
    if not isinstance(lat, list) or not all(isinstance(x, (int, float)) for x in lat):
        raise FiguresError(f"phase {phase['name']}: latencies_ms is no list of numbers")
    if not isinstance(ticks, dict) or not all(isinstance(v, int) for v in ticks.values()):
        raise FiguresError(f"phase {phase['name']}: cpu_ticks is no map of integers")


def check_received(out: Mapping[str, Any], want: int) -> None:
    """A receive_ack phase that got fewer than ``want`` messages (its deadline passed) fails the
    run rather than report the rate of a partial receive."""
    for phase in out["phases"]:
        if phase["name"] == "receive_ack" and phase["count"] < want:
            raise FiguresError(f"received {phase['count']} of {want} messages")


def percentile(values: Sequence[float], q: float) -> float:
    """The value at rank ``q`` of the sorted values (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def phase_row(phase: Mapping[str, Any], clk_tck: int) -> dict[str, Any]:
    """A phase's figures: msgs/s, latency p50/p99/max (ms) when timed, and each process's
    CPU per message (µs; absent when it could not be read)."""
    count, lat = phase["count"], phase["latencies_ms"]
    row: dict[str, Any] = {"msgs": count, "msgs_per_s": round(count / phase["wall_s"], 1)}
    if lat:
        row |= {"p50_ms": round(percentile(lat, 0.50), 3),
                "p99_ms": round(percentile(lat, 0.99), 3), "max_ms": round(max(lat), 3)}
    for name, ticks in phase["cpu_ticks"].items():
        if ticks >= 0 and count:
            row[f"{name}_cpu_us_per_msg"] = round(ticks / clk_tck * 1e6 / count, 1)
    return row


def client_rows(out: Mapping[str, Any], stack: str, repeat: int, clk_tck: int
                ) -> list[dict[str, Any]]:
    return [{"stack": stack, "repeat": repeat, "client": out["client"], "phase": p["name"],
             **phase_row(p, clk_tck)} for p in out["phases"]]


def medians(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """stack -> client -> phase -> key -> the median over the repeats."""
    grouped: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for row in rows:
        values = grouped.setdefault((row["stack"], row["client"], row["phase"]), {})
        for key, value in row.items():
            if key not in ROW_LABELS:
                values.setdefault(key, []).append(value)
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for (stack, client, phase), values in sorted(grouped.items()):
        out.setdefault(stack, {}).setdefault(client, {})[phase] = {
            k: round(statistics.median(v), 3) for k, v in values.items()}
    return out


def ratios(med: Mapping[str, Any], num: str = "ours", den: str = "apache") -> dict[str, Any]:
    """client -> phase -> key -> ``num``'s median over ``den``'s (the figures both have, not
    the message count)."""
    out: dict[str, Any] = {}
    for client, phases in med.get(num, {}).items():
        for phase, figures in phases.items():
            base = med.get(den, {}).get(client, {}).get(phase, {})
            got = {k: round(v / base[k], 3) for k, v in figures.items()
                   if k != "msgs" and base.get(k)}
            if got:
                out.setdefault(client, {})[phase] = got
    return out


def added_latency(med: Mapping[str, Any]) -> dict[str, Any]:
    """stack -> language -> the proxy's added send latency (ms, one in flight): the SDK's p50
    and p99 through the proxy minus the remoting client's straight to the broker; and the
    proxy's CPU per send (µs) in the SDK's one-in-flight and k-in-flight phases."""
    out: dict[str, Any] = {}
    for stack, clients in med.items():
        for language, (sdk, direct) in PAIRS.items():
            via = clients.get(sdk, {}).get("send_1")
            base = clients.get(direct, {}).get("send_1")
            if not via or not base or "p50_ms" not in via or "p50_ms" not in base:
                continue
            entry = {f"added_{q}_ms": round(via[f"{q}_ms"] - base[f"{q}_ms"], 3)
                     for q in ("p50", "p99")}
            entry |= {f"via_proxy_{q}_ms": via[f"{q}_ms"] for q in ("p50", "p99")}
            entry |= {f"direct_{q}_ms": base[f"{q}_ms"] for q in ("p50", "p99")}
            for phase in ("send_1", "send_k"):
                cpu = clients.get(sdk, {}).get(phase, {}).get("proxy_cpu_us_per_msg")
                if cpu is not None:
                    entry[f"proxy_cpu_us_per_send_{phase}"] = cpu
            out.setdefault(stack, {})[language] = entry
    return out
