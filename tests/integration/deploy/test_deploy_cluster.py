"""``rmq-cluster`` against real processes: up, status, demo round trip, kill, restart, pause,
down by pid, purge; refusals, busy ports, failures, --foreground and the pytest fixture.

Every test stops what it starts (``down`` and then SIGKILL by pid in ``finally``); clusters bind
127.0.0.1 on a base port whose whole plan was free a moment before.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq_cluster.cli.main import main
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import (
    become_subreaper,
    cli,
    kill_leftovers,
    pid_running,
    pids_running_from,
    rmq_cluster,
)
from rmq_cluster.deploy.topology import Topology, build_topology, resolve_profile

become_subreaper()  # nodes orphaned by the CLI subprocess are reaped by this process


def _status(d: Path) -> dict:
    """``rmq-cluster status --json`` in this process (the same code as the console script,
    without an interpreter start per call)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["status", "--json", "--dir", str(d)]) in (0, 1)  # 1: a node is down
    return json.loads(out.getvalue())


def _by_name(status: dict) -> dict[str, dict]:
    return {n["name"]: n for n in status["nodes"]}


@contextlib.contextmanager
def _cleanup(d: Path) -> Iterator[dict[str, int]]:
    """Yields a dict to record pids in; on exit downs the cluster and SIGKILLs leftovers."""
    seen: dict[str, int] = {}
    try:
        yield seen
    finally:
        with contextlib.suppress(supervisor.SupervisorError):
            for rec in supervisor.load_state(d).records():
                if rec.pid is not None:
                    seen.setdefault(f"{rec.name}@{rec.pid}", rec.pid)
        if (d / supervisor.STATE_FILE).exists():
            cli("down", "--dir", str(d))
        kill_leftovers(d, seen)


def _remember(d: Path, seen: dict[str, int]) -> None:
    for rec in supervisor.load_state(d).records():
        if rec.pid is not None:
            seen[f"{rec.name}@{rec.pid}"] = rec.pid


