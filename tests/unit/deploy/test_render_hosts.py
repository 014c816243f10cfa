"""``rmq-cluster render``: per-host port plan, NameServers ready before brokers, systemd units."""

from __future__ import annotations

import configparser
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rmq_cluster.cluster.config import parse_properties
from rmq_cluster.deploy import render
from rmq_cluster.deploy.topology import BUILTIN_PROFILES, build_topology, resolve_profile

HOSTS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def _plan(profile: str, hosts: list[str] = HOSTS):  # type: ignore[no-untyped-def]
    return render.per_host_plan(build_topology(resolve_profile(profile), hosts=hosts))


@pytest.mark.parametrize("profile", list(BUILTIN_PROFILES))
def test_every_host_has_its_own_plan(profile: str) -> None:
    topo = _plan(profile)
    single = build_topology(resolve_profile(profile))
    for host in HOSTS:
        ns = [n.port for n in topo.namesrvs if n.host == host]
        brokers = [n.port for n in topo.brokers if n.host == host]
        assert ns == [9876 + i for i in range(len(ns))]
        assert brokers == [10911 + 10 * j for j in range(len(brokers))]
        for kind in {n.kind for n in topo.nodes}:  # any other kind: its first plan ports
            here = [n.port for n in topo.nodes if n.host == host and n.kind == kind]
            plan = sorted(n.port for n in single.nodes if n.kind == kind)
            assert here == plan[: len(here)]
    # every NameServer here is the first of its host: all on 9876
    assert topo.namesrv_addr == ";".join(f"{h}:9876" for h in HOSTS[: len(topo.namesrvs)])
    files = render.host_files(topo)
    for node in topo.nodes:
        props = parse_properties(files[f"{node.host}/conf/{node.name}.properties"])
        assert props["listenPort"] == str(node.port)
        if node.is_broker:
            assert props["namesrvAddr"] == topo.namesrv_addr
        if node.is_broker and node.dledger_id is not None:
            # the peers name each member's own host and per-host port
            peers = props["dLegerPeers"].split(";")
            assert f"{node.dledger_id}-{node.host}:{node.port + 2}" in peers


def test_one_host_keeps_the_single_host_plan() -> None:
    topo = build_topology(resolve_profile("2m-2s-async"), hosts=["h1"])
    assert render.per_host_plan(topo) == topo


@pytest.mark.parametrize("profile", list(BUILTIN_PROFILES))
def test_start_script_waits_for_namesrvs_before_brokers(profile: str) -> None:
    topo = _plan(profile)
    files = render.host_files(topo)
    for host in HOSTS:
        start = files.get(f"{host}/start.sh")
        if start is None:
            continue
        for branch in start.split("\nelse\n"):
            lines = branch.splitlines()
            starts = [i for i, ln in enumerate(lines) if "nohup" in ln]
            waits = [i for i, ln in enumerate(lines) if ln.strip() == "sh ./wait-namesrv.sh"]
            brokers = [i for i, ln in enumerate(lines) if "nohup" in ln
                       and ("rmq_cluster.broker" in ln or "mqbroker" in ln)]
            namesrvs = sorted(set(starts) - set(brokers))
            if brokers:
                assert len(waits) == 1
                assert all(n < waits[0] < b for n in namesrvs for b in brokers)
        wait = files[f"{host}/wait-namesrv.sh"]
        local = [f"127.0.0.1:{n.port}" for n in topo.namesrvs if n.host == host]
        assert shlex.quote(",".join(local)) in wait


def _run_wait(tmp_path: Path, local: list[str], remote: list[str], wait_s: float) -> (
        subprocess.CompletedProcess[str]):
    path = tmp_path / "wait-namesrv.sh"
    path.write_text(render.wait_script(local, remote))
    return subprocess.run(
        ["sh", str(path)], capture_output=True, text=True, timeout=30, check=False,
        env={"PYTHON": sys.executable, "NAMESRV_WAIT_S": str(wait_s),
             "NAMESRV_WAIT_REMOTE_S": "0.3", "PATH": "/usr/bin:/bin"},
    )


def test_wait_script_succeeds_on_a_listening_port_and_fails_by_its_deadline(
    tmp_path: Path,
) -> None:
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        up = f"127.0.0.1:{listening.getsockname()[1]}"
        down = f"127.0.0.1:{closed.getsockname()[1]}"
        ok = _run_wait(tmp_path, [up], [down], 5)
        assert ok.returncode == 0, ok.stderr
        assert "NameServers ready" in ok.stdout and down in ok.stderr  # remote: a note only
        failed = _run_wait(tmp_path, [up, down], [], 0.5)
        assert failed.returncode == 1
        assert failed.stderr.strip() == f"NameServer not ready after 0.5s: {down}"
        # a host without a NameServer needs any one of the others
        assert _run_wait(tmp_path, [], [down, up], 5).returncode == 0
        assert _run_wait(tmp_path, [], [down], 0.5).returncode == 1


def test_systemd_units() -> None:
    topo = _plan("2m-2s-async")
    files = render.host_files(topo, install_dir="/srv/rmq", python="/opt/py/bin/python3")
    units = {k: v for k, v in files.items() if "/systemd/" in k}
    assert len(units) == len(topo.nodes)
    for node in topo.nodes:
        text = units[f"{node.host}/systemd/rmq-cluster-{node.name}.service"]
        unit = configparser.ConfigParser(strict=False, interpolation=None)
        unit.optionxform = str  # type: ignore[assignment,method-assign]
        unit.read_string(text)
        svc = unit["Service"]
        assert svc["Restart"] == "on-failure"
        assert svc["WorkingDirectory"] == "/srv/rmq"
        words = shlex.split(svc["ExecStart"])
        assert words[:3] == ["/opt/py/bin/python3", "-m", f"rmq_cluster.{node.kind}"]
        assert words[3:5] == ["-c", f"conf/{node.name}.properties"]
        local_ns = [f"rmq-cluster-{n.name}.service" for n in topo.namesrvs
                    if n.host == node.host]
        if node.is_broker:
            assert words[5:] == ["-n", topo.namesrv_addr]
            assert svc["ExecStartPre"] == "/bin/sh /srv/rmq/wait-namesrv.sh"
            for name in local_ns:
                assert name in unit["Unit"]["After"].split()
                assert name in unit["Unit"]["Wants"].split()
        else:
            assert "ExecStartPre" not in svc
        assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_render_command_writes_units_and_the_per_host_plan(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "rmq_cluster.cli", "render", "dledger", "--hosts",
         ",".join(HOSTS), "--out", str(out), "--install-dir", "/srv/x", "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert '"namesrv_addr": "10.0.0.1:9876;10.0.0.2:9876"' in done.stdout.replace("\n", "")
    for host in HOSTS:
        assert (out / host / "wait-namesrv.sh").stat().st_mode & 0o111
        unit = (out / host / "systemd").iterdir().__next__().read_text()
        assert "WorkingDirectory=/srv/x" in unit
        conf = parse_properties(next((out / host / "conf").glob("broker-*")).read_text())
        assert conf["listenPort"] == "10911"
