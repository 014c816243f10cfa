"""The pytest plugin as a user gets it: loaded through its ``pytest11`` entry point only (no
``pytest_plugins``, no ``-p``), in a pytest run in a subprocess (pytester), against a real
cluster: settings from the ini file, the command line and the environment, one cluster for the
session with a fresh namespace per test, seeding, and nothing started when no test asks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from rmq_cluster.deploy.testing import (
    SettingsError,
    parse_port_range,
    pid_running,
    resolve_settings,
)

pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parents[3]
PLUGIN = "rmq_cluster.deploy.testing"
RUN_TIMEOUT_S = 240

INNER_TESTS = '''
from rmq_cluster.client.sync import SyncPullConsumer

SEEN = []

def test_seed_and_read_back(rmq, rmq_seed, rmq_session_cluster):
    seeded = rmq_seed({"Orders": [b"m1", "m2"], "Empty": []})
    assert seeded.topics == {"Orders": rmq.topic("Orders"), "Empty": rmq.topic("Empty")}
    assert seeded.sent["Empty"] == ()
    second = seeded.sent["Orders"][1]
    with SyncPullConsumer(rmq.group("reader"), namesrv_addr=rmq.namesrv_addr) as consumer:
        assert second.queue in consumer.fetch_queues(rmq.topic("Orders"))
        pulled = consumer.pull(second.queue, second.queue_offset)
    assert pulled.messages[0].body == b"m2"
    assert rmq.cluster is rmq_session_cluster
    SEEN.append((rmq.namesrv_addr, rmq.suffix))
    print("BASE_PORT", rmq_session_cluster.base_port)

def test_another_namespace_on_the_same_cluster(rmq):
    assert rmq.create_topic("Orders") == rmq.topic("Orders")
    SEEN.append((rmq.namesrv_addr, rmq.suffix))
    (first_addr, first_ns), (addr, ns) = SEEN
    assert addr == first_addr and ns != first_ns
'''


@pytest.fixture
def entry_point_only(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner pytest sees the plugin only as pyproject.toml declares it: a distribution
    whose ``entry_points.txt`` holds the ``pytest11`` table (what ``pip install`` writes)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    table = project["entry-points"]["pytest11"]
    assert table == {PLUGIN: PLUGIN}
    site = pytester.path / "site"
    dist = site / "rmq_cluster_entry_point_probe-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rmq-cluster-entry-point-probe\nVersion: 0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{name} = {value}\n" for name, value in table.items())
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    for var in ("RMQ_CLUSTER_TEST_PROFILE", "RMQ_CLUSTER_TEST_PORTS",
                "RMQ_CLUSTER_TEST_ISOLATION"):
        monkeypatch.delenv(var, raising=False)


def _base_ports(out: str) -> list[int]:
    return [int(p) for p in re.findall(r"BASE_PORT (\d+)", out)]


@pytest.mark.slow
@pytest.mark.usefixtures("entry_point_only")
def test_plugin_through_the_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nrmq_port_range = 21000-23500\n")
    pytester.makepyfile(test_app=INNER_TESTS)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider",
                                           timeout=RUN_TIMEOUT_S)
    out = result.stdout.str()
    assert result.ret == 0, out + result.stderr.str()
    result.assert_outcomes(passed=2)
    # one cluster for the session, in the ini's port range
    assert len(re.findall(r"rmq-cluster: started single for the session", out)) == 1
    (base,) = _base_ports(out)
    assert 21000 <= base < 23500
    # the command line wins over the ini file
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider",
                                           "--rmq-port-range", "24000-26500",
                                           "-k", "seed_and_read_back", timeout=RUN_TIMEOUT_S)
    assert result.ret == 0, result.stdout.str()
    (base,) = _base_ports(result.stdout.str())
    assert 24000 <= base < 26500


@pytest.mark.usefixtures("entry_point_only")
def test_plugin_loaded_but_lazy_and_settings_checked(pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = pytester.runpytest_subprocess("--help", timeout=RUN_TIMEOUT_S)
    assert "--rmq-port-range=LOW-HIGH" in result.stdout.str()  # the entry point loaded it
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=RUN_TIMEOUT_S)
    assert result.ret == 0
    assert "rmq-cluster:" not in result.stdout.str()  # no test asked: nothing started
    monkeypatch.setenv("RMQ_CLUSTER_TEST_PORTS", "9-5")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=RUN_TIMEOUT_S)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: rmq-cluster: RMQ_CLUSTER_TEST_PORTS: port range must have 1024 < LOW < "
            "HIGH <= 65535, got '9-5'") in result.stderr.str()


def test_settings_precedence_and_validation() -> None:
    none: dict[str, str] = {}
    assert resolve_settings({}, none, none).port_range == (11000, 32000)
    ini = {"port_range": "12000-14000", "profile": "2m-noslave"}
    env = {"RMQ_CLUSTER_TEST_PORTS": "15000-17000"}
    got = resolve_settings({"port_range": None}, env, ini)
    assert got.port_range == (15000, 17000) and got.profile == "2m-noslave"
    got = resolve_settings({"port_range": "18000-20000", "isolation": "cluster"}, env, ini)
    assert got.port_range == (18000, 20000) and got.isolation == "cluster"
    with pytest.raises(SettingsError, match=r"^RMQ_CLUSTER_TEST_ISOLATION: isolation must"):
        resolve_settings({}, {"RMQ_CLUSTER_TEST_ISOLATION": "none"}, none)
    with pytest.raises(SettingsError, match=r"^--rmq-profile: unknown profile"):
        resolve_settings({"profile": "nope"}, none, none)
    for bad in ("", "1-2", "20000", "20000-20010", "30000-20000", "20000-70000", "a-b"):
        with pytest.raises(SettingsError):
            parse_port_range(bad)
    with pytest.raises(SettingsError, match="ephemeral"):
        parse_port_range("40000-45000", ephemeral=(32768, 60999))
    assert parse_port_range("30000-45000", ephemeral=(32768, 60999)) == (30000, 45000)


TERMINATED_INNER = '''
import json, os, time

def test_waits_to_be_terminated(rmq_session_cluster):
    pids = rmq_session_cluster.pids()
    with open(os.environ["PIDS_FILE"] + ".tmp", "w") as f:
        json.dump(pids, f)
    os.replace(os.environ["PIDS_FILE"] + ".tmp", os.environ["PIDS_FILE"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the outer test terminates us long before
        time.sleep(0.2)
'''

#: The terminated run stops its cluster within this (a `down` and its SIGKILL fallback).
TERMINATED_EXIT_S = 60.0


@pytest.mark.usefixtures("entry_point_only")
def test_a_terminated_run_stops_its_clusters(pytester: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM to pytest (what CI and `timeout` send) unwinds the run like Ctrl-C: the
    session cluster's nodes, each in a session of its own, are stopped, not left behind."""
    pids_file = pytester.path / "pids.json"
    monkeypatch.setenv("PIDS_FILE", str(pids_file))
    pytester.makepyfile(test_terminated=TERMINATED_INNER)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                             "--rmq-port-range", "26500-29000"], cwd=pytester.path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    pids: dict[str, int] = {}
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not pids_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pids_file.exists(), proc.communicate(timeout=30)[0].decode()
        pids = json.loads(pids_file.read_text())
        assert pids and all(pid_running(pid) for pid in pids.values())
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=TERMINATED_EXIT_S)[0].decode()
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
        left = [name for name, pid in pids.items() if pid_running(pid)]
        assert not left, f"nodes left running after SIGTERM: {left}\n{out}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids.values():
            if pid_running(pid):
                os.kill(pid, signal.SIGKILL)