@pytest.mark.parametrize(
    ("profile", "victim"),
    [
        ("single", "broker-a"),
        ("2m-noslave", "broker-b"),
        ("2m-2s-async", "broker-a-s"),
        ("2m-2s-sync", "broker-b-s"),
        ("dledger", "broker-a-n1"),
    ],
)
def test_lifecycle(profile: str, victim: str, tmp_path: Path) -> None:
    d = tmp_path / "c"
    spec = resolve_profile(profile)
    base = supervisor.free_base_port(spec)
    with _cleanup(d) as seen:
        done = cli("up", profile, "--dir", str(d), "--base-port", str(base))
        assert done.returncode == 0, done.stderr + done.stdout
        assert f"cluster default ({profile}) ready in" in done.stdout
        _remember(d, seen)

        status = _status(d)
        topo = build_topology(spec, base_port=base)
        assert status["profile"] == profile and status["name"] == "default"
        assert status["namesrv_addr"] == topo.namesrv_addr
        nodes = _by_name(status)
        assert list(nodes) == [n.name for n in topo.nodes]
        for n in topo.nodes:
            got = nodes[n.name]
            assert got["alive"] is True and pid_running(got["pid"])
            assert (got["kind"], got["group"], got["addr"]) == (n.kind, n.group, n.addr)
            if n.role == "DLEDGER":  # the role and brokerId it holds now: 0 while leader
                assert got["role"] in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
                assert (got["broker_id"] == 0) == (got["role"] != "SLAVE")
            else:
                assert got["broker_id"] == n.broker_id
                assert got["role"] == n.role
            if n.kind == "broker" and n.role != "DLEDGER":
                assert got["commitlog_max_offset"] == 0

        # up again: a no-op that says so
        again = cli("up", profile, "--dir", str(d), "--json")
        assert again.returncode == 0, again.stderr
        info = json.loads(again.stdout)
        assert info["already_running"] is True
        assert {n["name"]: n["pid"] for n in info["nodes"]} == {
            k: v["pid"] for k, v in nodes.items()
        }
        # up numbers the nodes as status does (a DLedger peer: the brokerId it holds now)
        assert {n["name"]: (n["role"], n["broker_id"]) for n in info["nodes"]} == {
            k: (v["role"], v["broker_id"]) for k, v in _by_name(_status(d)).items()
        }

        # a produce/consume round trip through the client
        demo = cli("demo", "--dir", str(d), "--json", "--count", "6")
        assert demo.returncode == 0, demo.stderr + demo.stdout
        report = json.loads(demo.stdout)
        assert report["ok"] is True
        assert sorted(m["body"] for m in report["sent"]) == sorted(
            m["body"] for m in report["received"]
        )
        assert len(report["received"]) == 6
        offsets = [n["commitlog_max_offset"] for n in _status(d)["nodes"] if n["kind"] == "broker"]
        assert sum(offsets) > 0

        # kill a broker: status shows it dead, its pid is gone
        old_pid = nodes[victim]["pid"]
        killed = cli("kill", victim, "--dir", str(d), "--wait")
        assert killed.returncode == 0, killed.stderr
        assert not pid_running(old_pid)
        dead = _by_name(_status(d))[victim]
        assert dead["alive"] is False and dead["pid"] is None and dead["state"] == "dead"
        assert cli("kill", victim, "--dir", str(d)).returncode == 1  # not running: an error

        # restart: alive again with a new pid, and its data is still there
        restarted = cli("restart", victim, "--dir", str(d), "--json")
        assert restarted.returncode == 0, restarted.stderr
        _remember(d, seen)
        back = _by_name(_status(d))[victim]
        assert back["alive"] is True and back["pid"] != old_pid and pid_running(back["pid"])
        if topo.node(victim).broker_id == 0 and topo.node(victim).role != "DLEDGER":
            assert back["commitlog_max_offset"] == nodes_offsets_before(offsets, topo, victim)

        # pause / resume
        assert cli("pause", victim, "--dir", str(d)).returncode == 0
        assert _by_name(_status(d))[victim]["state"] == "paused"
        assert cli("resume", victim, "--dir", str(d)).returncode == 0
        assert _by_name(_status(d))[victim]["state"] == "running"

        # logs and nodes
        logs = cli("logs", victim, "--dir", str(d), "-n", "50")
        assert logs.returncode == 0 and "boot success" in logs.stdout
        listed = cli("nodes", "--dir", str(d), "--json")
        assert json.loads(listed.stdout) == [n.name for n in topo.nodes]

        # down: no process left (by pid); data kept; --purge deletes it
        pids = [n["pid"] for n in _status(d)["nodes"]]
        down = cli("down", "--dir", str(d))
        assert down.returncode == 0, down.stderr
        assert not any(pid_running(p) for p in pids)
        assert not any(pid_running(p) for p in seen.values())
        assert pids_running_from(str(d.resolve() / "conf")) == []
        assert (d / supervisor.STATE_FILE).exists() and (d / "store").exists()
        assert all(n["alive"] is False for n in _status(d)["nodes"])
        purge = cli("down", "--purge", "--dir", str(d))
        assert purge.returncode == 0, purge.stderr
        assert not d.exists()


def nodes_offsets_before(offsets: list[int], topo: Topology, victim: str) -> int:
    names = [n.name for n in topo.brokers]
    return offsets[names.index(victim)]


def test_namesrv_kill_and_restart(tmp_path: Path) -> None:
    d = tmp_path / "c"
    base = supervisor.free_base_port(resolve_profile("2m-noslave"))
    with _cleanup(d) as seen:
        assert cli("up", "2m-noslave", "--dir", str(d), "--base-port", str(base)).returncode == 0
        _remember(d, seen)
        killed = cli("kill", "namesrv-1", "--signal", "TERM", "--wait", "--dir", str(d))
        assert killed.returncode == 0, killed.stderr
        assert _by_name(_status(d))["namesrv-1"]["alive"] is False
        done = cli("restart", "namesrv-1", "--dir", str(d))
        assert done.returncode == 0, done.stderr
        _remember(d, seen)
        assert all(n["alive"] for n in _status(d)["nodes"])
        # down keeps the cluster; up brings it back on its own plan (no --base-port needed)
        assert cli("down", "--dir", str(d)).returncode == 0
        assert not any(pid_running(p) for p in seen.values())
        again = cli("up", "2m-noslave", "--dir", str(d), "--json")
        assert again.returncode == 0, again.stderr
        _remember(d, seen)
        info = json.loads(again.stdout)
        assert info["already_running"] is False
        assert info["namesrv_addr"] == f"127.0.0.1:{base};127.0.0.1:{base + 1}"
        assert all(n["alive"] for n in _status(d)["nodes"])
        moved = cli("up", "2m-noslave", "--dir", str(d), "--base-port", str(base + 1))
        assert moved.returncode == 1 and "down --purge" in moved.stderr
        assert cli("down", "--purge", "--dir", str(d)).returncode == 0
        assert not any(pid_running(p) for p in seen.values())
        assert not d.exists()


