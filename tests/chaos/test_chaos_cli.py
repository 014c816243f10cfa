"""``rmq-cluster chaos run`` through the real CLI in a subprocess: progress on stderr while
``--json`` keeps stdout for the result, one-line errors, the timeline beside result.json and
``chaos check`` without ``--mode``."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rmq_cluster.chaos.cluster import free_proxied_base_port
from rmq_cluster.deploy.testing import become_subreaper
from rmq_cluster.deploy.topology import resolve_profile

RUN_TIMEOUT_S = 180


def _chaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rmq_cluster.cli", "chaos", *args],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)


def test_a_busy_port_is_one_line_and_exit_1(tmp_path: Path) -> None:
    base = free_proxied_base_port(resolve_profile("single"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base))  # the NameServer's (proxied) port
        taken.listen()
        for extra in ([], ["--json"]):
            out = tmp_path / f"out{len(extra)}"
            done = _chaos("run", "--profile", "single", "--fault", "kill-master",
                          "--duration", "2", "--base-port", str(base), "--out", str(out), *extra)
            assert done.returncode == 1
            assert done.stdout == ""
            assert done.stderr.splitlines() == [
                f"rmq-cluster chaos: error: port {base} (namesrv-0 listenPort) is already in "
                "use; stop what holds it or pick another --base-port"
            ]


def test_a_fault_that_needs_the_proxy_is_a_usage_error() -> None:
    done = _chaos("run", "--profile", "single", "--fault", "partition", "--duration", "2",
                  "--no-proxy")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("rmq-cluster chaos: error: partition needs the chaos "
                                   "proxy (drop --no-proxy)")


@pytest.mark.slow
def test_json_run_progress_timeline_and_check(tmp_path: Path) -> None:
    become_subreaper()  # the cluster's nodes are reaped here if the CLI dies first
    out = tmp_path / "run"
    done = _chaos("run", "--profile", "single", "--fault", "kill-master", "--duration", "4",
                  "--fault-on", "2", "--fault-off", "1", "--rate", "40", "--producers", "2",
                  "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout.splitlines()) == 1  # --json: JSON lines
    result = json.loads(done.stdout)  # stdout is the result and nothing else
    assert result["verdict"] == "PASS" and result["mode"] == "NONE"
    progress = [ln for ln in done.stderr.splitlines() if re.search(r"s/6s ", ln)]
    assert progress, done.stderr
    last = progress[-1]
    for word in ("sent", "acked", "failed", "unknown", "fault"):
        assert f" {word} " in last
    sent = int(re.search(r" sent (\d+)", last).group(1))  # type: ignore[union-attr]
    assert 0 < sent <= result["invoked"]
    svg = Path(result["timeline"])
    assert svg == out.resolve() / "timeline.svg"
    root = ET.parse(svg).getroot()
    classes = [el.get("class") for el in root.iter()]
    assert classes.count("fault") == len(result["faults"]) == 1
    assert classes.count("series") == 3
    check = _chaos("check", str(out / "history.jsonl"), "--json")  # no --mode
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["acked"] == result["acked"]
