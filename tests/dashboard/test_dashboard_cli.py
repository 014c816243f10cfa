"""``rmq-cluster up --dashboard`` from the command line, in controller mode: the dashboard
serves the cluster ``up`` started (its replication page shows the controller's SyncStateSets,
asked with the cluster secret ``up`` handed it) and exits by itself once ``down`` stopped it."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import urllib.request
from pathlib import Path

import pytest

from rmq_cluster.dashboard.cli import PID_FILE
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import become_subreaper, cli, kill_leftovers, pid_running
from rmq_cluster.deploy.topology import resolve_profile
from tests.dashboard.dashboard_testlib import until
from tests.ports import free_port

pytestmark = pytest.mark.slow


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except OSError:
        return 0, ""


def test_up_dashboard_serves_the_cluster_and_stops_with_it() -> None:
    profile = "2m-2s-controller"
    become_subreaper()
    directory = Path(tempfile.mkdtemp(prefix="rmq-dash-cli-")) / "cluster"
    port = free_port()
    base = supervisor.free_base_port(resolve_profile(profile))
    pids: dict[str, int] = {}
    dash_pid = None
    try:
        done = cli("up", profile, "--dir", str(directory), "--base-port", str(base),
                   "--dashboard", str(port), "--json")
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        pids.update({n["name"]: n["pid"] for n in lines[0]["nodes"] if n.get("pid")})
        assert lines[1]["dashboard"] == f"http://127.0.0.1:{port}/"
        dash_pid = int((directory / PID_FILE).read_text())
        assert dash_pid == lines[1]["pid"]
        url = f"http://127.0.0.1:{port}/c/0/cluster"
        _, page = until(lambda: (lambda r: r if r[0] == 200 else None)(_get(url)), 60,
                        "the dashboard")
        assert "broker-a" in page and lines[0]["namesrv_addr"] in page
        _, page = _get(f"http://127.0.0.1:{port}/c/0/replication")
        assert 'id="sync-state"' in page, page
        assert "<td>broker-a</td>" in page and "<td>broker-b</td>" in page
        state = supervisor.load_state(directory.resolve())
        assert state.topology.cluster_secret not in page
        assert cli("down", "--dir", str(directory)).returncode == 0
        until(lambda: not pid_running(dash_pid), 30, "the dashboard to exit after down")
    finally:
        if dash_pid is not None and pid_running(dash_pid):
            os.kill(dash_pid, signal.SIGKILL)
        if (directory / supervisor.STATE_FILE).exists():
            cli("down", "--dir", str(directory), "--purge")
        kill_leftovers(directory, pids)