def test_busy_port_is_named_and_nothing_starts(tmp_path: Path) -> None:
    spec = resolve_profile("2m-noslave")
    base = supervisor.free_base_port(spec)
    topo = build_topology(spec, base_port=base)
    busy = topo.brokers[1].port
    d = tmp_path / "c"
    with _cleanup(d), socket.socket() as holder:
        holder.bind(("127.0.0.1", busy))
        holder.listen()
        done = cli("up", "2m-noslave", "--dir", str(d), "--base-port", str(base))
        assert done.returncode == 1
        assert done.stderr.strip() == (
            f"rmq-cluster: error: port {busy} (broker-b listenPort) is already in use; "
            "stop what holds it or pick another --base-port"
        )
        assert not d.exists()  # nothing written, nothing started


def test_a_node_that_fails_to_start_is_reported_with_its_log(tmp_path: Path) -> None:
    profile = tmp_path / "broken.toml"
    profile.write_text('base = "single"\n[broker_properties]\nbrokerPermission = "99"\n')
    d = tmp_path / "c"
    base = supervisor.free_base_port(resolve_profile(str(profile)))
    with _cleanup(d) as seen:
        done = cli("up", str(profile), "--dir", str(d), "--base-port", str(base))
        assert done.returncode == 1
        # progress lines ("started namesrv-0; waiting until ready") come first, then one error
        errors = [ln for ln in done.stderr.splitlines() if ln.startswith("rmq-cluster: error:")]
        assert errors[0].startswith(
            "rmq-cluster: error: node broker-a failed: exited during startup"
        ), done.stderr
        assert done.stdout == ""
        assert "brokerPermission" in done.stderr  # the tail of broker-a's log
        _remember(d, seen)
        state = supervisor.load_state(d)
        assert all(r.pid is None for r in state.records())  # namesrv-0 was stopped too
        assert not any(pid_running(p) for p in seen.values())
        assert pids_running_from(str(d.resolve() / "conf")) == []


def test_errors_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    for args in (["status"], ["down"], ["kill", "broker-a"], ["logs", "broker-a"], ["demo"]):
        done = cli(*args, "--dir", str(missing))
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("rmq-cluster: error: no ")
    done = cli("up", "nope", "--dir", str(missing))
    assert done.returncode == 1 and "unknown profile 'nope'" in done.stderr


def test_foreground_stops_everything_on_sigterm(tmp_path: Path) -> None:
    d = tmp_path / "c"
    base = supervisor.free_base_port(resolve_profile("single"))
    root = str(Path(supervisor.__file__).resolve().parents[1])
    with _cleanup(d) as seen:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rmq_cluster.cli", "up", "single", "--foreground",
             "--dir", str(d), "--base-port", str(base)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # the supervisor's own progress lines; ends at "attached"
                if line.startswith("attached"):
                    break
            else:
                err = proc.stderr.read() if proc.stderr else ""
                pytest.fail(f"--foreground never attached: {err}")
            _remember(d, seen)
            assert all(n["alive"] for n in _status(d)["nodes"])
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            assert "stopped" in out
            assert not any(pid_running(p) for p in seen.values())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_fixture_runs_and_always_downs_a_cluster() -> None:
    seen: dict[str, int] = {}
    with pytest.raises(RuntimeError, match="boom"), rmq_cluster("single") as cluster:
        assert cluster.namesrv_addr.startswith("127.0.0.1:")
        assert [n["name"] for n in cluster.nodes] == ["namesrv-0", "broker-a"]
        seen = cluster.pids()
        assert all(pid_running(p) for p in seen.values())
        assert cluster.node("broker-a")["alive"] is True
        directory = cluster.dir
        raise RuntimeError("boom")
    assert seen and not any(pid_running(p) for p in seen.values())
    assert not directory.exists()


