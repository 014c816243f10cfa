"""``rmq-cluster restart`` and ``up`` bring back a DLedger group whose members are all dead
(issue 31 item 2), on their data: ``restart`` of one member of a group with no running
majority starts its stopped peers with it (one member alone could never elect a leader, so it
used to time out and be stopped again); ``up`` on a partly running cluster starts its dead
nodes (it used to answer "already running; nothing to do").  Every acknowledged message reads
back afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmq_cluster.deploy.testing import cli, pid_running
from tests.integration.dledger.dledger_process_testlib import (
    process_cluster,
    produce,
    read_all,
)

#: restart/up give up after this (old main waited this long for a leader that never came)
READY_S = "20"


def _leader_addr(nodes: dict[str, dict[str, object]]) -> str:
    leader = next(iter(nodes.values()))["leader"]
    return next(str(v["addr"]) for n, v in nodes.items() if n.endswith(f"-{leader}"))


@pytest.mark.slow
def test_restart_and_up_revive_a_dead_dledger_group(tmp_path: Path) -> None:
    with process_cluster(tmp_path) as cluster:
        acked = produce(cluster, "first", 50)
        members = sorted(cluster.brokers())
        cluster.kill(members)  # the whole group is dead; the NameServers still run

        done = cli("restart", members[0], "--dir", str(cluster.dir), "--timeout", READY_S,
                   "--json")
        assert done.returncode == 0, done.stderr
        assert sorted(json.loads(done.stdout)["restarted"]) == members
        nodes = cluster.wait_settled()
        assert all(pid_running(int(v["pid"])) for v in nodes.values())
        acked += produce(cluster, "second", 50)
        assert sorted(read_all(cluster, _leader_addr(cluster.wait_settled()))) == sorted(acked)

        cluster.kill(members)
        up = cli("up", "dledger", "--dir", str(cluster.dir), "--timeout", READY_S, "--json")
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        assert info["already_running"] is False and sorted(info["started"]) == members
        nodes = cluster.wait_settled()
        acked += produce(cluster, "third", 50)
        assert sorted(read_all(cluster, _leader_addr(cluster.wait_settled()))) == sorted(acked)

        again = cli("up", "dledger", "--dir", str(cluster.dir), "--json")
        assert json.loads(again.stdout)["already_running"] is True  # all alive: a no-op
