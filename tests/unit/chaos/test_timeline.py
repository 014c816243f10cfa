"""The chaos timeline SVG and ``chaos check`` reading the run's mode from its history."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.chaos import cli as chaos_cli
from rmq_cluster.chaos.checker import (
    HistoryError,
    check,
    check_file,
    recorded_mode,
    recorded_orderly_topics,
)
from rmq_cluster.chaos.timeline import fault_windows, per_second, render_svg
from rmq_cluster.deploy.supervisor import SupervisorError

SVG = "{http://www.w3.org/2000/svg}"


def run_history(mode: str | None = "SYNC", *, lose: bool = False) -> list[dict[str, Any]]:
    """A small run: 10 s of sends at 10/s, broker-a killed at 3 s and healed at 5 s (its
    sends fail meanwhile), broker-b untouched; everything acked is received."""
    start: dict[str, Any] = {"t": 0.0, "type": "phase", "name": "start", "profile": "2m-2s-sync",
                             "fault": "kill-master", "seed": 7, "orderly_topics": ["Ord"]}
    if mode is not None:
        start["mode"] = mode
    events: list[dict[str, Any]] = [start]
    n = 0
    for tenth in range(100):
        t = tenth / 10
        broker = "broker-a" if tenth % 2 else "broker-b"
        i = f"p0-{n}"
        n += 1
        events.append({"t": t, "type": "invoke", "id": i, "topic": "T"})
        if broker == "broker-a" and 3.0 <= t < 5.0:
            events.append({"t": t + 0.01, "type": "fail", "id": i, "error": "down"})
            continue
        events.append({"t": t + 0.01, "type": "ok", "id": i, "status": "SEND_OK",
                       "broker": broker, "queue": 0, "offset": tenth, "phy": tenth})
        if not (lose and tenth == 11):
            events.append({"t": t + 0.02, "type": "receive", "id": i, "broker": broker,
                           "queue": 0, "offset": tenth})
    events.append({"t": 3.0, "type": "fault", "phase": "start", "fault": "kill-master",
                   "group": "broker-a", "nodes": ["broker-a"]})
    events.append({"t": 5.0, "type": "fault", "phase": "end", "fault": "kill-master",
                   "group": "broker-a", "nodes": ["broker-a"]})
    events.append({"t": 9.0, "type": "phase", "name": "heal"})
    events.append({"t": 10.5, "type": "phase", "name": "drain"})
    events.sort(key=lambda ev: ev["t"])
    return events


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(ev) + "\n" for ev in events))
    return path


def test_per_second_and_fault_windows() -> None:
    events = run_history()
    assert per_second(events, ("invoke",), 10) == [10] * 10
    fails = per_second(events, ("fail", "unknown"), 10)
    assert fails == [0, 0, 0, 5, 5, 0, 0, 0, 0, 0]
    assert fault_windows(events, 10.5) == [(3.0, 5.0, "kill-master broker-a")]
    # a fault still open when the history ends lasts to its end
    assert fault_windows(events[:-3], 10.0)[0][1] == 5.0
    open_only = [ev for ev in events if not (ev["type"] == "fault" and ev["phase"] == "end")]
    assert fault_windows(open_only, 10.5) == [(3.0, 10.5, "kill-master broker-a")]


def test_svg_shows_series_faults_recovery_and_verdict() -> None:
    events = run_history()
    result = {**check(events, mode="SYNC").to_json(), "profile": "2m-2s-sync",
              "fault": "kill-master", "seed": 7}
    svg = render_svg(events, result)
    root = ET.fromstring(svg)  # well-formed XML
    assert root.tag == f"{SVG}svg"
    by_class: dict[str, list[ET.Element]] = {}
    for el in root.iter():
        if el.get("class"):
            by_class.setdefault(el.get("class", ""), []).append(el)
    assert len(by_class["series"]) == 3
    assert len(by_class["fault"]) == 1 and len(by_class["phase"]) == 2
    assert len(by_class["recovery"]) == 1  # broker-a ok again after the heal
    fault = by_class["fault"][0]
    # the shaded window spans 3 s .. 5 s of the 11 s axis
    x0, width = float(fault.get("x", "0")), float(fault.get("width", "0"))
    plot = 960 - 56 - 16
    assert x0 == pytest.approx(56 + plot * 3 / 11, abs=0.2)
    assert width == pytest.approx(plot * 2 / 11, abs=0.2)
    assert "PASS (SYNC)" in root.findtext(f"{SVG}title", "")
    # self-contained: nothing to fetch
    assert "href" not in svg and "<script" not in svg and svg.count("http") == 1  # the xmlns


def test_svg_survives_hostile_histories() -> None:
    hostile: list[dict[str, Any]] = [
        {"t": "x", "type": "invoke"}, {"t": float("nan"), "type": "ok"},
        {"t": -5, "type": "fail"}, {"t": 1e12, "type": "receive"},
        {"t": 1, "type": "fault", "phase": "start", "fault": "<script>&", "nodes": [1, None]},
        {"t": 2, "type": "fault", "phase": "end"},
        {"t": 2, "type": "phase", "name": "heal"},
    ]
    svg = render_svg(hostile[:4] + hostile[4:], {"faults": [{"recovery_s": "?"}, 7],
                                                  "verdict": "<b>"})
    ET.fromstring(svg)
    assert "<script>" not in svg and "&lt;script&gt;&amp;" in svg
    ET.fromstring(render_svg([]))


@given(st.lists(st.fixed_dictionaries({
    "t": st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=3)),
    "type": st.sampled_from(["invoke", "ok", "fail", "unknown", "fault", "phase", "x"]),
    "phase": st.sampled_from(["start", "end"]),
    "name": st.sampled_from(["heal", "drain", "start"]),
}), max_size=30))
def test_svg_is_always_well_formed(events: list[dict[str, Any]]) -> None:
    ET.fromstring(render_svg(events))


def test_check_reads_the_recorded_mode_and_orderly_topics(tmp_path: Path) -> None:
    events = run_history("ASYNC")
    assert recorded_mode(events) == "ASYNC"
    assert recorded_orderly_topics(events) == ["Ord"]
    assert check_file(str(_write(tmp_path, events))).mode == "ASYNC"
    with pytest.raises(HistoryError, match="no mode"):
        recorded_mode(run_history(None))
    with pytest.raises(HistoryError, match="not one of"):
        recorded_mode(run_history("MAYBE"))


def _check_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rmq_cluster.cli", "chaos", "check", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_chaos_check_cli_without_mode(tmp_path: Path) -> None:
    history = _write(tmp_path, run_history("SYNC"))
    svg = tmp_path / "t.svg"
    done = _check_cli(str(history), "--json", "--timeline", str(svg))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["mode"] == "SYNC"
    ET.fromstring(svg.read_text())
    # --mode still overrides what the history says
    done = _check_cli(str(history), "--mode", "ASYNC", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["mode"] == "ASYNC"
    # a lost acked message: exit 1
    lost = _write(tmp_path, run_history("SYNC", lose=True))
    done = _check_cli(str(lost), "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["lost"] == 1
    # no recorded mode: one line, exit 2
    bare = _write(tmp_path, run_history(None))
    done = _check_cli(str(bare))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "rmq-cluster chaos: error: the history records no mode (no 'phase start' event with "
        "a mode): pass --mode"
    ]


def test_run_errors_are_one_line_even_inside_exception_groups() -> None:
    busy = OSError(98, "Address already in use")
    cancelled = trio.Cancelled._create()  # type: ignore[attr-defined]
    group = BaseExceptionGroup("nursery", [ExceptionGroup("inner", [busy]), cancelled])
    assert chaos_cli._one_line(group) == "[Errno 98] Address already in use"
    assert chaos_cli._one_line(SupervisorError("port 1 busy\nmore")) == "port 1 busy"
    assert chaos_cli._one_line(ExceptionGroup("x", [busy, KeyError("bug")])) is None
    assert chaos_cli._one_line(RuntimeError("bug")) is None