def test_fixture_factory(rmq_cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = rmq_cluster_factory("single")
    assert cluster.status()["nodes"][1]["role"] == "ASYNC_MASTER"



def test_promote_a_slave_when_its_master_is_gone(tmp_path: Path) -> None:
    spec = resolve_profile("2m-2s-async")
    d = tmp_path / "c"
    base = supervisor.free_base_port(spec)
    with _cleanup(d) as seen:
        assert cli("up", "2m-2s-async", "--dir", str(d), "--base-port", str(base)).returncode == 0
        _remember(d, seen)
        assert json.loads(cli("demo", "--dir", str(d), "--json").stdout)["ok"] is True
        refused = cli("promote", "broker-a-s", "--dir", str(d))
        assert refused.returncode == 1 and "still running" in refused.stderr
        assert cli("kill", "broker-a", "--wait", "--dir", str(d)).returncode == 0
        done = cli("promote", "broker-a-s", "--dir", str(d))
        assert done.returncode == 0, done.stderr
        _remember(d, seen)
        nodes = _by_name(_status(d))
        promoted = nodes["broker-a-s"]
        assert (promoted["role"], promoted["broker_id"], promoted["alive"]) == (
            "ASYNC_MASTER", 0, True
        )
        # the old master comes back as the new master's slave
        assert cli("restart", "broker-a", "--dir", str(d)).returncode == 0
        _remember(d, seen)
        nodes = _by_name(_status(d))
        assert (nodes["broker-a"]["role"], nodes["broker-a"]["broker_id"]) == ("SLAVE", 1)
        assert nodes["broker-a"]["ha_connected"] is True
        assert json.loads(cli("demo", "--dir", str(d), "--json").stdout)["ok"] is True
        assert cli("down", "--purge", "--dir", str(d)).returncode == 0
        assert not any(pid_running(p) for p in seen.values())


def test_only_our_processes_are_signalled(tmp_path: Path) -> None:
    """A pid is ours only with the recorded start time and our conf on its command line."""
    topo = build_topology(resolve_profile("single"), base_port=30000)
    state = supervisor.new_state("t", tmp_path, topo, sys.executable)
    rec = state.node("namesrv-0")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", rec.conf], stdin=subprocess.PIPE
    )
    try:
        stat = supervisor._read_stat(proc.pid)
        assert stat is not None
        rec.pid, rec.start_time = proc.pid, stat[1]
        assert rec.is_ours() and rec.state() == "running"
        other = supervisor.NodeRecord(rec.spec, "/elsewhere.properties", rec.log, rec.pid_file,
                                      rec.cmd, pid=proc.pid, start_time=stat[1])
        assert pid_running(proc.pid)
        for _ in range(1000):  # once exec has put the arguments in place
            if supervisor._cmdline(proc.pid):
                break
        assert supervisor._cmdline(proc.pid)
        assert not other.is_ours() and not other.signal(signal.SIGKILL)
        reused = supervisor.NodeRecord(rec.spec, rec.conf, rec.log, rec.pid_file, rec.cmd,
                                       pid=proc.pid, start_time=stat[1] - 1)
        assert not reused.is_ours() and reused.state() == "dead"
    finally:
        proc.kill()
        proc.wait()
    assert rec.state() == "dead"


def test_down_stops_a_node_whose_pid_was_lost(tmp_path: Path) -> None:
    d = tmp_path / "c"
    base = supervisor.free_base_port(resolve_profile("single"))
    with _cleanup(d) as seen:
        assert cli("up", "single", "--dir", str(d), "--base-port", str(base)).returncode == 0
        _remember(d, seen)
        state = supervisor.load_state(d)
        lost = state.node("broker-a").pid
        state.node("broker-a").pid = None  # as if `up` died before saving it
        state.save()
        assert supervisor.stray_pids(state) == [lost]
        done = cli("down", "--json", "--dir", str(d))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["strays"] == [lost]
        assert not any(pid_running(p) for p in seen.values())
        assert pids_running_from(str(d.resolve() / "conf")) == []
